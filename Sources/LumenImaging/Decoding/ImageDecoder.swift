import Foundation

/// What a header says about an image, read without decoding pixels.
public struct ImageInfo: Sendable, Hashable {
    /// The encoded format.
    public var format: ImageFormat
    /// Upright width in pixels (after EXIF orientation), the canvas width for animations.
    public var width: Int
    /// Upright height in pixels.
    public var height: Int
    /// Whether the image has an alpha channel.
    public var hasAlpha: Bool
    /// The stored EXIF orientation (`.up` when absent).
    public var orientation: ImageOrientation
    /// Number of frames: 1 for still images (and APNG, decoded as its first frame); an
    /// animated WebP's from its header, a GIF's counted from its block structure without
    /// decompressing any frame.
    public var frameCount: Int
}

/// How a decode went: what the codec produced before the resampler ran.
public struct DecodeStatistics: Sendable, Hashable {
    /// The encoded format.
    public var format: ImageFormat
    /// The image's natural upright width, in pixels.
    public var originalWidth: Int
    /// The image's natural upright height, in pixels.
    public var originalHeight: Int
    /// The width the codec decoded at, in pixels, in stored orientation (smaller than the
    /// original when JPEG DCT scaling or WebP scaled decoding shrank it).
    public var codecWidth: Int
    /// The height the codec decoded at, in pixels, in stored orientation.
    public var codecHeight: Int
    /// The stored EXIF orientation that was applied (or would have been).
    public var orientation: ImageOrientation
    /// Whether the resampler ran after the codec.
    public var isResampled: Bool
    /// How many frames the source has (1 for a still image; the decode gave the first).
    public var frameCount: Int = 1

    /// The codec's linear scale against the original, 1 for a full-size decode.
    public var codecScale: Double {
        let stored = orientation.swapsDimensions ? originalHeight : originalWidth
        return Double(codecWidth) / Double(stored)
    }
}

/// A decoded still image.
public struct DecodedImage: Sendable {
    /// Upright pixels at the requested size.
    public var bitmap: Bitmap
    /// `true` when the data was incomplete (a truncated progressive JPEG) and this is the
    /// full-frame preview the decoder could recover.
    public var isPartial: Bool
    /// How the decode went.
    public var statistics: DecodeStatistics
}

/// One frame of an animation, composited onto the canvas.
public struct AnimationFrame: Sendable {
    /// The whole canvas after this frame was drawn (disposal and transparency applied).
    public var bitmap: Bitmap
    /// How long the frame is shown, in seconds.
    public var duration: Double

    /// Creates a frame; each parameter sets the property of the same name.
    public init(bitmap: Bitmap, duration: Double) {
        self.bitmap = bitmap
        self.duration = duration
    }
}

/// Decodes JPEG, PNG, WebP, GIF (and HEIC/AVIF when built with libheif) into upright,
/// right-sized ``Bitmap``s.
///
/// Every entry point is safe to call concurrently from many threads: each call owns its C
/// handles for its whole duration. Decoding is synchronous CPU work; callers that care about
/// the cooperative pool run it on their own workers.
public enum ImageDecoder {
    /// Reads the header of `data`: format, upright size, alpha, orientation.
    /// - Throws: ``ImagingError``.
    public static func info(for data: Data) throws(ImagingError) -> ImageInfo {
        try withBytes(data) { bytes throws(ImagingError) in
            let header = try header(for: bytes, options: DecodeOptions())
            return header.info
        }
    }

    /// Decodes the first frame of `data` at the size `options` asks for, upright.
    ///
    /// The pixel limit is checked from the header before any pixels are allocated. JPEG is
    /// decoded at the largest DCT scale that still covers the target (per the pre-shrink rule),
    /// WebP scales while decoding, a non-interlaced PNG is block-averaged by a whole factor as
    /// its rows are decoded, and then the resampler produces the exact size.
    /// - Throws: ``ImagingError``; ``ImagingError/cancelled`` once `options.cancellation` is
    ///   cancelled (see ``DecodeCancellation`` for where the decoders look).
    public static func decode(_ data: Data, options: DecodeOptions = DecodeOptions()) throws(ImagingError) -> DecodedImage {
        try options.cancellation?.check()
        return try withBytes(data) { bytes throws(ImagingError) in
            let header = try header(for: bytes, options: options)
            try checkLimit(header, frames: 1, options: options)
            let geometry = Geometry(header: header, options: options)
            try geometry.checkOutputLimit(options)
            let output = try codec(for: header.format).decode(
                bytes, header: header, minimumSize: geometry.minimumCodecSize, options: options)
            let codecWidth = output.bitmap.width, codecHeight = output.bitmap.height
            try options.cancellation?.check()
            var isResampled = false
            let bitmap = geometry.finish(output.bitmap, extent: output.extent,
                                         orientation: options.appliesOrientation ? header.orientation : .up, resampled: &isResampled)
            return DecodedImage(
                bitmap: bitmap, isPartial: output.isPartial,
                statistics: DecodeStatistics(
                    format: header.format, originalWidth: header.info.width, originalHeight: header.info.height,
                    codecWidth: codecWidth, codecHeight: codecHeight,
                    orientation: header.orientation, isResampled: isResampled, frameCount: header.frameCount))
        }
    }

