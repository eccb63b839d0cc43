import Foundation

/// The 64-pixel bucket rule, one definition for the pipeline's decode-size bucketing
/// (``ImagePipeline/Configuration/isDecodeSizeBucketingEnabled``) and LumenUI's display sizes,
/// so that both round a size the same way and share its decode and cache entries.
package enum SizeBuckets {
    /// The bucket width in pixels.
    package static let size = 64

    /// `pixels` rounded up to a multiple of ``size``, at least one bucket (0 stays 0).
    package static func bucketed(_ pixels: Int) -> Int {
        guard pixels > 0 else { return 0 }
        let buckets = pixels / size + (pixels % size == 0 ? 0 : 1)
        return buckets * size
    }

    /// `ceil(value)`, at least 1: a value within 1/1000 above an integer counts as that integer.
    package static func pixels(_ value: Double) -> Int {
        let pixels = (value - 0.001).rounded(.up)
        return pixels >= Double(Int.max / 2) ? Int.max / 2 : max(1, Int(pixels))
    }
}

extension DecodeSize {
    /// This size rounded up to ``SizeBuckets/size`` buckets by the bucket rule of
    /// `FetchImage`'s display sizes: `.maxPixelSize(n)` becomes `.maxPixelSize(SizeBuckets.bucketed(n))`; a
    /// `.size` has its longest side bucketed and its other side scaled by the same factor
    /// (rounded up, never past the longest), keeping its aspect ratio and content mode.
    /// A size with a side that is not positive (or absurdly large) is returned unchanged, for
    /// the decoder to judge. Used by ``ImagePipeline/Configuration/isDecodeSizeBucketingEnabled``.
    package var bucketed: DecodeSize {
        let limit = Int.max / 4
        switch self {
        case .maxPixelSize(let pixels):
            guard pixels > 0, pixels <= limit else { return self }
            return .maxPixelSize(SizeBuckets.bucketed(pixels))
        case .size(let width, let height, let contentMode):
            guard width > 0, height > 0, width <= limit, height <= limit else { return self }
            let long = max(width, height), short = min(width, height)
            let longest = SizeBuckets.bucketed(long)
            let other = min(longest, SizeBuckets.pixels(Double(short) * Double(longest) / Double(long)))
            return width >= height
                ? .size(width: longest, height: other, contentMode: contentMode)
                : .size(width: other, height: longest, contentMode: contentMode)
        }
    }
}
