/// The layout of a ``Bitmap``'s pixels.
///
/// Lumen has one output layout: 8 bits per channel, sRGB, interleaved, with an alpha channel
/// only when the image has one. Alpha is straight (not premultiplied).
public enum PixelFormat: Sendable, Hashable {
    /// Red, green, blue: 3 bytes per pixel.
    case rgb8
    /// Red, green, blue, straight alpha: 4 bytes per pixel.
    case rgba8

    /// Bytes per pixel.
    @inlinable public var channels: Int {
        switch self {
        case .rgb8: 3
        case .rgba8: 4
        }
    }

    /// Whether the format carries an alpha channel.
    @inlinable public var hasAlpha: Bool { self == .rgba8 }
}

/// A decoded image on Linux: a pixel size, a ``PixelFormat`` and tightly packed rows of pixels.
///
/// `Bitmap` is a value type backed by a copy-on-write array, so it is cheap to pass around and
/// safe to share between tasks. Rows are stored top to bottom with no padding:
/// `bytesPerRow == width * format.channels`.
public struct Bitmap: Sendable, Hashable {
    /// Width in pixels.
    public let width: Int
    /// Height in pixels.
    public let height: Int
    /// Pixel layout.
    public let format: PixelFormat
    /// Pixel bytes, `height` rows of `bytesPerRow` bytes. Read-only outside the imaging
    /// engine, so the byte count always matches the size (the codecs hand these bytes to C);
    /// change pixels in place with ``withUnsafeMutablePixels(_:)``.
    public internal(set) var pixels: [UInt8]

    /// Creates a bitmap from pixel bytes. `pixels.count` must be `width * height * channels`.
    public init(width: Int, height: Int, format: PixelFormat, pixels: [UInt8]) {
        precondition(width > 0 && height > 0, "Bitmap: size must be positive, got \(width)x\(height)")
        precondition(
            pixels.count == width * height * format.channels,
            "Bitmap: \(pixels.count) bytes do not make a \(width)x\(height) \(format) image")
        self.width = width
        self.height = height
        self.format = format
        self.pixels = pixels
    }

    /// Creates a bitmap whose bytes are written by `initializer`, without zero-filling first.
    /// The closure must initialise every byte of the buffer it is given.
    public init(
        width: Int, height: Int, format: PixelFormat,
        initializingWith initializer: (UnsafeMutableBufferPointer<UInt8>) throws -> Void
    ) rethrows {
        precondition(width > 0 && height > 0, "Bitmap: size must be positive, got \(width)x\(height)")
        let count = width * height * format.channels
        self.width = width
        self.height = height
        self.format = format
        self.pixels = try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            try initializer(UnsafeMutableBufferPointer(rebasing: buffer[0..<count]))
            initialized = count
        }
    }

    /// Calls `body` with the pixel bytes to change them in place; the size cannot change.
    public mutating func withUnsafeMutablePixels<R>(_ body: (UnsafeMutableBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try pixels.withUnsafeMutableBufferPointer { buffer in try body(buffer) }
    }

    /// Bytes in one row.
    @inlinable public var bytesPerRow: Int { width * format.channels }

    /// Bytes of pixel memory: the cost of keeping this image.
    @inlinable public var byteCount: Int { pixels.count }

    /// Number of pixels.
    @inlinable public var pixelCount: Int { width * height }

    /// The pixel at (`x`, `y`) as RGBA (alpha 255 when the format has none).
    public func rgba(x: Int, y: Int) -> (r: UInt8, g: UInt8, b: UInt8, a: UInt8) {
        precondition(x >= 0 && x < width && y >= 0 && y < height, "Bitmap: (\(x), \(y)) is outside \(width)x\(height)")
        let c = format.channels
        let i = (y * width + x) * c
        return (pixels[i], pixels[i + 1], pixels[i + 2], c == 4 ? pixels[i + 3] : 255)
    }

    /// Whether any pixel is not fully opaque (always `false` for ``PixelFormat/rgb8``).
    public var hasTransparentPixels: Bool {
        guard format == .rgba8 else { return false }
        return pixels.withUnsafeBufferPointer { p in
            var i = 3
            while i < p.count {
                if p[i] != 255 { return true }
                i += 4
            }
            return false
        }
    }

    /// This image converted to `format` (dropping alpha composites nothing: it is discarded).
    public func converted(to format: PixelFormat) -> Bitmap {
        if format == self.format { return self }
        let n = pixelCount
        return pixels.withUnsafeBufferPointer { src in
            Bitmap(width: width, height: height, format: format) { dst in
                if format == .rgba8 {
                    for i in 0..<n {
                        dst[i * 4] = src[i * 3]; dst[i * 4 + 1] = src[i * 3 + 1]
                        dst[i * 4 + 2] = src[i * 3 + 2]; dst[i * 4 + 3] = 255
                    }
                } else {
                    for i in 0..<n {
                        dst[i * 3] = src[i * 4]; dst[i * 3 + 1] = src[i * 4 + 1]; dst[i * 3 + 2] = src[i * 4 + 2]
                    }
                }
            }
        }
    }
}

extension Bitmap: CustomStringConvertible {
    /// The size and pixel format, e.g. `Bitmap(160x120, rgba8)`; never the pixels.
    public var description: String { "Bitmap(\(width)x\(height), \(format))" }
}