    /// Decodes every frame of an animation (GIF, animated WebP, APNG's first frame only),
    /// composited onto the canvas, upright and sized as `options` asks; a still image gives one
    /// frame. Frames × canvas area is checked against ``DecodeOptions/maximumPixelCount``.
    /// - Throws: ``ImagingError``.
    public static func decodeFrames(_ data: Data, options: DecodeOptions = DecodeOptions()) throws(ImagingError) -> [AnimationFrame] {
        try withBytes(data) { bytes throws(ImagingError) in
            let header = try header(for: bytes, options: options)
            try checkLimit(header, frames: header.frameCount, options: options)
            let geometry = Geometry(header: header, options: options)
            try geometry.checkOutputLimit(options, frames: header.frameCount)
            let frames = try codec(for: header.format).decodeFrames(bytes, header: header, options: options)
            let orientation = options.appliesOrientation ? header.orientation : .up
            return frames.map { frame in
                var resampled = false
                return AnimationFrame(bitmap: geometry.finish(frame.bitmap, orientation: orientation, resampled: &resampled), duration: frame.duration)
            }
        }
    }

    /// Decodes only as far as the codec goes: at the reduced scale (JPEG DCT scaling, WebP
    /// scaled decoding) that `options` would pick, without resampling, orienting or cropping.
    ///
    /// This is the floor that ``decode(_:options:)``'s cost is measured against: JPEG is always
    /// decoded by TurboJPEG here (never by Lumen's own 1/8-scale DC decoder, which
    /// ``decode(_:options:)`` uses for clean baseline JPEGs). The pixels are in stored
    /// orientation and at least the requested size.
    /// - Throws: ``ImagingError``.
    public static func decodeAtCodecScale(_ data: Data, options: DecodeOptions) throws(ImagingError) -> Bitmap {
        var options = options
        options.allowsReducedScaleDecoder = false
        return try withBytes(data) { bytes throws(ImagingError) in
            let header = try header(for: bytes, options: options)
            try checkLimit(header, frames: 1, options: options)
            let geometry = Geometry(header: header, options: options)
            return try codec(for: header.format).decode(
                bytes, header: header, minimumSize: geometry.minimumCodecSize, options: options).bitmap
        }
    }

    /// The upright output size a decode with `options` gives for an image whose upright size is
    /// `width`×`height`.
    public static func outputSize(width: Int, height: Int, options: DecodeOptions) -> (width: Int, height: Int) {
        let g = Geometry(uprightWidth: width, uprightHeight: height, swaps: false, options: options)
        return (g.cropWidth, g.cropHeight)
    }

    /// `image` — upright, at the size a full decode gives — brought to the size a decode with
    /// `options` gives: resampled, centre-cropped for an aspect fill, never upscaled unless
    /// `options` allows it. What the pipeline uses to make a smaller decode from a larger one
    /// it already holds instead of decoding the bytes again (`image`'s orientation is already
    /// applied, so `options.appliesOrientation` plays no part). Given an already reduced
    /// `image`, the output's sides follow from its size, so they may round one pixel away from
    /// a decode of the original.
    /// - Throws: ``ImagingError/tooLarge(width:height:)`` when an upscaled output would exceed
    ///   `options.maximumPixelCount`.
    public static func resize(_ image: Bitmap, options: DecodeOptions) throws(ImagingError) -> Bitmap {
        let geometry = Geometry(uprightWidth: image.width, uprightHeight: image.height, swaps: false, options: options)
        try geometry.checkOutputLimit(options)
        var resampled = false
        return geometry.finish(image, orientation: .up, resampled: &resampled)
    }

    // MARK: - Internals

    static func withBytes<T>(_ data: Data, _ body: (UnsafeRawBufferPointer) throws(ImagingError) -> T) throws(ImagingError) -> T {
        do {
            return try data.withUnsafeBytes { bytes in try body(bytes) }
        } catch let error as ImagingError {
            throw error
        } catch {
            throw ImagingError.corrupted(reason: "\(error)")
        }
    }

