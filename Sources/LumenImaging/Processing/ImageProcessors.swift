/// Lumen's built-in image processors: resize, crop, circle, rounded corners, Gaussian blur,
/// grayscale, composition and closures.
///
/// Every processor is a `Hashable` value whose ``ImageProcessing/hashableIdentifier`` is the
/// value itself (for memory-cache keys) and whose ``ImageProcessing/identifier`` is a stable
/// string built from its parameters (for disk-cache keys), e.g.
/// `"lumen.resize?width=160&height=160&contentMode=aspectFill&crop=1&upscale=0"`.
/// Processing is synchronous CPU work, pure, and safe to run concurrently.
///
/// ```swift
/// let thumbnail = ImageProcessors.Composition([
///     ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: true),
///     ImageProcessors.Circle(),
/// ])
/// let output = try thumbnail.process(bitmap)
/// ```
public enum ImageProcessors {}

// MARK: - Crop

extension ImageProcessors {
    /// Crops to a rectangle in pixels, clipped to the image.
    ///
    /// - Throws: ``ImagingError/invalidArgument(reason:)`` when the rectangle does not overlap
    ///   the image.
    public struct Crop: ImageProcessing, Hashable {
        public var x: Int
        public var y: Int
        public var width: Int
        public var height: Int

        public init(x: Int, y: Int, width: Int, height: Int) {
            self.x = x
            self.y = y
            self.width = width
            self.height = height
        }

        public func process(_ image: Bitmap) throws -> Bitmap {
            // Clip without overflowing, whatever the numbers.
            func end(_ origin: Int, _ length: Int, _ limit: Int) -> Int {
                guard length > 0 else { return Int.min }
                let (sum, overflow) = origin.addingReportingOverflow(length)
                return overflow ? limit : min(limit, sum)
            }
            let x0 = max(0, x), y0 = max(0, y)
            let x1 = end(x, width, image.width), y1 = end(y, height, image.height)
            guard x1 > x0, y1 > y0 else {
                throw ImagingError.invalidArgument(
                    reason: "crop (\(x), \(y), \(width)x\(height)) does not overlap the \(image.width)x\(image.height) image")
            }
            return image.cropped(x: x0, y: y0, width: x1 - x0, height: y1 - y0)
        }

        public var identifier: String { "lumen.crop?x=\(x)&y=\(y)&width=\(width)&height=\(height)" }
    }
}

// MARK: - Grayscale

extension ImageProcessors {
    /// Converts to gray with Rec. 709 luma weights on the sRGB-encoded values
    /// (0.2126 R + 0.7152 G + 0.0722 B); keeps the format and the alpha channel.
    public struct Grayscale: ImageProcessing, Hashable {
        public init() {}

        public func process(_ image: Bitmap) throws -> Bitmap {
            let c = image.format.channels
            let n = image.pixelCount
            return image.pixels.withUnsafeBufferPointer { srcBuffer in
                Bitmap(width: image.width, height: image.height, format: image.format) { dstBuffer in
                    let src = srcBuffer.baseAddress!, dst = dstBuffer.baseAddress!
                    for i in 0..<n {
                        let s = src + i * c, d = dst + i * c
                        // 16-bit fixed point: 13933 + 46871 + 4732 = 65536, so white stays 255.
                        let y = (13933 * UInt32(s[0]) + 46871 * UInt32(s[1]) + 4732 * UInt32(s[2]) + 32768) >> 16
                        let g = UInt8(truncatingIfNeeded: y)
                        d[0] = g; d[1] = g; d[2] = g
                        if c == 4 { d[3] = s[3] }
                    }
                }
            }
        }

        public var identifier: String { "lumen.grayscale" }
    }
}

// MARK: - Composition

extension ImageProcessors {
    /// Applies processors in order. Its identifier joins the parts' identifiers; its hashable
    /// identity is the array of the parts' hashable identities. An empty composition returns
    /// the image unchanged.
    public struct Composition: ImageProcessing, Hashable {
        public var processors: [any ImageProcessing]

        public init(_ processors: [any ImageProcessing]) {
            self.processors = processors
        }

        public func process(_ image: Bitmap) throws -> Bitmap {
            var image = image
            for processor in processors { image = try processor.process(image) }
            return image
        }

        public var identifier: String {
            "lumen.composition[" + processors.map(\.identifier).joined(separator: "|") + "]"
        }

        public static func == (lhs: Composition, rhs: Composition) -> Bool {
            lhs.processors.map(\.hashableIdentifier) == rhs.processors.map(\.hashableIdentifier)
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(processors.count)
            for processor in processors { hasher.combine(processor.hashableIdentifier) }
        }
    }
}

// MARK: - Anonymous

extension ImageProcessors {
    /// A processor made of a closure. Its identity (string and hashable) is `id`: two
    /// `Anonymous` processors with the same `id` must do the same thing.
    public struct Anonymous: ImageProcessing, Hashable {
        public let id: String
        private let closure: @Sendable (Bitmap) throws -> Bitmap

        public init(id: String, _ closure: @escaping @Sendable (Bitmap) throws -> Bitmap) {
            self.id = id
            self.closure = closure
        }

        public func process(_ image: Bitmap) throws -> Bitmap { try closure(image) }

        public var identifier: String { id }

        public static func == (lhs: Anonymous, rhs: Anonymous) -> Bool { lhs.id == rhs.id }

        public func hash(into hasher: inout Hasher) { hasher.combine(id) }
    }
}

// MARK: - Sugar

extension ImageProcessing where Self == ImageProcessors.Crop {
    /// ``ImageProcessors/Crop``.
    public static func crop(x: Int, y: Int, width: Int, height: Int) -> Self {
        ImageProcessors.Crop(x: x, y: y, width: width, height: height)
    }
}

extension ImageProcessing where Self == ImageProcessors.Grayscale {
    /// ``ImageProcessors/Grayscale``.
    public static var grayscale: Self { ImageProcessors.Grayscale() }
}

extension ImageProcessing where Self == ImageProcessors.Composition {
    /// ``ImageProcessors/Composition``.
    public static func composition(_ processors: [any ImageProcessing]) -> Self {
        ImageProcessors.Composition(processors)
    }
}

extension ImageProcessing where Self == ImageProcessors.Anonymous {
    /// ``ImageProcessors/Anonymous``.
    public static func anonymous(id: String, _ closure: @escaping @Sendable (Bitmap) throws -> Bitmap) -> Self {
        ImageProcessors.Anonymous(id: id, closure)
    }
}
