import CLumenShim
import Foundation

/// Resizes bitmaps with a separable, high-quality convolution filter (Lanczos-3 by default).
///
/// The contract:
/// - The filter's support grows with the reduction factor (a 10× reduction looks at ±30 source
///   pixels with Lanczos-3), so large reductions are properly low-passed, not aliased; upscaling
///   uses the filter at its natural width.
/// - Weights are computed per axis (kept in a small cache for the next call with the same
///   sizes, see `FilterWeights`) and normalised to sum to one; pixels beyond the border
///   repeat the edge pixel (clamp to edge).
/// - ``PixelFormat/rgba8`` is filtered premultiplied (colour × alpha) and unpremultiplied on the
///   way out, so transparent pixels never bleed their (meaningless) colour into their
///   neighbours: no dark fringes around transparent areas.
/// - Arithmetic is 32-bit float, four channels at a time; the result is rounded to nearest and
///   clamped to 0…255 (the filter's negative lobes can overshoot). On x86-64 CPUs with AVX2 and
///   FMA the inner loops run in C (`lumen_resample.c`), two pixels or two taps per instruction
///   with fused multiply-adds; sums are then associated differently, so a channel may differ by
///   one level from the portable loops.
/// - Memory: one expanded source row plus a ring of horizontally filtered rows as tall as the
///   vertical filter, never a full-size intermediate image.
///
/// Calls are pure and safe to make concurrently from many threads.
public enum Resampler {
    /// A reconstruction filter for ``Resampler``.
    public enum Filter: String, Sendable, Hashable, CaseIterable {
        /// Lanczos windowed sinc with 3 lobes: sharp, slight ringing. The default.
        case lanczos3
        /// Lanczos windowed sinc with 2 lobes: a little softer, less ringing, faster.
        case lanczos2
        /// Triangle (bilinear when upscaling, area-like when reducing): soft, no ringing.
        case triangle

        /// Half-width of the filter in source pixels at scale 1.
        public var support: Double {
            switch self {
            case .lanczos3: 3
            case .lanczos2: 2
            case .triangle: 1
            }
        }

        /// The filter's value at distance `x` (in filter units, 0 at the centre).
        public func value(at x: Double) -> Double {
            let x = abs(x)
            switch self {
            case .lanczos3: return x < 3 ? sinc(x) * sinc(x / 3) : 0
            case .lanczos2: return x < 2 ? sinc(x) * sinc(x / 2) : 0
            case .triangle: return x < 1 ? 1 - x : 0
            }
        }

        private func sinc(_ x: Double) -> Double {
            if x < 1e-9 { return 1 }
            let px = Double.pi * x
            return sin(px) / px
        }
    }

    /// `image` resampled to exactly `width`×`height` with `filter`.
    ///
    /// Returns `image` itself when the size is unchanged. Both axes are scaled independently
    /// (the aspect ratio is the caller's business).
    /// - Precondition: `width` and `height` are positive.
    /// - Complexity: O(source rows × `width` × horizontal taps + `height` × `width` × vertical
    ///   taps), where taps ≈ 2 × support × max(1, source / destination).
    public static func resample(_ image: Bitmap, width: Int, height: Int, filter: Filter = .lanczos3) -> Bitmap {
        resample(image, width: width, height: height, filter: filter, kernel: .best)
    }

    /// `resample(_:width:height:filter:)` with the inner loops of `kernel` (tests run both).
    static func resample(_ image: Bitmap, width: Int, height: Int, filter: Filter, kernel: Kernel) -> Bitmap {
        precondition(width > 0 && height > 0, "Resampler: target size must be positive, got \(width)x\(height)")
        if width == image.width && height == image.height { return image }
        let image = boundingTaps(image, width: width, height: height, outputs: (width, height), filter: filter)
        let horizontal = FilterWeights.cached(resampling: image.width, to: width, filter: filter)
        let vertical = FilterWeights.cached(resampling: image.height, to: height, filter: filter)
        return convolve(image, horizontal: horizontal, vertical: vertical, kernel: kernel)
    }