    static func header(for bytes: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        guard let format = ImageFormat(sniffing: bytes) else { throw .unsupportedFormat(nil) }
        let header = try codec(for: format).readHeader(bytes, options: options)
        guard header.width > 0, header.height > 0 else {
            throw .corrupted(reason: "header declares an empty \(header.width)x\(header.height) image")
        }
        return header
    }

    static func checkLimit(_ header: ImageHeader, frames: Int, options: DecodeOptions) throws(ImagingError) {
        let (area, overflow1) = header.width.multipliedReportingOverflow(by: header.height)
        let (total, overflow2) = area.multipliedReportingOverflow(by: max(frames, 1))
        if overflow1 || overflow2 || total > options.maximumPixelCount {
            throw .tooLarge(width: header.width, height: header.height)
        }
    }

    static func codec(for format: ImageFormat) throws(ImagingError) -> any ImageCodec.Type {
        switch format {
        case .jpeg: return JPEGCodec.self
        case .png: return PNGCodec.self
        case .webp: return WebPCodec.self
        case .gif: return GIFCodec.self
        case .heic, .avif:
            #if LUMEN_HEIF
            return HEIFCodec.self
            #else
            // Recognised, but not built in: the error names the format (and how to get it).
            throw .unsupportedFormat(format)
            #endif
        }
    }
}

/// The target geometry of one decode: codec minimum, resample size, crop.
struct Geometry {
    /// Size to resample to, upright.
    var scaledWidth: Int, scaledHeight: Int
    /// Final size after the centre crop (aspect fill), upright.
    var cropWidth: Int, cropHeight: Int
    /// The smallest codec output (stored orientation) that still covers the target under the
    /// pre-shrink rule; `nil` for a full-size decode.
    var minimumCodecSize: PixelSize?

    init(header: ImageHeader, options: DecodeOptions) {
        let swaps = options.appliesOrientation && header.orientation.swapsDimensions
        self.init(
            uprightWidth: swaps ? header.height : header.width,
            uprightHeight: swaps ? header.width : header.height,
            swaps: swaps, options: options)
    }

    init(uprightWidth w: Int, uprightHeight h: Int, swaps: Bool, options: DecodeOptions) {
        var scale: Double
        var fill = false
        var target = (w, h)
        switch options.size {
        case nil:
            scale = 1
        case .maxPixelSize(let n):
            scale = Double(max(n, 1)) / Double(max(w, h))
        case .size(let tw, let th, let mode):
            target = (max(tw, 1), max(th, 1))
            let sx = Double(target.0) / Double(w), sy = Double(target.1) / Double(h)
            fill = mode == .aspectFill
            scale = fill ? max(sx, sy) : min(sx, sy)
        }
        if scale > 1 && !options.allowsUpscaling { scale = 1 }
        // Clamped before converting: a hostile target must not trap in `Int(_:)`; outputs this
        // large are refused by `checkOutputLimit` (a fill's crop is bounded by its target).
        scaledWidth = max(1, Int(min((Double(w) * scale).rounded(), 1e12)))
        scaledHeight = max(1, Int(min((Double(h) * scale).rounded(), 1e12)))
        if fill {
            cropWidth = min(target.0, scaledWidth)
            cropHeight = min(target.1, scaledHeight)
        } else {
            cropWidth = scaledWidth
            cropHeight = scaledHeight
        }
        if scale < 1 {
            let f = options.preshrink.factor
            let mw = min(w, Int(min((Double(scaledWidth) * f).rounded(.up), 1e12)))
            let mh = min(h, Int(min((Double(scaledHeight) * f).rounded(.up), 1e12)))
            minimumCodecSize = swaps ? PixelSize(width: mh, height: mw) : PixelSize(width: mw, height: mh)
        } else {
            minimumCodecSize = nil
        }
    }

    /// An upscaled output is held to the same pixel limit as the decoded image. The output is
    /// the crop: ``finish(_:orientation:resampled:)`` never builds the full scaled image.
    func checkOutputLimit(_ options: DecodeOptions, frames: Int = 1) throws(ImagingError) {
        let (area, o1) = cropWidth.multipliedReportingOverflow(by: cropHeight)
        let (total, o2) = area.multipliedReportingOverflow(by: max(frames, 1))
        if o1 || o2 || total > options.maximumPixelCount {
            throw .tooLarge(width: cropWidth, height: cropHeight)
        }
    }

