import Foundation
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen bench` and `lumen demo`, kept short: the fast scenarios with one round, and the
    /// feed's quick trace.
    @Suite(.timeLimit(.minutes(1)))
    struct BenchAndDemo {
        /// The non-empty lines of `output`, each parsed as a JSON object.
        func jsonObjects(_ output: String) throws -> [[String: Any]] {
            try output.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }.map { line in
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8))
                return try #require(object as? [String: Any], "not a JSON object: \(line)")
            }
        }

        /// A number in a JSON object (an integer or not).
        func number(_ object: [String: Any], _ key: String) -> Double? {
            (object[key] as? NSNumber)?.doubleValue
        }

        /// `--json` prints one JSON object per scenario asked for, in order, and nothing else
        /// on standard output; the feed's object has the feed keys for each of the three
        /// variants, and Lumen's run made one network request per distinct URL (on another
        /// seed's trace too).
        @Test func jsonIsOneObjectPerScenarioWithTheFeedKeys() async throws {
            let outcome = try await CLIContractTests.run(["bench", "coalesce", "overhead", "feed", "--quick", "--seed", "7", "--json", "--iterations", "1", "--count", "4"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let objects = try jsonObjects(outcome.standardOutput)
            try #require(objects.count == 3, "\(outcome.standardOutput)")
            #expect(objects.map { $0["scenario"] as? String } == ["coalesce", "overhead", "feed"])
            let feed = objects[2]
            for variant in ["lumen", "noCoalescing", "naive"] {
                let run = try #require(feed[variant] as? [String: Any], "no \(variant) in \(feed.keys.sorted())")
                for key in ["networkRequests", "distinctURLs", "peakRSSBytes"] {
                    #expect(run[key] is Int, "\(variant).\(key): \(run[key] ?? "missing")")
                }
                #expect(number(run, "decodedMegapixels").map { $0 > 0 } == true, "\(variant).decodedMegapixels: \(run["decodedMegapixels"] ?? "missing")")
                #expect(number(run, "wallSeconds").map { $0 > 0 } == true, "\(variant).wallSeconds: \(run["wallSeconds"] ?? "missing")")
                #expect((run["peakRSSBytes"] as? Int ?? 0) > 1 << 20, "\(variant).peakRSSBytes")
                #expect((run["networkRequests"] as? Int ?? 0) >= (run["distinctURLs"] as? Int ?? .max), "\(variant): fewer requests than URLs fetched")
            }
            let lumen = try #require(feed["lumen"] as? [String: Any]), naive = try #require(feed["naive"] as? [String: Any])
            #expect(lumen["networkRequests"] as? Int == lumen["distinctURLs"] as? Int)
            #expect((number(naive, "decodedMegapixels") ?? 0) > (number(lumen, "decodedMegapixels") ?? .infinity))
        }

        /// Without `--json`, each scenario prints Lumen, its baseline and their ratio.
        @Test func textPrintsTheRatioToTheBaseline() async throws {
            let outcome = try await CLIContractTests.run(["bench", "coalesce", "overhead", "--iterations", "1", "--count", "4"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            for scenario in ["coalesce", "overhead"] {
                let section = outcome.standardOutput.components(separatedBy: "\(scenario):").dropFirst().first ?? ""
                #expect(section.contains("baseline") && section.contains("×"), "\(scenario): \(outcome.standardOutput)")
            }
        }

        /// An unknown scenario or option, or a malformed count, is a usage error.
        @Test(arguments: [["nonsense"], ["coalesce", "--bogus"], ["coalesce", "--iterations", "0"], ["coalesce", "--iterations", "x"],
                          ["coalesce", "--count", "-1"], ["feed", "--seed", "x"], ["coalesce", "--iterations"]])
        func benchUsageErrorsExitTwo(arguments: [String]) async throws {
            let outcome = try await CLIContractTests.run(["bench"] + arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome.standardOutput)")
            #expect(outcome.standardError.contains("usage: lumen bench"), "\(arguments): \(outcome.standardError)")
        }

        /// `lumen demo`'s options (`--quick`, `--seed N`, `--rounds N` (1–20), `--json`,
        /// `--output DIR`): anything else, or a malformed value, is a usage error.
        @Test(arguments: [["--seed", "x"], ["--seed"], ["--output"], ["--bogus"], ["extra"], ["--rounds", "0"], ["--rounds", "x"], ["--rounds", "21"]])
        func demoUsageErrorsExitTwo(arguments: [String]) async throws {
            let outcome = try await CLIContractTests.run(["demo"] + arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome.standardOutput)")
            #expect(outcome.standardError.contains("usage: lumen demo"), "\(arguments): \(outcome.standardError)")
        }

        /// `lumen demo` on the quick trace: the side-by-side table with every row issue 5
        /// names, for the three loaders; the contact sheet's path, a PNG in `--output`; and the
        /// four production risks by name, each with its numbers.
        @Test func theQuickDemoPrintsTheTableTheSheetAndTheFourRisks() async throws {
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let outcome = try await CLIContractTests.run(["demo", "--quick", "--output", output.path])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let lines = outcome.standardOutput.split(separator: "\n").map(String.init)
            let header = try #require(lines.first { $0.contains("lumen") && $0.contains("noCoalescing") && $0.contains("naive") && !$0.contains(":") },
                                      "no table header in \(outcome.standardOutput)")
            #expect(header.range(of: "lumen")!.lowerBound < header.range(of: "noCoalescing")!.lowerBound)
            let rows = ["requests", "network requests", "bytes downloaded", "decodes", "decoded megapixels", "memory cache hits",
                        "disk cache hits", "joins to running work", "cancelled", "peak memory", "wall time"]
            for row in rows {
                let line = lines.first { $0.hasPrefix(row) || ($0.contains(row) && !$0.hasPrefix(" ") && !$0.contains("/")) }
                let values = line.map { $0.split(separator: " ").filter { $0.first?.isNumber == true } } ?? []
                #expect(values.count >= 3, "row \(row): \(line ?? "missing")")
            }
            let sheetLine = try #require(lines.first { $0.contains("contact sheet") }, "\(outcome.standardOutput)")
            let path = try #require(sheetLine.split(separator: " ").last.map(String.init))
            #expect(path.hasPrefix(output.path + "/") && path.hasSuffix(".png"), "\(sheetLine)")
            let png = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
            for risk in ["duplicate sharing", "bounded prefetch", "failure eviction and retry", "cancellation under sharing"] {
                let start = try #require(lines.firstIndex { $0.contains(risk) }, "no \(risk) in \(outcome.standardOutput)")
                #expect(lines[(start + 1)...].prefix(2).contains { $0.contains { $0.isNumber } }, "\(risk) prints no numbers")
            }
        }
    }
}
