import Foundation
import Lumen
import LumenTestSupport

/// Deterministic photo-like images: a sky gradient, a sun, layered hills, texture and sensor
/// noise. They compress and decode like photographs (smooth areas plus detail), so timings
/// on them mean something, and the same seed always gives the same pixels.
enum SyntheticPhotos {
    /// A photo-like RGB image of `width`×`height` drawn from `seed`.
    static func photo(width: Int, height: Int, seed: UInt64) -> Bitmap {
        var rng = SplitMix64(seed: seed)
        let skyTop = (rng.unit() * 80 + 20, rng.unit() * 90 + 60, rng.unit() * 60 + 150)
        let skyBottom = (rng.unit() * 60 + 190, rng.unit() * 60 + 170, rng.unit() * 60 + 150)
        let sun = (x: rng.unit() * Double(width), y: rng.unit() * Double(height) * 0.35, r: Double(min(width, height)) * (0.05 + rng.unit() * 0.06))
        struct Hill { var base, amp, freq, phase: Double; var color: (Double, Double, Double) }
        var hills: [Hill] = []
        for i in 0..<3 {
            let layer = Double(i)
            let base = 0.45 + 0.15 * layer + rng.unit() * 0.05
            let amp = 0.04 + rng.unit() * 0.08
            let freq = 1.5 + rng.unit() * 4
            let phase = rng.unit() * 6.28
            let red: Double = 30 + rng.unit() * 60 - layer * 10
            let green: Double = 70 + rng.unit() * 90 - layer * 15
            let blue: Double = 20 + rng.unit() * 40
            hills.append(Hill(base: base, amp: amp, freq: freq, phase: phase, color: (red, green, blue)))
        }
        let w = Double(width), h = Double(height)
        return Bitmap(width: width, height: height, format: .rgb8) { px in
            var noise = SplitMix64(seed: seed &+ 0x9E37)
            // Hill outlines per column, computed once.
            var ridge = [[Double]](repeating: [Double](repeating: 0, count: width), count: hills.count)
            for (i, hill) in hills.enumerated() {
                for x in 0..<width {
                    let u = Double(x) / w
                    ridge[i][x] = h * (hill.base + hill.amp * sin(u * hill.freq * 6.28 + hill.phase)
                        + hill.amp * 0.3 * sin(u * hill.freq * 23 + hill.phase * 2))
                }
            }
            let sx1 = (0..<width).map { sin(Double($0) * 0.31) }, cx1 = (0..<width).map { cos(Double($0) * 0.31) }
            let sx2 = (0..<width).map { sin(Double($0) * 0.05) }, cx2 = (0..<width).map { cos(Double($0) * 0.05) }
            var o = 0
            for y in 0..<height {
                let v = Double(y) / h
                let sy1 = sin(Double(y) * 0.17), cy1 = cos(Double(y) * 0.17)
                let sy2 = sin(Double(y) * 0.09), cy2 = cos(Double(y) * 0.09)
                let dy = Double(y) - sun.y
                for x in 0..<width {
                    var r = skyTop.0 + (skyBottom.0 - skyTop.0) * v
                    var g = skyTop.1 + (skyBottom.1 - skyTop.1) * v
                    var b = skyTop.2 + (skyBottom.2 - skyTop.2) * v
                    let dx = Double(x) - sun.x
                    let d2 = (dx * dx + dy * dy) / (sun.r * sun.r)
                    if d2 < 4 {
                        let glow = max(0, 1 - d2 / 4)
                        let core = d2 < 1 ? 1.0 : glow * glow
                        r += (255 - r) * core; g += (240 - g) * core; b += (200 - b) * core * 0.8
                    }
                    let fy = Double(y)
                    for i in 0..<hills.count where fy > ridge[i][x] {
                        let depth = (fy - ridge[i][x]) / h
                        let c = hills[i].color
                        let shade = 1 - depth * 0.8
                        // 12·sin(0.31x + 0.17y)·sin(0.05x − 0.09y), from per-axis tables.
                        let tex = 12 * (sx1[x] * cy1 + cx1[x] * sy1) * (sx2[x] * cy2 - cx2[x] * sy2)
                        r = c.0 * shade + tex; g = c.1 * shade + tex; b = c.2 * shade + tex * 0.5
                    }
                    let n = (noise.unit() - 0.5) * 10
                    px[o] = clampByte(r + n); px[o + 1] = clampByte(g + n); px[o + 2] = clampByte(b + n)
                    o += 3
                }
            }
        }
    }

    @inline(__always) static func clampByte(_ v: Double) -> UInt8 {
        v <= 0 ? 0 : v >= 255 ? 255 : UInt8(v)
    }
}
