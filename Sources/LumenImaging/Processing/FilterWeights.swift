import Foundation
import Synchronization

/// The precomputed, normalised taps of a 1-D convolution from `sourceCount` samples to
/// `count` samples: for output `i`, `counts[i]` weights applied to source samples
/// `starts[i] ..< starts[i] + counts[i]` (always inside the source: borders are folded onto the
/// edge sample). Weights are stored with a fixed `stride` per output.
struct FilterWeights: Sendable {
    let sourceCount: Int
    let count: Int
    /// The largest number of taps of any output (the table's row stride).
    let stride: Int
    private let starts: [Int]
    private let counts: [Int]
    /// Each weight repeated in four lanes, so the inner loops multiply without shuffling.
    private let weights: [SIMD4<Float>]

    /// Resampling weights: output pixel `i`'s centre maps to source position
    /// `(i + 0.5) × source / destination`, and the filter is stretched by the reduction
    /// factor when downscaling.
    /// With `outputs`, only those outputs of the `destination`-sample result are built (output
    /// `k` of the table is output `outputs.lowerBound + k` of the full resampling). With
    /// `extent` (at most `source`, more than `source − 1`), the destination spans that many
    /// source samples instead of all of them: the last sample covers only part of its width.
    init(resampling source: Int, to destination: Int, extent: Double? = nil, outputs: Range<Int>? = nil, filter: Resampler.Filter) {
        let span = max(extent.map { min(max($0, Double(source) - 1), Double(source)) } ?? Double(source), 1e-6)
        let scale = Double(destination) / span
        let filterScale = min(scale, 1)
        let support = filter.support / filterScale
        let outputs = outputs ?? 0..<destination
        self.init(source: source, count: outputs.count, radius: support) { i in
            let center = (Double(outputs.lowerBound + i) + 0.5) / scale
            return (center, { x in filter.value(at: x * filterScale) })
        }
    }

    /// The resampling weights for these arguments, from a small cache shared by all threads:
    /// thumbnails of one feed resample between a handful of sizes, and a table costs two
    /// `sin` calls per tap to build. Tables of more than ``cacheableEntries`` weights are built
    /// each time; the cache keeps the ``cacheCapacity`` most recently used.
    static func cached(resampling source: Int, to destination: Int, extent: Double? = nil, outputs: Range<Int>? = nil,
                       filter: Resampler.Filter) -> FilterWeights {
        let key = CacheKey(source: source, destination: destination, extent: extent, outputs: outputs ?? 0..<destination, filter: filter)
        if let hit = cache.withLock({ $0.get(key) }) { return hit }
        let weights = FilterWeights(resampling: source, to: destination, extent: extent, outputs: outputs, filter: filter)
        if weights.count * weights.stride <= cacheableEntries {
            cache.withLock { $0.put(key, weights) }
        }
        return weights
    }

    /// The largest table the cache keeps, in weights (16 bytes each): 64 KB.
    static let cacheableEntries = 4096
    /// How many tables the cache keeps (at most 1 MB).
    static let cacheCapacity = 16

    struct CacheKey: Hashable {
        var source: Int
        var destination: Int
        var extent: Double?
        var outputs: Range<Int>
        var filter: Resampler.Filter
    }

    /// A least-recently-used table cache (a handful of entries: a linear scan is cheapest).
    struct WeightCache {
        private var entries: [(key: CacheKey, weights: FilterWeights)] = []

        mutating func get(_ key: CacheKey) -> FilterWeights? {
            guard let i = entries.firstIndex(where: { $0.key == key }) else { return nil }
            let entry = entries.remove(at: i)
            entries.append(entry)
            return entry.weights
        }

        mutating func put(_ key: CacheKey, _ weights: FilterWeights) {
            entries.removeAll { $0.key == key }
            if entries.count >= FilterWeights.cacheCapacity { entries.removeFirst() }
            entries.append((key, weights))
        }

        var count: Int { entries.count }

