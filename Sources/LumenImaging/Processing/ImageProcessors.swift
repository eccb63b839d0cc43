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
        /// The rectangle's left edge, in pixels from the image's left; may be negative.
        public var x: Int
        /// The rectangle's top edge, in pixels from the image's top; may be negative.
        public var y: Int
        /// The rectangle's width in pixels, before clipping.
        public var width: Int
        /// The rectangle's height in pixels, before clipping.
        public var height: Int

        /// Creates a processor that crops to the `width`×`height` rectangle whose top-left
        /// corner is (`x`, `y`).
        public init(x: Int, y: Int, width: Int, height: Int) {
            self.x = x
            self.y = y
            self.width = width
            self.height = height
        }

        /// The part of `image` inside the rectangle, clipped to the image; `image` itself when
        /// the rectangle covers it.
        /// - Throws: ``ImagingError/invalidArgument(reason:)`` when nothing is left after
        ///   clipping (no overlap, or a width or height that is not positive).
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

        /// `lumen.crop?x=…&y=…&width=…&height=…`, with the rectangle as given (before clipping).
        public var identifier: String { "lumen.crop?x=\(x)&y=\(y)&width=\(width)&height=\(height)" }
    }
}

// MARK: - Grayscale

extension ImageProcessors {
    /// Converts to gray with Rec. 709 luma weights on the sRGB-encoded values
    /// (0.2126 R + 0.7152 G + 0.0722 B); keeps the format and the alpha channel.
    public struct Grayscale: ImageProcessing, Hashable {
        /// Creates a grayscale processor.
        public init() {}

        /// `image` in gray, at the same size and in the same format; never throws.
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

        /// `lumen.grayscale`.
        public var identifier: String { "lumen.grayscale" }
    }
}

// MARK: - Composition

extension ImageProcessors {
    /// Applies processors in order. Its identifier joins the parts' identifiers; its hashable
    /// identity is the array of the parts' hashable identities. An empty composition returns
    /// the image unchanged.
    public struct Composition: ImageProcessing, Hashable {
        /// The processors, in the order they run.
        public var processors: [any ImageProcessing]

        /// Creates a processor that runs `processors` in order.
        public init(_ processors: [any ImageProcessing]) {
            self.processors = processors
        }

        /// Runs each processor on the previous one's output, starting with `image`.
        /// - Throws: the first error a processor throws; the processors after it don't run.
        public func process(_ image: Bitmap) throws -> Bitmap {
            var image = image
            for processor in processors { image = try processor.process(image) }
            return image
        }

        /// `lumen.composition[…]`: the parts' identifiers in order, separated by `|`, each
        /// prefixed with its length in UTF-8 bytes and `:` (`lumen.composition[3:abc|1:d]`), so
        /// that no two compositions share one (a part's own `|` cannot pass for a separator).
        public var identifier: String {
            "lumen.composition[" + processors.map { "\($0.identifier.utf8.count):\($0.identifier)" }.joined(separator: "|") + "]"
        }

        /// Whether both compositions have equal hashable identities, part by part, in order.
        public static func == (lhs: Composition, rhs: Composition) -> Bool {
            lhs.processors.map(\.hashableIdentifier) == rhs.processors.map(\.hashableIdentifier)
        }

        /// Hashes the number of parts and each part's hashable identity, in order.
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
        /// The processor's identity: its ``identifier``, and all it is compared and hashed by.
        public let id: String
        private let closure: @Sendable (Bitmap) throws -> Bitmap

        /// Creates a processor that runs `closure`, identified by `id`.
        public init(id: String, _ closure: @escaping @Sendable (Bitmap) throws -> Bitmap) {
            self.id = id
            self.closure = closure
        }

        /// The closure's result for `image`.
        /// - Throws: whatever the closure throws.
        public func process(_ image: Bitmap) throws -> Bitmap { try closure(image) }

        /// ``id``, as given.
        public var identifier: String { id }

        /// Whether the two processors have the same ``id``; the closures are not compared.
        public static func == (lhs: Anonymous, rhs: Anonymous) -> Bool { lhs.id == rhs.id }

        /// Hashes ``id``.
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
