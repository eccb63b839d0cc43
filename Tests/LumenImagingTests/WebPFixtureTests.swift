import Foundation
@testable import LumenImaging

/// Fixtures (no tests) shared by the WebP and HEIF tests: corpus files, synthetic images, comparisons.
enum WebPFixtures {
    /// `../shared/corpus/real-world` relative to the package root.
    static let realWorld: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("../shared/corpus/real-world").standardizedFileURL

    static func corpus(_ name: String) throws -> Data {
        try Data(contentsOf: realWorld.appendingPathComponent(name))
    }

    /// A smooth photo-like test picture: gradients plus a soft disc, deterministic. With
    /// `alpha` the alpha channel ramps from fully transparent (left column) to opaque, and a
    /// corner block is fully transparent with non-zero colour underneath.
    static func picture(width: Int, height: Int, alpha: Bool = false, phase: Int = 0) -> Bitmap {
        let format: PixelFormat = alpha ? .rgba8 : .rgb8
        return Bitmap(width: width, height: height, format: format) { p in
            let c = format.channels
            let cx = Double(width) * 0.6, cy = Double(height) * 0.4, r = Double(min(width, height)) * 0.3
            for y in 0..<height {
                for x in 0..<width {
                    let i = (y * width + x) * c
                    let d = ((Double(x) - cx) * (Double(x) - cx) + (Double(y) - cy) * (Double(y) - cy)).squareRoot()
                    let disc = max(0, min(1, (r - d) / 8))
                    p[i] = UInt8((x * 255 / max(width - 1, 1) + phase * 40) % 256)
                    p[i + 1] = UInt8(Double(y * 200 / max(height - 1, 1)) * (1 - disc) + 230 * disc)
                    p[i + 2] = UInt8(((x + y) * 128 / max(width + height - 2, 1) + 60 + phase * 25) % 256)
                    if alpha {
                        let corner = x < width / 4 && y < height / 4
                        p[i + 3] = corner ? 0 : UInt8(min(255, 40 + x * 215 / max(width - 1, 1)))
                    }
                }
            }
        }
    }

    /// Mean absolute difference per channel over the whole image (same size and format).
    static func meanAbsoluteDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
        precondition(a.width == b.width && a.height == b.height && a.format == b.format)
        var sum = 0
        for i in a.pixels.indices { sum += abs(Int(a.pixels[i]) - Int(b.pixels[i])) }
        return Double(sum) / Double(a.pixels.count)
    }

    /// Mean absolute RGB difference over the pixels where `reference` is not fully transparent,
    /// and the largest alpha difference anywhere (both images rgba8).
    static func visibleDifference(_ a: Bitmap, reference b: Bitmap) -> (rgb: Double, maxAlpha: Int) {
        precondition(a.width == b.width && a.height == b.height && a.format == .rgba8 && b.format == .rgba8)
        var sum = 0, count = 0, maxAlpha = 0
        for p in 0..<a.pixelCount {
            let i = p * 4
            maxAlpha = max(maxAlpha, abs(Int(a.pixels[i + 3]) - Int(b.pixels[i + 3])))
            guard b.pixels[i + 3] > 0 else { continue }
            for k in 0..<3 { sum += abs(Int(a.pixels[i + k]) - Int(b.pixels[i + k])) }
            count += 3
        }
        return (count == 0 ? 0 : Double(sum) / Double(count), maxAlpha)
    }
}

/// The test target's seeded generator (SplitMix64, `Support/CorpusPNG.swift`).
typealias WebPFuzzGenerator = SeededRandom
