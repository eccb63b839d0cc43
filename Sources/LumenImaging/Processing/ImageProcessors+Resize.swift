import Foundation

extension ImageProcessors {
    /// Resizes to a target size in pixels with the high-quality ``Resampler``.
    ///
    /// The contract:
    /// - `.aspectFit` scales so the whole image fits inside the target; `.aspectFill` scales so
    ///   it covers the target. With `crop` (fill only) the centre is cut out so the result is
    ///   exactly the target size, unless the image is smaller and `upscale` is off.
    /// - A side left unconstrained (``init(width:upscale:)``, ``init(height:upscale:)``) follows
    ///   the aspect ratio.
    /// - Never upscales unless `upscale` is set; an image already at the computed size is
    ///   returned unchanged.
    public struct Resize: ImageProcessing, Hashable {
        /// Target width in pixels; `nil` leaves the width to the aspect ratio.
        public var width: Int?
        /// Target height in pixels; `nil` leaves the height to the aspect ratio.
        public var height: Int?
        /// How the target is filled.
        public var contentMode: ContentMode
        /// With `.aspectFill`, whether the result is cropped (centred) to the target size.
        public var crop: Bool
        /// Whether an image smaller than the target is scaled up.
        public var upscale: Bool
        /// The resampling filter. Default ``Resampler/Filter/lanczos3``.
        public var filter: Resampler.Filter

        /// Resizes to `size` (pixels) with `contentMode`.
        /// - Precondition: both sides are positive.
        public init(
            size: (width: Int, height: Int), contentMode: ContentMode = .aspectFill,
            crop: Bool = false, upscale: Bool = false, filter: Resampler.Filter = .lanczos3
        ) {
            precondition(size.width > 0 && size.height > 0, "Resize: size must be positive, got \(size.width)x\(size.height)")
            self.init(width: size.width, height: size.height, contentMode: contentMode, crop: crop, upscale: upscale, filter: filter)
        }

        /// Resizes to `size` in **pixels** (Nuke's form takes points and a unit; Lumen has no
        /// screen scale: multiply by it first). Fractional sides are rounded up.
        /// - Precondition: both sides are positive and finite.
        public init(
            size: CGSize, contentMode: ContentMode = .aspectFill, crop: Bool = false, upscale: Bool = false,
            filter: Resampler.Filter = .lanczos3
        ) {
            precondition(size.width.isFinite && size.height.isFinite && size.width > 0 && size.height > 0,
                         "Resize: size must be positive, got \(size.width)x\(size.height)")
            precondition(size.width <= CGFloat(Int.max / 2) && size.height <= CGFloat(Int.max / 2), "Resize: size too large")
            self.init(
                size: (width: Int(size.width.rounded(.up)), height: Int(size.height.rounded(.up))),
                contentMode: contentMode, crop: crop, upscale: upscale, filter: filter)
        }

        /// Resizes to `width` pixels wide, the height following the aspect ratio.
        public init(width: Int, upscale: Bool = false) {
            precondition(width > 0, "Resize: width must be positive, got \(width)")
            self.init(width: width, height: nil, contentMode: .aspectFit, crop: false, upscale: upscale, filter: .lanczos3)
        }

        /// Resizes to `height` pixels high, the width following the aspect ratio.
        public init(height: Int, upscale: Bool = false) {
            precondition(height > 0, "Resize: height must be positive, got \(height)")
            self.init(width: nil, height: height, contentMode: .aspectFit, crop: false, upscale: upscale, filter: .lanczos3)
        }

        /// Resizes so that the longest side is `maxPixelSize` pixels (aspect fit into a square).
        public init(maxPixelSize: Int, upscale: Bool = false) {
            precondition(maxPixelSize > 0, "Resize: maxPixelSize must be positive, got \(maxPixelSize)")
            self.init(
                width: maxPixelSize, height: maxPixelSize, contentMode: .aspectFit, crop: false, upscale: upscale,
                filter: .lanczos3)
        }

        private init(width: Int?, height: Int?, contentMode: ContentMode, crop: Bool, upscale: Bool, filter: Resampler.Filter) {
            self.width = width
            self.height = height
            self.contentMode = contentMode
            self.crop = crop
            self.upscale = upscale
            self.filter = filter
        }

