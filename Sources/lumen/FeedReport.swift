import Foundation

/// The side-by-side table of the three replays, their ratios, and the claims checked on them.
struct FeedReport {
    var lumen: FeedRunStats
    var noCoalescing: FeedRunStats
    var naive: FeedRunStats

    var wallRatio: Double { naive.wallSeconds / max(lumen.wallSeconds, 1e-9) }
    var decodedMPRatio: Double { naive.decodedMegapixels / max(lumen.decodedMegapixels, 1e-9) }
    var peakMemoryRatio: Double { Double(naive.peakRSSBytes) / Double(max(lumen.peakRSSBytes, 1)) }
    /// The same, counting only what each replay added to its process's starting footprint.
    var memoryGrowthRatio: Double {
        Double(naive.peakRSSBytes - naive.startRSSBytes) / Double(max(lumen.peakRSSBytes - lumen.startRSSBytes, 1))
    }
    /// The most `peakMemoryRatio` could be for any loader started as Lumen's replay was: the
    /// naive peak over Lumen's start plus the detail view's full-size photo, which every loader
    /// holds at once while the detail view is open (and nothing else: no thumbnail, no buffer).
    var peakMemoryCeiling: Double {
        Double(naive.peakRSSBytes) / Double(max(lumen.startRSSBytes + lumen.detailImageBytes, 1))
    }
    var networkDifference: Int { noCoalescing.networkRequests - lumen.networkRequests }
    var noCoalescingWallRatio: Double { noCoalescing.wallSeconds / max(lumen.wallSeconds, 1e-9) }
    /// The URLs both (a) and (b) fetched. The sets differ by a few URLs whose prefetch (or
    /// flung cell) was cancelled before its request left in one run and not in the other.
    var commonPaths: Set<String> {
        Set(lumen.requestsByPath.keys).intersection(noCoalescing.requestsByPath.keys)
    }
    /// The URLs only (b) fetched.
    var pathsOnlyNoCoalescingFetched: Set<String> {
        Set(noCoalescing.requestsByPath.keys).subtracting(lumen.requestsByPath.keys)
    }
    /// The URLs only (a) fetched.
    var pathsOnlyLumenFetched: Set<String> {
        Set(lumen.requestsByPath.keys).subtracting(noCoalescing.requestsByPath.keys)
    }
    /// (b)'s network requests minus (a)'s, on the URLs both fetched.
    var networkDifferenceOnCommonURLs: Int {
        let common = commonPaths
        return Self.requests(in: noCoalescing, on: common) - Self.requests(in: lumen, on: common)
    }
    /// The downloads (b) repeated — for a URL it was already downloading or had downloaded —
    /// on the URLs both fetched: what coalescing eliminates.
    var duplicatesEliminated: Int { Self.duplicates(in: noCoalescing, on: commonPaths) }
    /// The downloads (b) repeated on every URL it fetched (some of them URLs (a) never
    /// fetched, so not all of them were eliminated).
    var noCoalescingDuplicatesAllURLs: Int { Self.duplicates(in: noCoalescing, on: Set(noCoalescing.requestsByPath.keys)) }
    /// The downloads (a) repeated on the URLs both fetched (0 when coalescing works).
    var lumenDuplicatesOnCommonURLs: Int { Self.duplicates(in: lumen, on: commonPaths) }
    /// (b)'s network requests for the URLs only it fetched.
    var requestsForURLsOnlyNoCoalescingFetched: Int { Self.requests(in: noCoalescing, on: pathsOnlyNoCoalescingFetched) }
    /// (a)'s network requests for the URLs only it fetched.
    var requestsForURLsOnlyLumenFetched: Int { Self.requests(in: lumen, on: pathsOnlyLumenFetched) }

    private static func requests(in run: FeedRunStats, on paths: Set<String>) -> Int {
        paths.reduce(0) { $0 + run.requestsByPath[$1, default: 0] }
    }

    private static func duplicates(in run: FeedRunStats, on paths: Set<String>) -> Int {
        paths.reduce(0) { $0 + max(run.requestsByPath[$1, default: 0] - 1, 0) }
    }