    /// The window `columns`×`rows` of `image` resampled to `width`×`height`: exactly the pixels
    /// `resample(image, width:height:filter:).cropped(…)` gives, without building the full-size
    /// result. A centre crop after an aspect-fill upscale of a very thin image (1×4000 filled
    /// into 256×256 scales to 256×1 024 000) would otherwise allocate the whole strip.
    /// - Precondition: the window lies inside `width`×`height` and is not empty.
    ///
    /// `extent`, when given, is the size of the picture in `image`'s pixels when its last
    /// column or row covers only part of a pixel's width (a reduced decode of a side that is
    /// not a multiple of the reduction): the output spans that extent, not the whole pixel grid.
    static func resample(
        _ image: Bitmap, width: Int, height: Int, columns: Range<Int>, rows: Range<Int>, filter: Filter = .lanczos3,
        extent: (width: Double, height: Double)? = nil, kernel: Kernel = .best
    ) -> Bitmap {
        precondition(
            !columns.isEmpty && !rows.isEmpty && columns.lowerBound >= 0 && rows.lowerBound >= 0
                && columns.upperBound <= width && rows.upperBound <= height,
            "Resampler: window \(columns)x\(rows) is outside \(width)x\(height)")
        if width == image.width && height == image.height && isWholeGrid(image, extent: extent) {
            return image.cropped(x: columns.lowerBound, y: rows.lowerBound, width: columns.count, height: rows.count)
        }
        let original = image
        let image = boundingTaps(image, width: width, height: height, outputs: (columns.count, rows.count), filter: filter)
        // A box reduction for extreme ratios rescales the extent with the grid.
        let extentWidth = extent.map { $0.width * Double(image.width) / Double(original.width) }
        let extentHeight = extent.map { $0.height * Double(image.height) / Double(original.height) }
        let horizontal = FilterWeights.cached(resampling: image.width, to: width, extent: extentWidth, outputs: columns, filter: filter)
        let vertical = FilterWeights.cached(resampling: image.height, to: height, extent: extentHeight, outputs: rows, filter: filter)
        return convolve(image, horizontal: horizontal, vertical: vertical, kernel: kernel)
    }

    /// Whether `extent` (see ``resample(_:width:height:columns:rows:filter:extent:kernel:)``)
    /// is `image`'s own pixel grid: no extent, or one equal to its size. Otherwise the edge
    /// pixels cover less than a whole pixel and a same-size resample is not the identity.
    static func isWholeGrid(_ image: Bitmap, extent: (width: Double, height: Double)?) -> Bool {
        guard let extent else { return true }
        return extent.width == Double(image.width) && extent.height == Double(image.height)
    }

    /// Which implementation of the inner loops ``convolve(_:horizontal:vertical:kernel:)`` runs.
    /// Both compute the same sums with the same tables; they differ in the order of the
    /// additions and in fused multiply-adds.
    enum Kernel: Sendable, Hashable, CustomStringConvertible {
        /// The Swift loops below: 128-bit vectors (one pixel per instruction), any CPU.
        case portable
        /// `lumen_resample.c`: AVX2 and FMA. Only on x86-64 CPUs that have both.
        case avx2

        /// The fastest kernel this CPU runs.
        static let best: Kernel = isAVX2Available ? .avx2 : .portable
        /// Whether this CPU has AVX2 and FMA (always false off x86-64).
        static let isAVX2Available = lumen_resample_avx2_available() != 0
        /// Every kernel this CPU runs.
        static var available: [Kernel] { isAVX2Available ? [.portable, .avx2] : [.portable] }

        var description: String { self == .avx2 ? "avx2" : "portable" }
    }

