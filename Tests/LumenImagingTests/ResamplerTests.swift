import Foundation
import Testing
@testable import LumenImaging

/// Deterministic synthetic images for the resampler and processor tests.
enum SyntheticImages {
    /// A photo-hostile pattern: gradients, hard-edged stripes and a checkerboard (which excite
    /// the filter's negative lobes and the 0…255 clamp) and pseudo-random noise. For rgba8 the
    /// alpha has fully transparent, fully opaque and graded regions.
    static func pattern(width: Int, height: Int, format: PixelFormat, seed: UInt32 = 1) -> Bitmap {
        var state = seed &* 2_654_435_761 | 1
        func noise() -> Int {
            state ^= state << 13; state ^= state >> 17; state ^= state << 5
            return Int(state % 256)
        }
        let c = format.channels
        var pixels = [UInt8](repeating: 0, count: width * height * c)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * c
                let gradient = (x * 255) / max(width - 1, 1)
                let stripes = (x / 3 + y / 5) % 2 == 0 ? 255 : 0
                let checker = ((x / 7) ^ (y / 7)) & 1 == 0 ? 30 : 225
                pixels[i] = UInt8(gradient)
                pixels[i + 1] = UInt8(y % 3 == 0 ? stripes : checker)
                pixels[i + 2] = UInt8(noise())
                if c == 4 {
                    let band = (x * 4) / width
                    pixels[i + 3] = band == 0 ? 0 : band == 1 ? 255 : band == 2 ? UInt8(noise()) : UInt8((y * 255) / max(height - 1, 1))
                }
            }
        }
        return Bitmap(width: width, height: height, format: format, pixels: pixels)
    }

    /// A flat image of one colour.
    static func flat(width: Int, height: Int, _ rgba: (UInt8, UInt8, UInt8, UInt8), format: PixelFormat) -> Bitmap {
        let px = format == .rgba8 ? [rgba.0, rgba.1, rgba.2, rgba.3] : [rgba.0, rgba.1, rgba.2]
        return Bitmap(
            width: width, height: height, format: format,
            pixels: Array([[UInt8]](repeating: px, count: width * height).joined()))
    }

    /// An opaque disc of `color` on a fully transparent background whose (hidden) colour is
    /// `background`.
    static func disc(size: Int, radius: Double, color: (UInt8, UInt8, UInt8), background: (UInt8, UInt8, UInt8)) -> Bitmap {
        var pixels = [UInt8](repeating: 0, count: size * size * 4)
        let c = Double(size) / 2
        for y in 0..<size {
            for x in 0..<size {
                let i = (y * size + x) * 4
                let dx = Double(x) + 0.5 - c, dy = Double(y) + 0.5 - c
                let inside = dx * dx + dy * dy <= radius * radius
                let rgb = inside ? color : background
                pixels[i] = rgb.0; pixels[i + 1] = rgb.1; pixels[i + 2] = rgb.2
                pixels[i + 3] = inside ? 255 : 0
            }
        }
        return Bitmap(width: size, height: size, format: .rgba8, pixels: pixels)
    }
}

/// A deliberately plain resampler in Double: direct separable sums, written from the
/// definition and sharing no code with ``Resampler``.
enum ReferenceResampler {
    static func kernel(_ filter: Resampler.Filter) -> (support: Double, value: (Double) -> Double) {
        switch filter {
        case .lanczos3:
            return (3, { x in
                if x == 0 { return 1 }
                if abs(x) >= 3 { return 0 }
                return 3 * sin(Double.pi * x) * sin(Double.pi * x / 3) / (Double.pi * Double.pi * x * x)
            })
        case .lanczos2:
            return (2, { x in
                if x == 0 { return 1 }
                if abs(x) >= 2 { return 0 }
                return 2 * sin(Double.pi * x) * sin(Double.pi * x / 2) / (Double.pi * Double.pi * x * x)
            })
        case .triangle:
            return (1, { x in max(0, 1 - abs(x)) })
        }
    }

