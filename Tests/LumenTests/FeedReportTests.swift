import Foundation
import Testing
@testable import lumen

/// The feed report's check of (b) − (a) network requests against the duplicates eliminated,
/// on hand-made runs whose per-URL requests are known.
@Suite(.timeLimit(.minutes(1)))
struct FeedReportTests {
    /// A run that made `requests` network requests per path, its totals as the server counts them.
    private func run(_ requests: [String: Int]) -> FeedRunStats {
        var stats = FeedRunStats()
        stats.requestsByPath = requests
        stats.networkRequests = requests.values.reduce(0, +)
        stats.distinctURLs = requests.count
        stats.maxRequestsPerURL = requests.values.max() ?? 0
        return stats
    }

    private func report(lumen: [String: Int], noCoalescing: [String: Int]) -> FeedReport {
        FeedReport(lumen: run(lumen), noCoalescing: run(noCoalescing), naive: run([:]))
    }

    /// The runs fetched different URL sets: the raw difference (4) is not the duplicates on
    /// the common URLs (3), and the decomposition accounts for the rest.
    @Test func differentURLSetsAreAccountedFor() {
        let report = report(lumen: ["/p1": 1, "/p2": 1, "/p3": 1, "/a1": 1],
                            noCoalescing: ["/p1": 1, "/p2": 2, "/a1": 3, "/p4": 2])
        #expect(report.commonPaths == ["/p1", "/p2", "/a1"])
        #expect(report.networkDifference == 4)
        #expect(report.networkDifferenceOnCommonURLs == 3)
        #expect(report.duplicatesEliminated == 3)
        #expect(report.noCoalescingDuplicatesAllURLs == 4)
        #expect(report.lumenDuplicatesOnCommonURLs == 0)
        #expect(report.pathsOnlyNoCoalescingFetched == ["/p4"] && report.requestsForURLsOnlyNoCoalescingFetched == 2)
        #expect(report.pathsOnlyLumenFetched == ["/p3"] && report.requestsForURLsOnlyLumenFetched == 1)

        let json = report.json
        #expect(json["noCoalescingMinusLumenNetworkRequests"] as? Int == 4)
        #expect(json["duplicatesEliminated"] as? Int == 3)
        #expect(json["noCoalescingDuplicatesAllURLs"] as? Int == 4)
        #expect(json["urlsOnlyNoCoalescingFetched"] as? Int == 1)
        #expect(json["urlsOnlyLumenFetched"] as? Int == 1)
        #expect(json["requestsForURLsOnlyNoCoalescingFetched"] as? Int == 2)
        #expect(json["requestsForURLsOnlyLumenFetched"] as? Int == 1)
        #expect(json["noCoalescingMinusLumenOnCommonURLsEqualsDuplicatesEliminated"] as? Bool == true)
        #expect(report.ratios().contains("on the 3 URLs both fetched: 3; noCoalescing's duplicates there (its requests − 1 per URL): 3  goal equal: met"))
        #expect(report.ratios().contains("on all URLs: 4 = 8 − 4 = 3 duplicates eliminated on the common URLs − 0 lumen duplicates there"))
        #expect(report.ratios().contains("+ 2 requests for the 1 URLs only noCoalescing fetched − 1 for the 1 only lumen fetched"))
        #expect(report.ratios().contains("noCoalescing's duplicates over every URL it fetched: 4"))
    }

    /// (a) fetching a URL twice breaks the common-URL check; the decomposition still holds,
    /// with (a)'s duplicate as its own term.
    @Test func lumenFetchingAURLTwiceFailsTheCommonURLCheck() {
        let report = report(lumen: ["/p1": 2, "/p2": 1], noCoalescing: ["/p1": 2, "/p2": 2])
        #expect(report.networkDifferenceOnCommonURLs == 1)
        #expect(report.duplicatesEliminated == 2)
        #expect(report.lumenDuplicatesOnCommonURLs == 1)
        #expect(report.json["noCoalescingMinusLumenOnCommonURLsEqualsDuplicatesEliminated"] as? Bool == false)
        #expect(report.ratios().contains("goal equal: MISSED"))
        #expect(report.ratios().contains("− 1 lumen duplicates there"))
        #expect(report.violations.count == 1) // (a)'s requests are not its distinct URLs
    }