    /// Resample (in stored orientation, where the image is smallest to move), orient, crop.
    ///
    /// The centre crop is taken while resampling: only the stored-orientation window that
    /// becomes the upright crop is built, so an aspect fill never allocates the full scaled
    /// image (which, upscaling a hostile 1×4000 strip into a square, would be millions of rows).
    /// `extent` is the whole image's size in `bitmap`'s pixels when a reduced decode's edge
    /// pixels cover less than the others (``CodecOutput/extent``), stored orientation.
    func finish(_ bitmap: Bitmap, extent: (width: Double, height: Double)? = nil, orientation: ImageOrientation,
                resampled: inout Bool) -> Bitmap {
        let swaps = orientation.swapsDimensions
        let tw = swaps ? scaledHeight : scaledWidth
        let th = swaps ? scaledWidth : scaledHeight
        // The upright crop rectangle, then the stored-orientation window it comes from: a
        // mirrored axis takes the window from the other end.
        let ux = (scaledWidth - cropWidth) / 2, uy = (scaledHeight - cropHeight) / 2
        var columns = ux..<(ux + cropWidth), rows = uy..<(uy + cropHeight)
        if swaps { swap(&columns, &rows) }
        let mirrorsX: Bool, mirrorsY: Bool
        switch orientation {
        case .up, .leftMirrored: (mirrorsX, mirrorsY) = (false, false)
        case .upMirrored, .left: (mirrorsX, mirrorsY) = (true, false)
        case .down, .rightMirrored: (mirrorsX, mirrorsY) = (true, true)
        case .downMirrored, .right: (mirrorsX, mirrorsY) = (false, true)
        }
        if mirrorsX { columns = (tw - columns.upperBound)..<(tw - columns.lowerBound) }
        if mirrorsY { rows = (th - rows.upperBound)..<(th - rows.lowerBound) }
        var image = bitmap
        // A reduced decode whose last column or row is a partial pixel is not the image on a
        // pixel grid yet, even when it has the target size already (a 33 px side at 1/8 is
        // 5 pixels, the fifth covering one source pixel): it is resampled over its extent.
        if image.width != tw || image.height != th || !Resampler.isWholeGrid(image, extent: extent) {
            image = Resampler.resample(image, width: tw, height: th, columns: columns, rows: rows, extent: extent)
            resampled = true
        } else if columns.count < image.width || rows.count < image.height {
            image = image.cropped(x: columns.lowerBound, y: rows.lowerBound, width: columns.count, height: rows.count)
        }
        return image.applying(orientation)
    }
}

/// A size in pixels.
struct PixelSize: Hashable, Sendable {
    var width: Int
    var height: Int
}

/// What a codec reads from a header. `width`/`height` are in stored orientation.
struct ImageHeader: Sendable {
    var format: ImageFormat
    var width: Int
    var height: Int
    var hasAlpha: Bool
    var orientation: ImageOrientation = .up
    var frameCount: Int = 1
    /// JPEG only: the marker walk and TurboJPEG's header, kept by `readHeader` so that the
    /// decode that follows does not repeat them. Valid for the same data and options only.
    var jpeg: JPEGCodec.ParsedHeader?

    var info: ImageInfo {
        ImageInfo(
            format: format,
            width: orientation.swapsDimensions ? height : width,
            height: orientation.swapsDimensions ? width : height,
            hasAlpha: hasAlpha, orientation: orientation, frameCount: frameCount)
    }
}

/// What a codec's decode gives back, in stored orientation.
struct CodecOutput: Sendable {
    var bitmap: Bitmap
    /// Incomplete data, recovered preview.
    var isPartial: Bool = false
    /// The whole image's size measured in output pixels, when a reduced decode's last row or
    /// column of pixels covers less of the image than the others (a block reduction or DCT
    /// scaling of a side that is not a multiple of the factor: 1 001 px at 1/8 is 125.125
    /// output pixels, stored as 126). The resampler maps the target onto this extent, so the
    /// partial edge pixel does not stretch the image. `nil`: the bitmap's own size.
    var extent: (width: Double, height: Double)? = nil
}

/// One format's decoder. Implementations are stateless; every call creates and destroys its
/// own C handles, so calls may run concurrently.
protocol ImageCodec {
    /// Reads the header (size, alpha, EXIF orientation, frame count if cheap). Must not
    /// allocate pixel memory.
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader

    /// Decodes the first frame. When `minimumSize` is given the codec may decode at a reduced
    /// scale, but its output must be at least that size on both sides. ICC conversion to sRGB
    /// happens here when `options.convertsColorProfile` is set.
    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput

    /// Decodes every frame composited onto the canvas, at full size. Must enforce
    /// `options.maximumPixelCount` against frames × canvas area as frames are discovered.
    static func decodeFrames(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, options: DecodeOptions
    ) throws(ImagingError) -> [AnimationFrame]
}

extension ImageCodec {
    static func decodeFrames(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, options: DecodeOptions
    ) throws(ImagingError) -> [AnimationFrame] {
        let output = try decode(data, header: header, minimumSize: nil, options: options)
        return [AnimationFrame(bitmap: output.bitmap, duration: 0)]
    }
}