    /// For each output sample, the (source index, weight) pairs: output centre
    /// `(i + 0.5) · src / dst`, kernel stretched by the reduction factor, indices clamped to
    /// the edge, weights normalised.
    static func weights(source: Int, destination: Int, filter: Resampler.Filter) -> [[(Int, Double)]] {
        let (support, value) = kernel(filter)
        let scale = Double(destination) / Double(source)
        let stretch = min(scale, 1)
        let reach = support / stretch
        return (0..<destination).map { i in
            let centre = (Double(i) + 0.5) / scale
            var taps: [(Int, Double)] = []
            var sum = 0.0
            for j in Int(floor(centre - reach)) - 1...Int(ceil(centre + reach)) + 1 {
                let d = Double(j) + 0.5 - centre
                guard abs(d) < reach else { continue }
                let w = value(d * stretch)
                taps.append((min(max(j, 0), source - 1), w))
                sum += w
            }
            return taps.map { ($0.0, $0.1 / sum) }
        }
    }

    struct Output {
        var bitmap: Bitmap
        /// Pixels whose filtered alpha is within a hair of the 0.5 cut-off that makes a pixel
        /// transparent: float and double may legitimately land on different sides.
        var ambiguous: Set<Int>
    }

    /// `image` resampled in Double; rgba8 filtered premultiplied when `premultiplied`, else
    /// channel by channel (the naive way).
    static func resample(
        _ image: Bitmap, width: Int, height: Int, filter: Resampler.Filter = .lanczos3, premultiplied: Bool = true
    ) -> Output {
        let sw = image.width, sh = image.height
        let hasAlpha = image.format == .rgba8
        // Source as Double RGBA, premultiplied when asked.
        var src = [SIMD4<Double>](repeating: .zero, count: sw * sh)
        for y in 0..<sh {
            for x in 0..<sw {
                let p = image.rgba(x: x, y: y)
                let a = Double(p.a)
                let f = hasAlpha && premultiplied ? a / 255 : 1
                src[y * sw + x] = SIMD4(Double(p.r) * f, Double(p.g) * f, Double(p.b) * f, a)
            }
        }
        let wx = weights(source: sw, destination: width, filter: filter)
        let wy = weights(source: sh, destination: height, filter: filter)
        var mid = [SIMD4<Double>](repeating: .zero, count: width * sh)
        for y in 0..<sh {
            for x in 0..<width {
                var acc = SIMD4<Double>.zero
                for (j, w) in wx[x] { acc += src[y * sw + j] * w }
                mid[y * width + x] = acc
            }
        }
        func byte(_ v: Double) -> UInt8 { UInt8(min(max(v, 0), 255).rounded()) }
        let c = image.format.channels
        var out = [UInt8](repeating: 0, count: width * height * c)
        var ambiguous = Set<Int>()
        for y in 0..<height {
            for x in 0..<width {
                var acc = SIMD4<Double>.zero
                for (j, w) in wy[y] { acc += mid[j * width + x] * w }
                let o = (y * width + x) * c
                if !hasAlpha {
                    out[o] = byte(acc.x); out[o + 1] = byte(acc.y); out[o + 2] = byte(acc.z)
                } else if premultiplied {
                    if abs(acc.w - 0.5) < 1e-3 { ambiguous.insert(y * width + x) }
                    if acc.w >= 0.5 {
                        let u = 255 / acc.w
                        out[o] = byte(acc.x * u); out[o + 1] = byte(acc.y * u); out[o + 2] = byte(acc.z * u)
                        out[o + 3] = byte(acc.w)
                    }
                } else {
                    out[o] = byte(acc.x); out[o + 1] = byte(acc.y); out[o + 2] = byte(acc.z); out[o + 3] = byte(acc.w)
                }
            }
        }
        return Output(bitmap: Bitmap(width: width, height: height, format: image.format, pixels: out), ambiguous: ambiguous)
    }

    /// The largest per-channel difference between `a` and `b`, skipping `ambiguous` pixels.
    static func maxDifference(_ a: Bitmap, _ b: Bitmap, skipping ambiguous: Set<Int> = []) -> Int {
        precondition(a.width == b.width && a.height == b.height && a.format == b.format)
        let c = a.format.channels
        var worst = 0
        for i in 0..<a.pixelCount where !ambiguous.contains(i) {
            for k in 0..<c { worst = max(worst, abs(Int(a.pixels[i * c + k]) - Int(b.pixels[i * c + k]))) }
        }
        return worst
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ResamplerTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var source: (Int, Int), target: (Int, Int), format: PixelFormat, filter: Resampler.Filter = .lanczos3
        var testDescription: String { "\(source.0)x\(source.1)→\(target.0)x\(target.1) \(format) \(filter)" }
    }