    /// The table, one row per measurement, columns lumen / noCoalescing / naive.
    var table: String {
        let columns = [lumen, noCoalescing, naive]
        func mb(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1_048_576) }
        let rows: [(String, (FeedRunStats) -> String)] = [
            ("requests (visible + detail)", { "\($0.requests)" }),
            ("prefetches", { "\($0.prefetches)" }),
            ("network requests", { "\($0.networkRequests)" }),
            ("distinct URLs fetched", { "\($0.distinctURLs)" }),
            ("most requests for one URL", { "\($0.maxRequestsPerURL)" }),
            ("bytes downloaded", { mb($0.bytesDownloaded) }),
            ("decodes", { "\($0.decodes)" }),
            ("decoded megapixels", { String(format: "%.1f", $0.decodedMegapixels) }),
            ("memory cache hits", { "\($0.memoryHits)" }),
            ("disk cache hits", { "\($0.diskHits)" }),
            ("joins to running work", { "\($0.joins)" }),
            ("requests cancelled (cell gone)", { "\($0.cancelledRequests)" }),
            ("shared work cancelled", { "\($0.workCancelled)" }),
            ("peak concurrent downloads", { "\($0.peakClientDownloads) (server: \($0.peakConcurrentRequests))" }),
            ("peak memory (RSS)", { mb($0.peakRSSBytes) }),
            ("  at the start of the replay", { mb($0.startRSSBytes) }),
            ("  growth during the replay", { mb($0.peakRSSBytes - $0.startRSSBytes) }),
            ("  decoded images cached at end", { mb($0.memoryCacheBytes) }),
            ("CPU time", { String(format: "%.2f s", $0.cpuSeconds) }),
            ("wall time", { String(format: "%.2f s", $0.wallSeconds) }),
        ]
        var lines = [pad("", 32) + pad("lumen", 14) + pad("noCoalescing", 14) + "naive"]
        for (name, value) in rows {
            lines.append(pad(name, 32) + pad(value(columns[0]), 14) + pad(value(columns[1]), 14) + value(columns[2]))
        }
        return lines.joined(separator: "\n")
    }

    /// The goals from the issue, each with whether this run met it. `needsFullTrace`: a ratio
    /// of times, memory or decoded pixels, which only the full trace measures (a quick trace is
    /// too short, its images too small); the others are counts that hold on any trace.
    var goals: [(name: String, isMet: Bool, needsFullTrace: Bool)] {
        [
            ("naive / lumen wall time ≥ 5×", wallRatio >= 5, true),
            ("naive / lumen decoded MP ≥ 10×", decodedMPRatio >= 10, true),
            ("naive / lumen peak memory ≥ 4×", peakMemoryRatio >= 4, true),
            ("lumen network requests equal to its distinct URLs", lumen.networkRequests == lumen.distinctURLs, false),
            ("noCoalescing − lumen requests on the common URLs equal to the duplicates eliminated",
             networkDifferenceOnCommonURLs == duplicatesEliminated, false),
            ("noCoalescing / lumen wall time > 1×", noCoalescingWallRatio > 1, true),
        ]
    }

    /// The goals this run missed (see ``goals``); with `quick`, only those a quick trace checks.
    func missedGoals(quick: Bool = false) -> [String] {
        goals.filter { !$0.isMet && !(quick && $0.needsFullTrace) }.map(\.name)
    }

    /// The ratios, each with its goal from the issue and its verdict, `met` or `MISSED`; with
    /// `quick` (a quick trace), the goals only the full trace measures (see ``goals``) read
    /// `not checked (quick run)`.
    func ratios(quick: Bool = false) -> String {
        func verdict(_ met: Bool, needsFullTrace: Bool = true) -> String {
            quick && needsFullTrace ? "not checked (quick run)" : met ? "met" : "MISSED"
        }
        return [
            String(format: "naive / lumen wall time        %6.2f×  goal ≥ 5×: %@", wallRatio, verdict(wallRatio >= 5)),
            String(format: "naive / lumen decoded MP       %6.1f×  goal ≥ 10×: %@", decodedMPRatio, verdict(decodedMPRatio >= 10)),
            String(format: "naive / lumen peak memory      %6.2f×  goal ≥ 4×: %@ (growth during the replay: %.2f×)",
                   peakMemoryRatio, verdict(peakMemoryRatio >= 4), memoryGrowthRatio),
            String(format: "                               ceiling for any loader: %.2f× = naive's peak / (lumen's start %.1f MB + the detail view's photo %.1f MB)",
                   peakMemoryCeiling, Double(lumen.startRSSBytes) / 1_048_576, Double(lumen.detailImageBytes) / 1_048_576),
            "lumen network requests         \(lumen.networkRequests) for \(lumen.distinctURLs) distinct URLs  goal equal: \(verdict(lumen.networkRequests == lumen.distinctURLs, needsFullTrace: false))",
            "noCoalescing − lumen requests  on the \(commonPaths.count) URLs both fetched: \(networkDifferenceOnCommonURLs); noCoalescing's duplicates there (its requests − 1 per URL): \(duplicatesEliminated)  goal equal: \(verdict(networkDifferenceOnCommonURLs == duplicatesEliminated, needsFullTrace: false)) (equal exactly when lumen fetched each of them once)",
            "                               on all URLs: \(networkDifference) = \(noCoalescing.networkRequests) − \(lumen.networkRequests) = \(duplicatesEliminated) duplicates eliminated on the common URLs − \(lumenDuplicatesOnCommonURLs) lumen duplicates there",
            "                                 + \(requestsForURLsOnlyNoCoalescingFetched) requests for the \(pathsOnlyNoCoalescingFetched.count) URLs only noCoalescing fetched − \(requestsForURLsOnlyLumenFetched) for the \(pathsOnlyLumenFetched.count) only lumen fetched",
            "                               noCoalescing's duplicates over every URL it fetched: \(noCoalescingDuplicatesAllURLs) (the runs' URL sets differ: prefetches and flung cells cancelled before their request left differ with timing)",
            String(format: "noCoalescing / lumen wall time %6.2f×  goal > 1×: %@", noCoalescingWallRatio, verdict(noCoalescingWallRatio > 1)),
        ].compactMap { $0 }.joined(separator: "\n")
    }

    /// The claims that must hold for the demo to pass; each failure is a message.
    var violations: [String] {
        [(FeedVariant.lumen, lumen), (.noCoalescing, noCoalescing), (.naive, naive)].flatMap { Self.violations(of: $0.1, variant: $0.0) }
    }

    /// What must hold for one replay of `variant`: no visible load failed, and Lumen with its
    /// defaults downloaded each distinct URL once.
    static func violations(of run: FeedRunStats, variant: FeedVariant) -> [String] {
        var found: [String] = []
        if !run.failures.isEmpty {
            found.append("\(variant.rawValue): \(run.failures.count) visible loads failed, first: \(run.failures[0])")
        }
        if variant == .lumen, run.networkRequests != run.distinctURLs {
            found.append("lumen made \(run.networkRequests) network requests for \(run.distinctURLs) distinct URLs (a URL was downloaded \(run.maxRequestsPerURL) times)")
        }
        return found
    }

    /// The JSON object `lumen bench feed --json` prints (the demo adds to it).
    var json: [String: Any] {
        [
            "scenario": "feed",
            "lumen": lumen.json, "noCoalescing": noCoalescing.json, "naive": naive.json,
            "naiveOverLumenWallTime": round3(wallRatio),
            "naiveOverLumenDecodedMegapixels": round3(decodedMPRatio),
            "naiveOverLumenPeakRSS": round3(peakMemoryRatio),
            "naiveOverLumenPeakRSSGrowth": round3(memoryGrowthRatio),
            "naiveOverLumenPeakRSSCeiling": round3(peakMemoryCeiling),
            "noCoalescingMinusLumenNetworkRequests": networkDifference,
            "noCoalescingMinusLumenNetworkRequestsOnCommonURLs": networkDifferenceOnCommonURLs,
            "duplicatesEliminated": duplicatesEliminated,
            "noCoalescingDuplicatesAllURLs": noCoalescingDuplicatesAllURLs,
            "commonURLs": commonPaths.count,
            "lumenDuplicatesOnCommonURLs": lumenDuplicatesOnCommonURLs,
            "urlsOnlyNoCoalescingFetched": pathsOnlyNoCoalescingFetched.count,
            "urlsOnlyLumenFetched": pathsOnlyLumenFetched.count,
            "requestsForURLsOnlyNoCoalescingFetched": requestsForURLsOnlyNoCoalescingFetched,
            "requestsForURLsOnlyLumenFetched": requestsForURLsOnlyLumenFetched,
            "noCoalescingMinusLumenOnCommonURLsEqualsDuplicatesEliminated": networkDifferenceOnCommonURLs == duplicatesEliminated,
            "lumenJoins": lumen.joins,
            "noCoalescingOverLumenWallTime": round3(noCoalescingWallRatio),
            "lumenNetworkRequestsEqualDistinctURLs": lumen.networkRequests == lumen.distinctURLs,
        ]
    }
}

func round3(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
