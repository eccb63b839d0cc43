import Foundation
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen bench soak`: a short run of the real thing (`lumen serve` as a child, the faulty
    /// origin, the cache phases, the client mix), judged from its JSON report.
    @Suite(.timeLimit(.minutes(3)))
    struct BenchSoak {
        @Test(arguments: [[String](), ["--minutes"], ["--minutes", "0"], ["--minutes", "abc"], ["--minutes", "1", "--seed", "x"],
                          ["--minutes", "1", "--clients", "0"], ["--minutes", "1", "extra"], ["--minutes", "1", "--bogus"]])
        func usageErrorsExitTwo(arguments: [String]) async throws {
            let outcome = try await CLIContractTests.run(["bench", "soak"] + arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome.standardOutput)")
            #expect(outcome.standardError.contains("usage: lumen bench soak"), "\(arguments): \(outcome.standardError)")
        }

        @Test func helpNamesEveryOptionAndTheReportsFields() async throws {
            let outcome = try await CLIContractTests.run(["bench", "soak", "--help"])
            #expect(outcome.status == 0)
            for word in ["--minutes", "--seed", "--clients", "--source-timeout", "--sample-every", "--corpus", "--keep", "--json",
                         "ENOTDIR", "wrongImages", "unexpected", "faultsInjected", "cachePhases", "samples", "trend"] {
                #expect(outcome.standardOutput.contains(word), "\(word) missing from: \(outcome.standardOutput)")
            }
            #expect(try await CLIContractTests.run(["bench", "--help"]).standardOutput.contains("lumen bench soak"))
        }

        /// Twelve seconds under every fault: requests answered, every 200 the right image,
        /// every other status the contract's, each fault kind injected, the cache deleted and
        /// made unwritable (and written to again once restored), the server's memory and
        /// descriptors sampled, and a clean exit.
        @Test func aShortSoakPassesWithEveryFaultInjected() async throws {
            let outcome = try await CLIContractTests.run(["bench", "soak", "--minutes", "0.2", "--json", "--seed", "7"])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.standardOutput.utf8)) as? [String: Any],
                                      "not JSON: \(outcome.standardOutput) \(outcome.standardError)")
            #expect(outcome.status == 0, "\(object["unexpectedSamples"] ?? "") \(outcome.standardError)")
            #expect(object["passed"] as? Bool == true)
            #expect((object["requests"] as? Int ?? 0) > 0)
            #expect((object["checkedImages"] as? Int ?? 0) > 0)
            #expect(object["wrongImages"] as? Int == 0)
            #expect(object["unexpected"] as? Int == 0, "\(object["unexpectedSamples"] ?? "")")

            // Statuses: each kind of request got only what the contract gives it.
            let byKind = try #require(object["byKind"] as? [String: [String: Int]])
            func statuses(_ kind: String) -> Set<String> { Set(byKind[kind]?.keys.map { $0 } ?? []) }
            #expect(statuses("distinct") == ["200"] && statuses("hot") == ["200"] && statuses("burst") == ["200"])
            #expect(statuses("bad-signature") == ["403"] && statuses("bad-options") == ["400"])
            #expect(statuses("fault:stall") == ["504"])
            for fault in ["reset", "5xx", "truncated", "lie-long", "garbage-head"] { #expect(statuses("fault:\(fault)") == ["502"], "\(fault)") }
            for fault in ["trickle", "lie-short"] { #expect(statuses("fault:\(fault)") == ["200"], "\(fault)") }
            #expect(statuses("malformed:long-path") == ["414"])
            for (kind, counts) in byKind where kind.hasPrefix("malformed:") {
                for status in counts.keys { #expect(status.hasPrefix("4") || status == "501" || status == "505" || status == "closed", "\(kind): \(status)") }
            }

            // Every fault kind was performed by the origin.
            let injected = try #require(object["faultsInjected"] as? [String: Int])
            for fault in ["good", "trickle", "reset", "stall", "5xx", "truncated", "lie-long", "lie-short", "garbage-head"] {
                #expect((injected[fault] ?? 0) > 0, "\(fault) never injected: \(injected)")
            }

            // The cache's phases happened, with requests during each, and a write under the
            // replaced directory really failed.
            let phases = try #require(object["cachePhases"] as? [[String: Any]])
            #expect(phases.map { $0["name"] as? String } == ["deleted", "unwritable", "restored"])
            #expect((phases[1]["writeError"] as? String)?.contains("ENOTDIR") == true, "\(phases)")
            let byPhase = try #require(object["byPhase"] as? [String: [String: Int]])
            for phase in ["normal", "deleted", "unwritable", "restored"] { #expect((byPhase[phase]?["200"] ?? 0) > 0, "\(phase): \(byPhase)") }

            // Samples of the server's own process, and a verdict on them.
            let samples = try #require(object["samples"] as? [[String: Any]])
            #expect(samples.count >= 6)
            #expect(samples.allSatisfy { ($0["rssBytes"] as? Int ?? 0) > 0 && ($0["openFDs"] as? Int ?? 0) > 0 })
            let trend = try #require(object["trend"] as? [String: Any])
            // Twelve seconds are all warm-up: figures, no verdict (a 3-minute run gets one).
            #expect((trend["verdict"] as? String)?.hasPrefix("not judged") == true, "\(trend)")
            let server = try #require(object["server"] as? [String: Any])
            #expect(server["exitStatus"] as? Int == 0 && server["crashed"] as? Bool == false)
        }
    }
}