    static let cases: [Case] = [
        // The thumbnail path: a 1/8 JPEG of a 12 MP photo down to 256 px.
        Case(source: (500, 375), target: (256, 192), format: .rgb8),
        // A 16× reduction on both axes (the support grows to ±48 source pixels).
        Case(source: (1024, 256), target: (64, 16), format: .rgb8),
        Case(source: (1024, 256), target: (64, 16), format: .rgba8),
        // Odd factors, one axis up and one down, rgba with transparent regions.
        Case(source: (301, 199), target: (97, 61), format: .rgba8),
        Case(source: (640, 12), target: (33, 40), format: .rgb8),
        // Upscaling.
        Case(source: (37, 23), target: (100, 61), format: .rgb8),
        Case(source: (20, 15), target: (64, 47), format: .rgba8),
        // The other filters.
        Case(source: (200, 150), target: (71, 53), format: .rgba8, filter: .lanczos2),
        Case(source: (200, 150), target: (71, 53), format: .rgb8, filter: .triangle),
    ]

    /// Both inner-loop kernels this CPU runs (the portable Swift loops, and AVX2 where present).
    static let kernels = Resampler.Kernel.available

    @Test(arguments: cases, kernels)
    func matchesDoubleReferenceWithinOneLevel(_ c: Case, _ kernel: Resampler.Kernel) {
        let image = SyntheticImages.pattern(width: c.source.0, height: c.source.1, format: c.format)
        let actual = Resampler.resample(image, width: c.target.0, height: c.target.1, filter: c.filter, kernel: kernel)
        let expected = ReferenceResampler.resample(image, width: c.target.0, height: c.target.1, filter: c.filter)
        #expect(actual.width == c.target.0 && actual.height == c.target.1 && actual.format == c.format)
        let worst = ReferenceResampler.maxDifference(actual, expected.bitmap, skipping: expected.ambiguous)
        #expect(worst <= 1, "worst per-channel difference \(worst) levels")
        #expect(expected.ambiguous.count * 100 < c.target.0 * c.target.1, "too many pixels skipped as ambiguous")
    }

    /// Sides of 1, 2, 3, 5 and 7 pixels on either end (the kernels' tails, which run pixel by
    /// pixel), extreme reductions (hundreds of taps) and upscales, RGB and RGBA.
    static let edgeCases: [Case] = [1, 2, 3, 5, 7].flatMap { n in
        [Case(source: (n, 9), target: (40, 11), format: .rgb8), Case(source: (n, 9), target: (40, 11), format: .rgba8),
         Case(source: (53, 41), target: (n, n), format: .rgb8), Case(source: (53, 41), target: (n, 3), format: .rgba8),
         Case(source: (n, n), target: (n + 4, 2 * n + 1), format: .rgba8)]
    } + [
        Case(source: (2000, 5), target: (7, 2), format: .rgb8),  // 285× across: ±860 source pixels
        Case(source: (9, 1500), target: (5, 3), format: .rgba8),  // 500× down
        Case(source: (3, 2), target: (301, 157), format: .rgb8),  // 100× up
        Case(source: (4, 3), target: (129, 250), format: .rgba8),
    ]

    @Test(arguments: edgeCases, kernels)
    func oddSidesAndExtremeScalesMatchTheReference(_ c: Case, _ kernel: Resampler.Kernel) {
        matchesDoubleReferenceWithinOneLevel(c, kernel)
    }

    /// A window of the result (what decoding to a crop uses) is the same pixels as cropping the
    /// full result, with each kernel, and within a level of the reference.
    @Test(arguments: [PixelFormat.rgb8, .rgba8], kernels)
    func windowIsTheCropOfTheFullResult(_ format: PixelFormat, _ kernel: Resampler.Kernel) {
        let image = SyntheticImages.pattern(width: 301, height: 199, format: format, seed: 7)
        let (w, h) = (203, 131)
        let full = Resampler.resample(image, width: w, height: h, filter: .lanczos3, kernel: kernel)
        let expected = ReferenceResampler.resample(image, width: w, height: h)
        for (x, y, cw, ch) in [(0, 0, w, h), (17, 5, 101, 63), (w - 3, h - 1, 3, 1), (100, 0, 1, h), (0, 60, w, 1)] {
            let window = Resampler.resample(
                image, width: w, height: h, columns: x..<(x + cw), rows: y..<(y + ch), kernel: kernel)
            #expect(window == full.cropped(x: x, y: y, width: cw, height: ch), "window \(x),\(y) \(cw)x\(ch)")
        }
        #expect(ReferenceResampler.maxDifference(full, expected.bitmap, skipping: expected.ambiguous) <= 1)
    }

