import Foundation
import LumenTestSupport
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen bench serve`'s options: `--compare NAME=URL-TEMPLATE`, `--hot-url`, `--pid`,
    /// `--write-hot-result`, `--wrk`, `--quick`, `--json` (no thumbor or nginx needed: a
    /// loopback server stands in for the other server).
    @Suite(.timeLimit(.minutes(3)))
    struct BenchServeOptions {
        @Test(arguments: [
            ["extra"], ["--bogus"], ["--compare", "x"], ["--compare", "=http://127.0.0.1:1/{source}"],
            ["--compare", "x=ftp://127.0.0.1:1/{source}"], ["--compare", "x=http://example.com:1/{source}"],
            ["--compare", "lumen=http://127.0.0.1:1/{source}"], ["--compare", "x=http://127.0.0.1:1/fixed"],
            ["--compare", "x=http://127.0.0.1:1/{bogus}/{source}"], ["--compare", "x=http://127.0.0.1:1/{source"],
            ["--compare", "x=http://127.0.0.1:1/{source}", "--compare", "x=http://127.0.0.1:2/{path}"],
            ["--pid", "x=1"], ["--hot-url", "x=http://127.0.0.1:1/a"],
            ["--compare", "x=http://127.0.0.1:1/{source}", "--pid", "x=abc"],
            ["--compare", "x=http://127.0.0.1:1/{source}", "--hot-url", "x=http://10.0.0.1:1/a"],
            ["--json=yes"],
        ])
        func usageErrorsExitTwo(arguments: [String]) async throws {
            let outcome = try await CLIContractTests.run(["bench", "serve"] + arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome.standardOutput)")
            #expect(outcome.standardError.contains("usage: lumen bench serve"), "\(arguments): \(outcome.standardError)")
        }

        @Test func helpNamesEveryOption() async throws {
            let outcome = try await CLIContractTests.run(["bench", "serve", "--help"])
            #expect(outcome.status == 0)
            for option in ["--compare", "--hot-url", "--pid", "--write-hot-result", "--wrk", "--quick", "--json", "{source}", "{w}"] {
                #expect(outcome.standardOutput.contains(option), "\(option) missing from: \(outcome.standardOutput)")
            }
        }

        /// The same workloads go to the compared server through its template, its hot
        /// workload to `--hot-url`; origin fetches are counted at the bench's origin (none for a
        /// server that never fetches), decodes only for Lumen, and Lumen's burst is one decode
        /// per size. The hot result is written where asked.
        @Test func aComparedServerGetsTheSameWorkloadsThroughItsTemplate() async throws {
            let other = try LoopbackServer()
            other.serve(path: "/resize", data: Data(repeating: 7, count: 1000), contentType: "image/jpeg")
            other.serve(path: "/static.jpg", data: Data(repeating: 8, count: 500), contentType: "image/jpeg")
            let dir = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: dir) }
            let hotFile = dir.appendingPathComponent("hot.jpg")
            let base = "http://127.0.0.1:\(other.port)"
            let outcome = try await CLIContractTests.run([
                "bench", "serve", "--quick", "--json", "--compare", "other=\(base)/resize?w={w}&h={h}&p={path}&o={origin-port}",
                "--hot-url", "other=\(base)/static.jpg", "--write-hot-result", hotFile.path,
            ])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.standardOutput.utf8)) as? [String: Any],
                                      "not JSON: \(outcome.standardOutput)")
            let servers = try #require(object["servers"] as? [[String: Any]])
            #expect(servers.map { $0["name"] as? String } == ["lumen", "other"])
            func workload(_ server: Int, _ name: String) throws -> [String: Any] {
                let workloads = try #require(servers[server]["workloads"] as? [[String: Any]])
                return try #require(workloads.first { $0["name"] as? String == name }, "no \(name)")
            }
            for server in 0..<2 {
                for name in ["distinct", "burst", "hot"] {
                    let w = try workload(server, name)
                    #expect(w["failures"] as? Int == 0, "\(server) \(name)")
                    #expect((w["requestsPerSecond"] as? Double ?? 0) > 0, "\(server) \(name)")
                }
            }
            let burst = try workload(0, "burst")
            // One fetch is the benchmark's goal, not a test's: a slow machine can see a size's
            // request arrive after the fetch ended, and without a disk cache that fetches again.
            #expect((1...3).contains(burst["originFetches"] as? Int ?? 0))
            #expect(burst["decodes"] as? Int == 3)
            #expect(try workload(0, "distinct")["originFetches"] as? Int == 6)
            #expect(try workload(1, "distinct")["originFetches"] as? Int == 0)
            #expect(try workload(1, "distinct")["decodes"] == nil)
            #expect(try workload(1, "hot")["meanResponseBytes"] as? Int == 500)
            let targets = other.recordedRequests.filter { $0.path == "/resize" }.map(\.target)
            #expect(targets.contains { $0.hasPrefix("/resize?w=512&h=512&p=d0.jpg&o=") }, "\(targets.prefix(3))")
            #expect(targets.contains { $0.hasPrefix("/resize?w=128&h=128&p=burst.jpg&o=") }, "\(targets.prefix(3))")
            #expect(other.statistics.requests(for: "/static.jpg") > 0)
            let hot = try Data(contentsOf: hotFile)
            #expect(hot.starts(with: [0xFF, 0xD8]), "the hot result is not a JPEG")
        }
    }
}
