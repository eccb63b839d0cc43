import Foundation
import Lumen

/// The size an image is shown at, and the decode size it maps to.
///
/// **The bucket rule.** The longest side in pixels is `ceil(points × scale)` (a product within
/// 1/1000 of a pixel above an integer counts as that integer, so floating-point noise such as
/// `66.67 × 3` does not push it over), then rounded *up* to a multiple of
/// ``bucketSize`` (64), at least one bucket: 1…64 → 64, 65…128 → 128, 193…256 → 256. Slots
/// of nearly equal size (199 and 201 points at scale 1 both → 256) therefore share one decode
/// and one memory-cache entry, and the image is never decoded smaller than it is shown.
///
/// **The content mode.** A view that fits the image in the size (`.aspectFit`, the default)
/// shows it whole: its longest side needs covering. A view that fills the size
/// (`.aspectFill`, SwiftUI's `scaledToFill`) shows its centre: both sides of the size need
/// covering, however wide or tall the image is. See ``decodeSize``.
public struct DisplaySize: Sendable, Hashable {
    /// The bucket that decode sizes are rounded up to, in pixels.
    public static let bucketSize = SizeBuckets.size

    /// Width in points.
    public var width: Double
    /// Height in points.
    public var height: Double
    /// Pixels per point.
    public var scale: Double
    /// How the view shows the image in the size: whole (`.aspectFit`) or covering it
    /// (`.aspectFill`). Default `.aspectFit`.
    public var contentMode: ContentMode

    /// Creates a display size of `width`×`height` points at `scale` pixels per point, shown
    /// with `contentMode`.
    public init(width: Double, height: Double, scale: Double = 1, contentMode: ContentMode = .aspectFit) {
        self.width = width
        self.height = height
        self.scale = scale
        self.contentMode = contentMode
    }

    /// Whether the size can be shown at all (both sides and the scale positive and finite).
    public var isEmpty: Bool {
        !(width > 0 && height > 0 && scale > 0) || !width.isFinite || !height.isFinite || !scale.isFinite
    }

    /// The longest side in pixels, `ceil(points × scale)`; 0 when ``isEmpty``.
    public var longestSideInPixels: Int {
        guard !isEmpty else { return 0 }
        return Self.pixels(max(width, height) * scale)
    }

    /// The longest side in pixels rounded up to ``bucketSize``; 0 when ``isEmpty``.
    public var bucketedMaxPixelSize: Int {
        Self.bucketed(longestSideInPixels)
    }

    /// The decode size for this display size; `nil` when ``isEmpty``.
    ///
    /// - `.aspectFit`: `.maxPixelSize(bucketedMaxPixelSize)`, the longest side covered.
    /// - `.aspectFill`: an aspect-fill `.size` whose longest side is ``bucketedMaxPixelSize``
    ///   and whose other side is the size's other side in pixels scaled by the same factor
    ///   (rounded up), so that it keeps the size's aspect ratio. The decoder scales the image
    ///   to cover it and crops the centre, which is what the view shows: a 2000×1000 image in
    ///   a 100×100-point slot at scale 2 is decoded at 256×256, not 256×128.
    ///
    /// Either way the image is never upscaled: an image smaller than the target comes back at
    /// its natural size (cropped to the target on a side where it is larger, for a fill).
    public var decodeSize: DecodeSize? {
        guard !isEmpty else { return nil }
        let longest = bucketedMaxPixelSize
        switch contentMode {
        case .aspectFit:
            return .maxPixelSize(longest)
        case .aspectFill:
            let long = max(width, height), short = min(width, height)
            let other = min(longest, Self.pixels(short * Double(longest) / long))
            return width >= height
                ? .size(width: longest, height: other, contentMode: .aspectFill)
                : .size(width: other, height: longest, contentMode: .aspectFill)
        }
    }

    /// `ceil(value)`, at least 1: a value within 1/1000 above an integer counts as that integer.
    static func pixels(_ value: Double) -> Int { SizeBuckets.pixels(value) }

    /// `pixels` rounded up to a multiple of ``bucketSize``, at least one bucket (0 stays 0).
    public static func bucketed(_ pixels: Int) -> Int { SizeBuckets.bucketed(pixels) }
}