    /// The AVX2 kernel and the portable one agree within a level on random noise of random
    /// sizes (the worst case for cancellation in the negative lobes), every filter, both
    /// formats, and on Gaussian blurs. RGBA pixels whose alpha is within a hair of the cut-off
    /// (0 in one result, 1 in the other) are skipped for their colour.
    /// (Skipped on CPUs without AVX2 and FMA, where only the portable kernel runs.)
    @Test(.enabled(if: Resampler.Kernel.isAVX2Available, "no AVX2 and FMA on this CPU: nothing to compare"))
    func avx2AgreesWithThePortableKernel() throws {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ bound: Int) -> Int {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            return Int(state % UInt64(bound))
        }
        func compare(_ a: Bitmap, _ b: Bitmap, _ label: String) {
            let c = a.format.channels
            var worst = 0
            for i in 0..<a.pixelCount {
                let alphas = c == 4 ? (Int(a.pixels[i * 4 + 3]), Int(b.pixels[i * 4 + 3])) : (255, 255)
                let channels = alphas.0 <= 1 || alphas.1 <= 1 ? (c - 1)..<c : 0..<c
                for k in channels { worst = max(worst, abs(Int(a.pixels[i * c + k]) - Int(b.pixels[i * c + k]))) }
            }
            #expect(worst <= 1, "\(label): worst difference \(worst) levels")
        }
        for round in 0..<60 {
            let format: PixelFormat = round % 2 == 0 ? .rgb8 : .rgba8
            let (sw, sh) = (1 + next(120), 1 + next(90))
            var pixels = [UInt8](repeating: 0, count: sw * sh * format.channels)
            for i in pixels.indices { pixels[i] = UInt8(next(256)) }
            let image = Bitmap(width: sw, height: sh, format: format, pixels: pixels)
            let (w, h) = (1 + next(150), 1 + next(110))
            let filter = Resampler.Filter.allCases[round % 3]
            let label = "\(sw)x\(sh)→\(w)x\(h) \(format) \(filter)"
            compare(Resampler.resample(image, width: w, height: h, filter: filter, kernel: .avx2),
                    Resampler.resample(image, width: w, height: h, filter: filter, kernel: .portable), label)
            if round % 6 == 0 {
                let sigma = 0.5 + Double(next(40)) / 4
                let hw = FilterWeights(gaussian: sigma, count: sw), vw = FilterWeights(gaussian: sigma, count: sh)
                compare(Resampler.convolve(image, horizontal: hw, vertical: vw, kernel: .avx2),
                        Resampler.convolve(image, horizontal: hw, vertical: vw, kernel: .portable), "blur σ \(sigma) \(label)")
            }
        }
    }

    @Test func weightsAreNormalisedAndSupportGrowsWithTheReduction() {
        // 10× reduction: Lanczos-3 reaches ±30 source pixels, so about 60 taps.
        let down = FilterWeights(resampling: 1000, to: 100, filter: .lanczos3)
        let taps = down.taps(of: 50)
        #expect((58...61).contains(taps.count), "\(taps.count) taps")
        #expect(abs(taps.reduce(0) { $0 + Double($1.weight) } - 1) < 1e-5)
        // Upscale: the filter keeps its natural ±3 reach, 6 taps at most.
        let up = FilterWeights(resampling: 100, to: 1000, filter: .lanczos3)
        for i in [0, 1, 500, 999] {
            let t = up.taps(of: i)
            #expect(t.count <= 6)
            #expect(abs(t.reduce(0) { $0 + Double($1.weight) } - 1) < 1e-5)
            #expect(t.allSatisfy { (0..<100).contains($0.index) }, "taps stay inside the source (clamp to edge)")
        }
    }

    /// Cached tables are the tables the arguments give (extent and output window included),
    /// the cache stays bounded, and tables too large to keep are built each time.
    @Test func cachedWeightsAreTheWeightsOfTheirArguments() {
        func same(_ a: FilterWeights, _ b: FilterWeights) -> Bool {
            a.sourceCount == b.sourceCount && a.count == b.count && a.stride == b.stride
                && (0..<a.count).allSatisfy { i in a.taps(of: i).elementsEqual(b.taps(of: i)) { $0.index == $1.index && $0.weight == $1.weight } }
        }
        let cases: [(Int, Int, Double?, Range<Int>?, Resampler.Filter)] = [
            (300, 256, nil, nil, .lanczos3), (300, 256, nil, nil, .lanczos2), (300, 256, 299.5, nil, .lanczos3),
            (300, 256, nil, 10..<200, .lanczos3), (301, 256, nil, nil, .lanczos3), (300, 255, nil, nil, .lanczos3),
        ]
        for _ in 0..<2 {  // the second pass reads the cache
            for (source, destination, extent, outputs, filter) in cases {
                let cached = FilterWeights.cached(resampling: source, to: destination, extent: extent, outputs: outputs, filter: filter)
                let built = FilterWeights(resampling: source, to: destination, extent: extent, outputs: outputs, filter: filter)
                #expect(same(cached, built), "\(source)→\(destination) extent \(String(describing: extent)) outputs \(String(describing: outputs)) \(filter)")
            }
        }
        for destination in 1...(FilterWeights.cacheCapacity * 2) {
            _ = FilterWeights.cached(resampling: 64, to: destination, filter: .triangle)
        }
        #expect(FilterWeights.cache.withLock { $0.count } <= FilterWeights.cacheCapacity)
        // 10 000 outputs: far more weights than the cache keeps.
        let large = FilterWeights.cached(resampling: 20_000, to: 10_000, filter: .lanczos3)
        #expect(large.count * large.stride > FilterWeights.cacheableEntries)
        #expect(!FilterWeights.cache.withLock { $0.contains(source: 20_000) })
    }

    @Test(arguments: [PixelFormat.rgb8, .rgba8], kernels)
    func flatImageStaysFlat(_ format: PixelFormat, _ kernel: Resampler.Kernel) {
        let image = SyntheticImages.flat(width: 123, height: 77, (200, 13, 99, 180), format: format)
        for (w, h) in [(40, 25), (300, 190), (1, 1), (123, 5)] {
            let out = Resampler.resample(image, width: w, height: h, filter: .lanczos3, kernel: kernel)
            let expected = SyntheticImages.flat(width: w, height: h, (200, 13, 99, 180), format: format)
            #expect(out == expected, "\(w)x\(h)")
        }
    }

    @Test func sameSizeReturnsTheImageUnchanged() {
        let image = SyntheticImages.pattern(width: 31, height: 17, format: .rgba8)
        #expect(Resampler.resample(image, width: 31, height: 17) == image)
    }

    /// An opaque red disc on a transparent background: after downscaling, every pixel with
    /// any alpha is still pure red. The naive (straight-alpha) filter, computed alongside,
    /// darkens (black background) or tints (green background) the rim, so the check is real.
    @Test(arguments: [(UInt8(0), UInt8(0), UInt8(0)), (0, 255, 0)], kernels)
    func transparentEdgesShowNoFringe(_ background: (UInt8, UInt8, UInt8), _ kernel: Resampler.Kernel) {
        let disc = SyntheticImages.disc(size: 256, radius: 100, color: (255, 0, 0), background: background)
        func fringed(_ image: Bitmap) -> Int {
            var count = 0
            for y in 0..<image.height {
                for x in 0..<image.width {
                    let p = image.rgba(x: x, y: y)
                    if p.a > 0 && (p.r < 254 || p.g > 1 || p.b > 1) { count += 1 }
                }
            }
            return count
        }
        for size in [37, 64, 100] {
            let out = Resampler.resample(disc, width: size, height: size, filter: .lanczos3, kernel: kernel)
            #expect(fringed(out) == 0, "\(size) px: fringe pixels")
            let edge = (0..<out.pixelCount).filter { out.pixels[$0 * 4 + 3] > 0 && out.pixels[$0 * 4 + 3] < 255 }
            #expect(!edge.isEmpty, "the rim is partially transparent, so the check above saw edge pixels")
            let naive = ReferenceResampler.resample(disc, width: size, height: size, premultiplied: false).bitmap
            #expect(fringed(naive) > 0, "without premultiplication the rim fringes")
        }
    }
}