    /// Whatever the two runs fetched, the printed terms add up to the raw difference (each
    /// run's total being the sum of its per-URL requests, as the server counts them).
    @Test func theDecompositionHoldsForAnyRequestCounts() {
        var seed: UInt64 = 0x5EED
        func next(_ bound: Int) -> Int {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            return Int((seed >> 33) % UInt64(bound))
        }
        for _ in 0..<200 {
            var a: [String: Int] = [:], b: [String: Int] = [:]
            for path in (0..<12).map({ "/\($0)" }) {
                if next(3) > 0 { a[path] = 1 + next(3) }
                if next(3) > 0 { b[path] = 1 + next(4) }
            }
            let report = report(lumen: a, noCoalescing: b)
            #expect(report.networkDifference == report.duplicatesEliminated - report.lumenDuplicatesOnCommonURLs
                + report.requestsForURLsOnlyNoCoalescingFetched - report.requestsForURLsOnlyLumenFetched)
            #expect(report.noCoalescingDuplicatesAllURLs >= report.duplicatesEliminated)
        }
    }

    /// The memory rows show where each replay's process started, so the peak splits into the
    /// runtime's footprint and what the replay added.
    @Test func theTableShowsTheStartingFootprintAndTheGrowth() {
        var lumen = run(["/p1": 1]), naive = run(["/p1": 2])
        (lumen.startRSSBytes, lumen.peakRSSBytes) = (32 << 20, 40 << 20)
        (naive.startRSSBytes, naive.peakRSSBytes) = (32 << 20, 96 << 20)
        let table = FeedReport(lumen: lumen, noCoalescing: lumen, naive: naive).table
        let row = { (name: String) in table.split(separator: "\n").first { $0.hasPrefix(name) }.map(String.init) ?? "" }
        #expect(row("peak memory (RSS)").hasSuffix("96.0 MB") && row("peak memory (RSS)").contains("40.0 MB"))
        #expect(row("  at the start of the replay").contains("32.0 MB"))
        #expect(row("  growth during the replay").contains("8.0 MB") && row("  growth during the replay").hasSuffix("64.0 MB"))
    }

    /// The ceiling divides the naive peak by Lumen's start plus the detail view's photo, and
    /// the JSON carries it beside the peak and growth ratios.
    @Test func thePeakMemoryCeilingCountsTheStartAndTheDetailPhoto() {
        var lumen = run(["/p1": 1]), naive = run(["/p1": 1])
        (lumen.startRSSBytes, lumen.peakRSSBytes, lumen.detailImageBytes) = (30 << 20, 50 << 20, 10 << 20)
        (naive.startRSSBytes, naive.peakRSSBytes) = (30 << 20, 140 << 20)
        let report = FeedReport(lumen: lumen, noCoalescing: lumen, naive: naive)
        #expect(report.peakMemoryCeiling == 3.5)
        #expect(report.json["naiveOverLumenPeakRSSCeiling"] as? Double == 3.5)
        #expect(report.json["naiveOverLumenPeakRSS"] as? Double == 2.8)
        #expect(report.json["naiveOverLumenPeakRSSGrowth"] as? Double == 5.5)
        #expect(report.ratios().contains("ceiling for any loader: 3.50× = naive's peak / (lumen's start 30.0 MB + the detail view's photo 10.0 MB)"))
        #expect((report.json["lumen"] as? [String: Any])?["detailImageBytes"] as? Int == 10 << 20)
    }

    /// A quick run's report: the goals of times, memory and decoded pixels read "not checked
    /// (quick run)" (never MISSED), the count goals are still checked, and the demo's last
    /// line says which goals were not checked.
    @Test func aQuickReportDoesNotJudgeTheGoalsItCannotMeasure() {
        let report = report(lumen: ["/p1": 1], noCoalescing: ["/p1": 2])  // every ratio 0: missed
        #expect(report.ratios().contains("MISSED"))
        let quick = report.ratios(quick: true)
        #expect(!quick.contains("MISSED"), "\(quick)")
        #expect(quick.components(separatedBy: "not checked (quick run)").count - 1 == 4, "\(quick)")
        #expect(quick.components(separatedBy: "goal equal: met").count - 1 == 2, "\(quick)")
        #expect(report.missedGoals(quick: true).isEmpty)
        #expect(report.missedGoals().count == 4)
        #expect(DemoCommand.goalSummary(report, quick: true).contains("4 goals of times, memory and decoded pixels not checked in a quick run"))
        #expect(DemoCommand.goalSummary(report, quick: false).contains("4 of 6 goals MISSED"))
    }
}
