import Foundation
import Testing

/// `lumen demo --fleet` as a newcomer runs it: nodes, nginx and Redis started and stopped by
/// the command, one JSON object with the four scenarios.
@Suite(.timeLimit(.minutes(3)))
struct FleetDemoTests {
    @Test func theQuickFleetDemoReportsEveryScenarioAndMeetsItsGoals() throws {
        let (status, output, errors) = try ServeCommandTests.run(["demo", "--fleet", "--quick", "--json"])
        #expect(status == 0, "\(errors)\n\(output)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: [String: Any]])
        let names = ["roundRobin", "roundRobinRedis", "consistentHash", "consistentHashNodeKilled"]
        #expect(Set(object.keys) == Set(names))
        for name in names {
            let scenario = try #require(object[name])
            for field in ["originFetches", "distinctSources", "decodes", "requests", "failures", "requestsPerSecond", "p99Millis"] {
                #expect(scenario[field] is NSNumber, "\(name).\(field)")
            }
            #expect(scenario["failures"] as? Int == 0, "\(name)")
        }
        func fetches(_ name: String) -> Int { object[name]?["originFetches"] as? Int ?? -1 }
        let sources = object["consistentHash"]?["distinctSources"] as? Int ?? 0
        #expect(sources > 0)
        // Hashing and Redis each fetch a source once; round robin spreads its sizes over nodes.
        #expect(fetches("consistentHash") == sources)
        #expect(fetches("roundRobinRedis") == sources)
        #expect(fetches("roundRobin") > sources)
        #expect(object["consistentHashNodeKilled"]?["refetchedFromLiveNodes"] as? Int == 0)
        // Nothing it started is left running.
        let (_, processes, _) = try ServeCommandTests.shell("pgrep -f '[l]umen-nginx-|[l]umen-fleet-' || true")
        #expect(processes.isEmpty, "\(processes)")
    }
}
