import Foundation

/// The size an image is shown at, and the decode size it maps to.
///
/// **The bucket rule.** The longest side in pixels is `ceil(points × scale)` (a product within
/// 1/1000 of a pixel above an integer counts as that integer, so floating-point noise such as
/// `66.67 × 3` does not push it over), then rounded *up* to a multiple of
/// ``bucketSize`` (64), at least one bucket: 1…64 → 64, 65…128 → 128, 193…256 → 256. Slots
/// of nearly equal size (199 and 201 points at scale 1 both → 256) therefore share one decode
/// and one memory-cache entry, and the image is never decoded smaller than it is shown.
public struct DisplaySize: Sendable, Hashable {
    /// The bucket that decode sizes are rounded up to, in pixels.
    public static let bucketSize = 64

    /// Width in points.
    public var width: Double
    /// Height in points.
    public var height: Double
    /// Pixels per point.
    public var scale: Double

    /// Creates a display size of `width`×`height` points at `scale` pixels per point.
    public init(width: Double, height: Double, scale: Double = 1) {
        self.width = width
        self.height = height
        self.scale = scale
    }

    /// Whether the size can be shown at all (both sides and the scale positive and finite).
    public var isEmpty: Bool {
        !(width > 0 && height > 0 && scale > 0) || !width.isFinite || !height.isFinite || !scale.isFinite
    }

    /// The longest side in pixels, `ceil(points × scale)`; 0 when ``isEmpty``.
    public var longestSideInPixels: Int {
        guard !isEmpty else { return 0 }
        let pixels = (max(width, height) * scale - 0.001).rounded(.up)
        return pixels >= Double(Int.max / 2) ? Int.max / 2 : max(1, Int(pixels))
    }

    /// The decode size for this display size: the longest side in pixels rounded up to
    /// ``bucketSize``; 0 when ``isEmpty``.
    public var bucketedMaxPixelSize: Int {
        Self.bucketed(longestSideInPixels)
    }

    /// `pixels` rounded up to a multiple of ``bucketSize``, at least one bucket (0 stays 0).
    public static func bucketed(_ pixels: Int) -> Int {
        guard pixels > 0 else { return 0 }
        let buckets = pixels / bucketSize + (pixels % bucketSize == 0 ? 0 : 1)
        return buckets * bucketSize
    }
}