    /// Runs the separable convolution described by `horizontal` (source width → output width)
    /// and `vertical` (source height → output height) over `image`: the engine shared by
    /// resampling and blurring.
    static func convolve(_ image: Bitmap, horizontal: FilterWeights, vertical: FilterWeights, kernel: Kernel = .best) -> Bitmap {
        precondition(horizontal.sourceCount == image.width && vertical.sourceCount == image.height)
        precondition(kernel == .portable || Kernel.isAVX2Available, "Resampler: this CPU has no AVX2 and FMA")
        let avx2 = kernel == .avx2
        let dstW = horizontal.count, dstH = vertical.count
        let srcW = image.width
        let format = image.format
        let channels = format.channels
        let premultiplied = format == .rgba8
        let ringRows = vertical.stride
        let srcRowBytes = image.bytesPerRow

        // Scratch: one expanded source row, the ring of filtered rows, the row pointers of one
        // vertical window, and which source row each ring slot holds.
        // The expanded row has 3 zero pixels of tail so that the horizontal taps, padded with
        // zero weights to a multiple of 4, never read uninitialised memory.
        let expanded = UnsafeMutablePointer<SIMD4<Float>>.allocate(capacity: srcW + 3)
        (expanded + srcW).initialize(repeating: SIMD4(), count: 3)
        let accumulator = UnsafeMutablePointer<SIMD4<Float>>.allocate(capacity: dstW)
        let ring = UnsafeMutablePointer<SIMD4<Float>>.allocate(capacity: ringRows * dstW)
        let window = UnsafeMutablePointer<UnsafePointer<SIMD4<Float>>>.allocate(capacity: ringRows)
        let slotRow = UnsafeMutablePointer<Int>.allocate(capacity: ringRows)
        slotRow.initialize(repeating: -1, count: ringRows)
        defer {
            expanded.deallocate(); accumulator.deallocate(); ring.deallocate(); window.deallocate(); slotRow.deallocate()
        }

        return image.pixels.withUnsafeBufferPointer { srcBuffer in
            let src = srcBuffer.baseAddress!
            return horizontal.withTables { hStarts, hCounts, hWeights, hStride in
                vertical.withTables { vStarts, vCounts, vWeights, vStride in
                    Bitmap(width: dstW, height: dstH, format: format) { dstBuffer in
                        let dst = dstBuffer.baseAddress!
                        for y in 0..<dstH {
                            let start = vStarts[y], n = vCounts[y]
                            // Make sure the window's source rows are filtered and resident.
                            for k in 0..<n {
                                let row = start + k
                                let slot = row % ringRows
                                let out = ring + slot * dstW
                                if slotRow[slot] != row {
                                    let s = src + row * srcRowBytes
                                    if avx2 {
                                        lumen_resample_filter_row_avx2(
                                            s, srcW, premultiplied ? 1 : 0, floats(expanded), floats(out), dstW, hStarts,
                                            hCounts, floats(hWeights), hStride)
                                    } else if premultiplied {
                                        expandPremultiplying(s, count: srcW, into: expanded)
                                    } else {
                                        expandRGB(s, count: srcW, into: expanded)
                                    }
                                    if !avx2 {
                                        filterRow(expanded, into: out, count: dstW, starts: hStarts, counts: hCounts,
                                                  weights: hWeights, stride: hStride)
                                    }
                                    slotRow[slot] = row
                                }
                                window[k] = UnsafePointer(out)
                            }
                            let d = dst + y * dstW * channels
                            if avx2 {
                                lumen_resample_sum_rows_avx2(
                                    UnsafePointer(OpaquePointer(window)), n, floats(vWeights + y * vStride), dstW,
                                    premultiplied ? 1 : 0, d)
                                continue
                            }
                            sumRows(window, count: n, weights: vWeights + y * vStride, width: dstW, into: accumulator)
                            if premultiplied {
                                for x in 0..<dstW { storeUnpremultiplying(accumulator[x], to: d + x * 4) }
                            } else {
                                for x in 0..<dstW {
                                    let acc = accumulator[x], o = d + x * 3
                                    o[0] = byte(acc.x); o[1] = byte(acc.y); o[2] = byte(acc.z)
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    // MARK: - Extreme reductions

    /// `image`, box-reduced first along any axis whose weight table would hold more taps than
    /// the image has pixels (and more than a few million).
    ///
    /// A reduction by a factor f has about 2 × support × f taps per output, so an axis's table
    /// costs about 2 × support × source samples × 24 bytes whatever the output size. For
    /// ordinary images that is a fraction of the pixels; for a hostile strip (100 000 000×1
    /// passes a 100 MP limit) it would be gigabytes. Such an axis is first averaged over runs
    /// of whole pixels (premultiplied) down to about 3× the output, then filtered as usual.
    static func boundingTaps(
        _ image: Bitmap, width: Int, height: Int, outputs: (x: Int, y: Int), filter: Filter
    ) -> Bitmap {
        let budget = max(image.pixelCount, 1 << 22)
        func runLength(source: Int, destination: Int, outputs: Int) -> Int {
            let factor = Double(source) / Double(destination)
            guard factor > 6 else { return 1 }
            let taps = Double(outputs) * (2 * filter.support * factor + 4)
            return taps > Double(budget) ? Int(factor / 3) : 1
        }
        let kx = runLength(source: image.width, destination: width, outputs: outputs.x)
        let ky = runLength(source: image.height, destination: height, outputs: outputs.y)
        return kx == 1 && ky == 1 ? image : boxReduced(image, columns: kx, rows: ky)
    }

    /// `image` with every run of `columns` pixels in a row and `rows` pixels in a column
    /// averaged into one (the last run takes the remainder); RGBA is averaged premultiplied.
    static func boxReduced(_ image: Bitmap, columns kx: Int, rows ky: Int) -> Bitmap {
        let w = image.width, h = image.height, c = image.format.channels
        let ow = max(1, w / kx), oh = max(1, h / ky)
        let hasAlpha = image.format == .rgba8
        var sums = [Int](repeating: 0, count: ow * 4)
        var counts = [Int](repeating: 0, count: ow)
        return image.pixels.withUnsafeBufferPointer { src in
            Bitmap(width: ow, height: oh, format: image.format) { dst in
                for oy in 0..<oh {
                    for i in sums.indices { sums[i] = 0 }
                    for i in counts.indices { counts[i] = 0 }
                    let y1 = oy == oh - 1 ? h : (oy + 1) * ky
                    for y in (oy * ky)..<y1 {
                        let row = y * w * c
                        for x in 0..<w {
                            let ox = min(x / kx, ow - 1), p = row + x * c
                            let a = hasAlpha ? Int(src[p + 3]) : 255
                            sums[ox * 4] += Int(src[p]) * a
                            sums[ox * 4 + 1] += Int(src[p + 1]) * a
                            sums[ox * 4 + 2] += Int(src[p + 2]) * a
                            sums[ox * 4 + 3] += a
                            counts[ox] += 1
                        }
                    }
                    for ox in 0..<ow {
                        let alpha = sums[ox * 4 + 3], o = (oy * ow + ox) * c
                        for k in 0..<3 { dst[o + k] = alpha == 0 ? 0 : UInt8((sums[ox * 4 + k] + alpha / 2) / alpha) }
                        if hasAlpha { dst[o + 3] = UInt8((alpha + counts[ox] / 2) / counts[ox]) }
                    }
                }
            }
        }
    }

    // MARK: - Inner loops

    /// A pixel or weight pointer as the C kernels take it: 4 floats per element.
    @inline(__always)
    private static func floats(_ p: UnsafePointer<SIMD4<Float>>) -> UnsafePointer<Float> { UnsafePointer(OpaquePointer(p)) }

    @inline(__always)
    private static func floats(_ p: UnsafeMutablePointer<SIMD4<Float>>) -> UnsafeMutablePointer<Float> {
        UnsafeMutablePointer(OpaquePointer(p))
    }

    /// One horizontal pass: `out[x] = Σ row[starts[x] + t] × weights[x × stride + t]`. Tap
    /// counts are padded to a multiple of 4 (the weight table's padding is zero) and summed in
    /// four independent accumulators, so the loop is bound by throughput, not add latency.
    @inline(__always)
    static func filterRow(
        _ row: UnsafePointer<SIMD4<Float>>, into out: UnsafeMutablePointer<SIMD4<Float>>, count: Int,
        starts: UnsafePointer<Int>, counts: UnsafePointer<Int>, weights: UnsafePointer<SIMD4<Float>>, stride: Int
    ) {
        for x in 0..<count {
            let p = row + starts[x]
            let w = weights + x * stride
            let n = counts[x]
            var a0 = SIMD4<Float>(), a1 = SIMD4<Float>(), a2 = SIMD4<Float>(), a3 = SIMD4<Float>()
            var t = 0
            while t < n {
                a0 += p[t] * w[t]
                a1 += p[t + 1] * w[t + 1]
                a2 += p[t + 2] * w[t + 2]
                a3 += p[t + 3] * w[t + 3]
                t &+= 4
            }
            out[x] = (a0 + a1) + (a2 + a3)
        }
    }

    /// One vertical pass: `acc[x] = Σ rows[t][x] × weights[t]`, row by row so that every
    /// pixel's sum is independent (vectorisable, no add-latency chain).
    @inline(__always)
    static func sumRows(
        _ rows: UnsafePointer<UnsafePointer<SIMD4<Float>>>, count n: Int, weights: UnsafePointer<SIMD4<Float>>,
        width: Int, into acc: UnsafeMutablePointer<SIMD4<Float>>
    ) {
        let r0 = rows[0], w0 = weights[0]
        for x in 0..<width { acc[x] = r0[x] * w0 }
        var t = 1
        while t + 1 < n {
            let ra = rows[t], wa = weights[t], rb = rows[t + 1], wb = weights[t + 1]
            for x in 0..<width { acc[x] += ra[x] * wa + rb[x] * wb }
            t += 2
        }
        if t < n {
            let ra = rows[t], wa = weights[t]
            for x in 0..<width { acc[x] += ra[x] * wa }
        }
    }

    // MARK: - Pixel conversion

    @inline(__always)
    static func expandRGB(_ s: UnsafePointer<UInt8>, count: Int, into out: UnsafeMutablePointer<SIMD4<Float>>) {
        for i in 0..<count {
            let p = s + i * 3
            out[i] = SIMD4(Float(p[0]), Float(p[1]), Float(p[2]), 255)
        }
    }

    @inline(__always)
    static func expandPremultiplying(_ s: UnsafePointer<UInt8>, count: Int, into out: UnsafeMutablePointer<SIMD4<Float>>) {
        let scale: Float = 1 / 255
        for i in 0..<count {
            let p = s + i * 4
            let a = Float(p[3])
            let f = a * scale
            out[i] = SIMD4(Float(p[0]) * f, Float(p[1]) * f, Float(p[2]) * f, a)
        }
    }

    /// `v` rounded to nearest and clamped to 0…255.
    @inline(__always)
    static func byte(_ v: Float) -> UInt8 {
        let c = min(max(v, 0), 255) + 0.5
        return UInt8(truncatingIfNeeded: Int32(c))
    }

    /// Writes premultiplied `acc` as straight RGBA. A pixel whose alpha rounds to zero is
    /// written as transparent black.
    @inline(__always)
    static func storeUnpremultiplying(_ acc: SIMD4<Float>, to o: UnsafeMutablePointer<UInt8>) {
        let a = acc.w
        if a < 0.5 {
            o[0] = 0; o[1] = 0; o[2] = 0; o[3] = 0
            return
        }
        let f = 255 / a
        o[0] = byte(acc.x * f); o[1] = byte(acc.y * f); o[2] = byte(acc.z * f); o[3] = byte(a)
    }
}