        /// The size `process` resamples an image of `imageWidth`×`imageHeight` to, before any
        /// crop.
        public func scaledSize(imageWidth w: Int, imageHeight h: Int) -> (width: Int, height: Int) {
            let sx = width.map { Double($0) / Double(w) }
            let sy = height.map { Double($0) / Double(h) }
            var scale: Double
            switch (sx, sy) {
            case let (x?, y?): scale = contentMode == .aspectFit ? min(x, y) : max(x, y)
            case let (x?, nil): scale = x
            case let (nil, y?): scale = y
            case (nil, nil): scale = 1
            }
            if !upscale { scale = min(scale, 1) }
            // The side that decides the scale lands exactly on its target, free of rounding.
            let sw = scale == sx ? width! : max(1, Int(min((Double(w) * scale).rounded(), 1e12)))
            let sh = scale == sy ? height! : max(1, Int(min((Double(h) * scale).rounded(), 1e12)))
            return (sw, sh)
        }

        /// The largest image a resize produces (after the crop, when cropping), in pixels (100
        /// megapixels, the decoder's default limit): an upscale past it throws
        /// ``ImagingError/tooLarge(width:height:)``.
        public static let maximumOutputPixelCount = 100_000_000

        /// `image` resampled to ``scaledSize(imageWidth:imageHeight:)``, then, when cropping,
        /// cut to the centred target window (only that window is resampled).
        /// - Throws: ``ImagingError/tooLarge(width:height:)`` when the result would exceed
        ///   ``maximumOutputPixelCount``.
        public func process(_ image: Bitmap) throws -> Bitmap {
            let (sw, sh) = scaledSize(imageWidth: image.width, imageHeight: image.height)
            // The output is the crop when there is one: only that window is ever built.
            let cropping = crop && contentMode == .aspectFill
            let cw = cropping ? min(width ?? sw, sw) : sw, ch = cropping ? min(height ?? sh, sh) : sh
            let (area, overflow) = cw.multipliedReportingOverflow(by: ch)
            if overflow || area > Self.maximumOutputPixelCount { throw ImagingError.tooLarge(width: cw, height: ch) }
            if cw < sw || ch < sh {
                // Only the centre window is resampled: the full scaled image of a thin strip
                // filled with upscaling can be millions of rows.
                let x = (sw - cw) / 2, y = (sh - ch) / 2
                return Resampler.resample(
                    image, width: sw, height: sh, columns: x..<(x + cw), rows: y..<(y + ch), filter: filter)
            }
            return Resampler.resample(image, width: sw, height: sh, filter: filter)
        }

        /// `lumen.resize?width=…&height=…&contentMode=…&crop=0|1&upscale=0|1`, with `auto` for
        /// a side left to the aspect ratio and `&filter=…` appended unless the filter is
        /// ``Resampler/Filter/lanczos3``.
        public var identifier: String {
            var s = "lumen.resize?width=\(width.map(String.init) ?? "auto")&height=\(height.map(String.init) ?? "auto")"
            s += "&contentMode=\(contentMode.rawValue)&crop=\(crop ? 1 : 0)&upscale=\(upscale ? 1 : 0)"
            if filter != .lanczos3 { s += "&filter=\(filter.rawValue)" }
            return s
        }
    }
}

extension ImageProcessing where Self == ImageProcessors.Resize {
    /// ``ImageProcessors/Resize`` to a size in pixels.
    public static func resize(
        size: (width: Int, height: Int), contentMode: ContentMode = .aspectFill, crop: Bool = false, upscale: Bool = false
    ) -> Self {
        ImageProcessors.Resize(size: size, contentMode: contentMode, crop: crop, upscale: upscale)
    }

    /// ``ImageProcessors/Resize`` to a width, the height following the aspect ratio.
    public static func resize(width: Int, upscale: Bool = false) -> Self {
        ImageProcessors.Resize(width: width, upscale: upscale)
    }

    /// ``ImageProcessors/Resize`` to a height, the width following the aspect ratio.
    public static func resize(height: Int, upscale: Bool = false) -> Self {
        ImageProcessors.Resize(height: height, upscale: upscale)
    }

    /// ``ImageProcessors/Resize`` so the longest side is `maxPixelSize`.
    public static func resize(maxPixelSize: Int, upscale: Bool = false) -> Self {
        ImageProcessors.Resize(maxPixelSize: maxPixelSize, upscale: upscale)
    }
}
