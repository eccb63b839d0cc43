import Foundation

/// An output format for ``Bitmap/encode(as:)``.
///
/// A quality outside its format's range is an error
/// (``ImagingError/encodingFailed(reason:)``), never clamped: a caller that passes 150 or -1
/// has a bug worth seeing.
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
    /// - Throws: ``ImagingError/encodingFailed(reason:)`` (also for a quality outside the
    ///   format's range), or ``ImagingError/unsupportedFormat(_:)`` (with `.avif`) for AVIF
    ///   without libheif.
    public func encode(as format: EncodingFormat) throws(ImagingError) -> Data {
        try format.checkQuality()
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

extension EncodingFormat {
    /// The range `quality` must be in for this format (`nil` for PNG, which has none).
    public var qualityRange: ClosedRange<Int>? {
        switch self {
        case .jpeg: 1...100
        case .png: nil
        case .webp, .avif: 0...100
        }
    }

    /// Throws when the quality is outside ``qualityRange``.
    func checkQuality() throws(ImagingError) {
        let (name, quality): (String, Int)
        switch self {
        case .jpeg(let q, _): (name, quality) = ("JPEG", q)
        case .png: return
        case .webp(let q, _): (name, quality) = ("WebP", q)
        case .avif(let q): (name, quality) = ("AVIF", q)
        }
        guard let range = qualityRange, !range.contains(quality) else { return }
        throw .encodingFailed(reason: "\(name) quality must be \(range.lowerBound)–\(range.upperBound), got \(quality)")
    }
}

extension Array where Element == AnimationFrame {
    /// These frames as one animation: an animated WebP (`.webp`, lossy at `quality` 0–100 or
    /// lossless), each frame shown for its duration (rounded to milliseconds), looping forever.
    /// A GIF's frames from ``ImageDecoder/decodeFrames(_:options:)`` become an animated WebP
    /// this way. Every frame must have the first one's size.
    /// - Throws: ``ImagingError/encodingFailed(reason:)`` for another format than WebP (only
    ///   WebP holds an animation here: encode one frame's bitmap instead) or a quality out of
    ///   range; ``ImagingError/invalidArgument(reason:)`` for no frames or frames of different sizes.
    public func encode(as format: EncodingFormat) throws(ImagingError) -> Data {
        try format.checkQuality()
        guard case .webp(let quality, let lossless) = format else {
            throw .encodingFailed(reason: "only WebP holds an animation; encode one frame's bitmap as \(format)")
        }
        return try WebPCodec.encodeAnimation(map { ($0.bitmap, $0.duration) }, quality: quality, lossless: lossless)
    }
}
