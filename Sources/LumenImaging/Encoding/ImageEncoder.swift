import Foundation

/// An output format for ``Bitmap/encode(as:)``.
public enum EncodingFormat: Sendable, Hashable {
    /// JPEG at `quality` 1–100; progressive when asked. Alpha is dropped.
    case jpeg(quality: Int = 85, progressive: Bool = false)
    /// Lossless PNG, 8-bit RGB or RGBA.
    case png
    /// WebP, lossy at `quality` 0–100 or lossless.
    case webp(quality: Int = 80, lossless: Bool = false)
    /// AVIF at `quality` 0–100; only when Lumen was built with libheif and its encoder exists.
    case avif(quality: Int = 60)
}

extension Bitmap {
    /// This image encoded in `format`.
    /// - Throws: ``ImagingError/encodingFailed(reason:)``, or
    ///   ``ImagingError/unsupportedFormat(_:)`` (with `.avif`) for AVIF without libheif.
    public func encode(as format: EncodingFormat) throws(ImagingError) -> Data {
        switch format {
        case .jpeg(let quality, let progressive):
            return try JPEGCodec.encode(self, quality: quality, progressive: progressive)
        case .png:
            return try PNGCodec.encode(self)
        case .webp(let quality, let lossless):
            return try WebPCodec.encode(self, quality: quality, lossless: lossless)
        case .avif(let quality):
            #if LUMEN_HEIF
            return try HEIFCodec.encodeAVIF(self, quality: quality)
            #else
            _ = quality
            throw .unsupportedFormat(.avif)
            #endif
        }
    }
}
