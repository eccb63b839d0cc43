import Foundation
import Testing

/// `lumen demo`, run as users run it (quick trace, JSON output): its replay through Lumen
/// with the defaults makes exactly one network request per distinct URL, as counted by the
/// loopback server, and the demo's own checks pass — on the embedded trace and on another
/// seed's (other reposts and avatars over the same scroll).
@Suite(.timeLimit(.minutes(1)))
struct FeedDemoTests {
    @Test(arguments: [nil, 7] as [Int?])
    func demoRunAMakesExactlyOneNetworkRequestPerDistinctURL(seed: Int?) async throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-demo-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        let seedArguments = seed.map { ["--seed", String($0)] } ?? []
        let outcome = try await Executables.run("lumen", ["demo", "--quick", "--json", "--output", output.path] + seedArguments)
        #expect(outcome.status == 0, "\(outcome.standardError)")
        let line = try #require(outcome.standardOutput.split(separator: "\n").last, "no output; stderr: \(outcome.standardError)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["seed"] as? Int == seed ?? 42)
        #expect(object["rounds"] as? Int == 3)
        let lumen = try #require(object["lumen"] as? [String: Any])
        let noCoalescing = try #require(object["noCoalescing"] as? [String: Any])
        let naive = try #require(object["naive"] as? [String: Any])
        let network = try #require(lumen["networkRequests"] as? Int)
        let distinct = try #require(lumen["distinctURLs"] as? Int)
        // The feed's images were actually loaded, each exactly once.
        #expect(distinct > 0)
        #expect(network == distinct)
        #expect(lumen["maxRequestsPerURL"] as? Int == 1)
        #expect(lumen["failures"] as? Int == 0)
        // The baselines replayed the same trace; the naive loader, which shares nothing and
        // caches nothing, downloaded more.
        #expect(noCoalescing["requests"] as? Int == lumen["requests"] as? Int)
        #expect(naive["requests"] as? Int == lumen["requests"] as? Int)
        #expect((naive["networkRequests"] as? Int ?? 0) > network)
        #expect((object["violations"] as? [String])?.isEmpty == true, "\(object["violations"] ?? "")")
        // Peak memory is each child's own (VmHWM), never below where its replay started, and
        // the client-side download concurrency was counted: the naive loader had at least
        // one data task in flight, Lumen at least one network request.
        for run in [lumen, noCoalescing, naive] {
            let peak = try #require(run["peakRSSBytes"] as? Int)
            let start = try #require(run["startRSSBytes"] as? Int)
            #expect(peak >= start && start > 0)
            #expect((run["peakClientDownloads"] as? Int ?? 0) >= 1)
        }
        // The contact sheet holds every shown cell: 8 columns of 256 px cells, 8 px apart,
        // as many rows as the shown cells fill (its size read from the PNG's IHDR chunk).
        let sheet = try #require(object["contactSheet"] as? String)
        let png = try Data(contentsOf: URL(fileURLWithPath: sheet))
        try #require(png.count > 24)
        func bigEndian(_ offset: Int) -> Int { png[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) } }
        let shown = try #require(object["traceShownCells"] as? Int)
        let columns = min(8, shown), rows = (shown + columns - 1) / columns, pitch = 256 + 8
        #expect(bigEndian(16) == columns * pitch + 8)
        #expect(bigEndian(20) == rows * pitch + 8)
    }

    /// `--rounds N` replays the three variants in N interleaved rounds (a, b, c, a, b, c, …),
    /// each reported as it ends; the table keeps each variant's fastest, and what every replay
    /// must show (Lumen downloads each distinct URL once) is checked in every round.
    @Test func roundsAreInterleavedAndTheTableKeepsEachVariantsFastest() async throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-demo-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        let outcome = try await Executables.run("lumen", ["demo", "--quick", "--json", "--rounds", "2", "--output", output.path])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        let line = try #require(outcome.standardOutput.split(separator: "\n").last, "no output; stderr: \(outcome.standardError)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["rounds"] as? Int == 2)
        // Progress goes to stderr with --json: one line per replay, in interleaved order.
        let runs = outcome.standardError.split(separator: "\n").filter { $0.contains("round ") && $0.contains(" s, ") }
        #expect(runs.map { String($0.split(separator: ":")[0]).trimmingCharacters(in: .whitespaces) }
                == ["round 1 (a)", "round 1 (b)", "round 1 (c)", "round 2 (a)", "round 2 (b)", "round 2 (c)"])
        // Each variant's wall time in the table is the smaller of its two rounds.
        for (variant, letter) in [("lumen", "a"), ("noCoalescing", "b"), ("naive", "c")] {
            let seconds = runs.filter { $0.contains("(\(letter)):") }.compactMap { run -> Double? in
                let text = run.split(separator: ":")[1].split(separator: " ").first.map(String.init) ?? ""
                return Double(text)
            }
            let table = try #require((object[variant] as? [String: Any])?["wallSeconds"] as? Double)
            #expect(seconds.count == 2)
            // The lines show two decimals: the fastest round rounds to the smaller one.
            #expect(abs(table - (seconds.min() ?? -1)) <= 0.006, "\(variant): \(table) vs \(seconds)")
        }
        #expect((object["violations"] as? [String])?.isEmpty == true, "\(object["violations"] ?? "")")
    }
}