        /// Whether a table for a source of `source` samples is kept (tests).
        func contains(source: Int) -> Bool { entries.contains { $0.key.source == source } }
    }

    static let cache = Mutex(WeightCache())

    /// Gaussian blur weights (same size in and out) with standard deviation `sigma`, truncated
    /// at 3 σ.
    init(gaussian sigma: Double, count: Int) {
        let radius = max(1, (3 * sigma).rounded(.up))
        let k = -1 / (2 * sigma * sigma)
        self.init(source: count, count: count, radius: radius + 0.5) { i in
            (Double(i) + 0.5, { x in exp(x * x * k) })
        }
    }

    /// Builds the table. `kernel(i)` gives output `i`'s centre in source coordinates (sample
    /// `j` sits at `j + 0.5`) and the kernel as a function of the signed distance; taps are
    /// the samples strictly within `radius` of the centre.
    private init(source: Int, count: Int, radius: Double, kernel: (Int) -> (Double, (Double) -> Double)) {
        precondition(source > 0 && count > 0)
        let bound = min(source, Int((2 * radius).rounded(.up)) + 2)
        var starts = [Int](repeating: 0, count: count)
        var counts = [Int](repeating: 0, count: count)
        var raw = [Double](repeating: 0, count: count * bound)
        var folded = [Double](repeating: 0, count: bound + 1)
        var stride = 1
        for i in 0..<count {
            let (center, f) = kernel(i)
            let lo = Int((center - radius - 0.5).rounded(.down))
            let hi = Int((center + radius - 0.5).rounded(.up))
            let first = min(max(lo, 0), source - 1)
            let last = min(max(hi, 0), source - 1)
            for j in 0...(last - first) { folded[j] = 0 }
            var sum = 0.0
            if lo <= hi {
                for j in lo...hi {
                    let d = Double(j) + 0.5 - center
                    if abs(d) >= radius { continue }
                    let w = f(d)
                    if w == 0 { continue }
                    folded[min(max(j, 0), source - 1) - first] += w
                    sum += w
                }
            }
            // Trim negligible end taps, then normalise.
            var a = 0, b = last - first
            while a < b && abs(folded[a]) < 1e-9 { a += 1 }
            while b > a && abs(folded[b]) < 1e-9 { b -= 1 }
            if sum == 0 {
                // Degenerate (cannot happen with the filters above): nearest sample.
                let j = min(max(Int(center), 0), source - 1)
                a = j - first; b = a; folded[a] = 1; sum = 1
            }
            let n = b - a + 1
            starts[i] = first + a
            counts[i] = n
            stride = max(stride, n)
            for t in 0..<n { raw[i * bound + t] = folded[a + t] / sum }
        }
        stride = (stride + 3) & ~3
        var weights = [SIMD4<Float>](repeating: SIMD4(), count: count * stride)
        for i in 0..<count {
            for t in 0..<counts[i] { weights[i * stride + t] = SIMD4(repeating: Float(raw[i * bound + t])) }
        }
        self.sourceCount = source
        self.count = count
        self.stride = stride
        self.starts = starts
        self.counts = counts
        self.weights = weights
    }

    /// Calls `body` with raw pointers to the tables: starts, counts, weights, stride.
    func withTables<R>(
        _ body: (UnsafePointer<Int>, UnsafePointer<Int>, UnsafePointer<SIMD4<Float>>, Int) throws -> R
    ) rethrows -> R {
        try starts.withUnsafeBufferPointer { s in
            try counts.withUnsafeBufferPointer { c in
                try weights.withUnsafeBufferPointer { w in
                    try body(s.baseAddress!, c.baseAddress!, w.baseAddress!, stride)
                }
            }
        }
    }

    /// The taps of output `i` as (source index, weight) pairs: for tests and diagnostics.
    func taps(of i: Int) -> [(index: Int, weight: Float)] {
        (0..<counts[i]).map { (starts[i] + $0, weights[i * stride + $0].x) }
    }
}
