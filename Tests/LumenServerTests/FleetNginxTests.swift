import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Testing

/// The shipped nginx configuration (deploy/nginx/lumen.conf) in front of three nodes: nginx
/// started here, on loopback, from a temporary directory.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FleetNginxTests {
    static let template: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("deploy/nginx/lumen.conf"), encoding: .utf8)) ?? ""
    }()

    /// Three nodes, each with a disk cache of its own (where a node holds a source's bytes
    /// between requests for its sizes).
    private static func nodes(_ origin: LoopbackServer) throws -> [ServerFixture] {
        try (0..<3).map { _ in
            let directory = try TemporaryDirectory.make("node")
            return try ServerFixture(origin: origin) { c in c.cacheDirectory = directory }
        }
    }

    @Test func theShippedConfigurationHashesTheSourceSegment() {
        #expect(Self.template.contains("hash $lumen_source consistent;"))
        #expect(Self.template.contains("$request_uri"))
        #expect(Self.template.contains("proxy_next_upstream error timeout"))
        let site = NginxFront.site(Self.template, listen: 9000, nodes: [9001, 9002], consistentHashing: false)
        #expect(site.contains("listen 127.0.0.1:9000;"))
        #expect(site.contains("server 127.0.0.1:9001 max_fails=1 fail_timeout=10s;"))
        #expect(site.contains("server 127.0.0.1:9002 max_fails=1 fail_timeout=10s;"))
        #expect(!site.contains("8081") && !site.contains("hash $lumen_source"))
    }

    /// Every size of one source goes to one node (so the origin is fetched once per source),
    /// and the sources spread over the nodes.
    @Test func everySizeOfASourceGoesToOneNode() async throws {
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let nodes = try Self.nodes(origin)
        let nginx = try NginxFront(template: Self.template, nodes: nodes.map(\.port))
        defer { nginx.stop() }
        var nodeBySource: [String: Set<String>] = [:]
        let sizes = ["w:40", "w:80", "w:120,h:60,fit:cover", "h:90"]
        for index in 0..<20 {
            let name = "/s\(index).jpg"
            nodes[0].serveJPEG(name, width: 200, height: 150)
            for size in sizes {
                // Signed path segments differ per size; only the source segment routes.
                let response = try await RawHTTP.fetch(port: nginx.port, nodes[0].path(size, name))
                #expect(response.status == 200)
                nodeBySource[name, default: []].insert(response.header("X-Lumen-Node") ?? "?")
            }
            #expect(origin.requestCount(for: name) == 1, "\(name)")
        }
        #expect(nodeBySource.values.allSatisfy { $0.count == 1 }, "\(nodeBySource)")
        #expect(Set(nodeBySource.values.flatMap { $0 }).count > 1)
        #expect(nodes.map { $0.server.metrics.originFetches }.reduce(0, +) == 20)
    }

    /// A node that stops mid-run (its connections refused, its requests in flight answered
    /// 503 or cut) costs no request through nginx: each goes to the next node.
    @Test func aNodeKilledMidRunFailsNoRequest() async throws {
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let nodes = try Self.nodes(origin)
        let nginx = try NginxFront(template: Self.template, nodes: nodes.map(\.port))
        defer { nginx.stop() }
        for index in 0..<30 { nodes[0].serveJPEG("/k\(index).jpg", width: 240, height: 180) }
        // Half the sources are held at the origin when the node stops, so that requests are
        // in flight on it.
        for index in 15..<30 { origin.hold("/k\(index).jpg") }
        let paths = (0..<30).flatMap { index in ["w:64", "w:32"].map { nodes[0].path($0, "/k\(index).jpg") } }
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for path in paths.prefix(30) { group.addTask { try await RawHTTP.fetch(port: nginx.port, path).status } }
            var statuses: [Int] = []
            for _ in 0..<15 { statuses.append(try await group.next()!) } // the unheld half answered
            for path in paths.dropFirst(30) { group.addTask { try await RawHTTP.fetch(port: nginx.port, path).status } }
            await eventually("requests wait on every node that has a held source") {
                nodes.map { $0.server.metrics.queued }.reduce(0, +) >= 15
            }
            let victim = try #require(nodes.max { $0.server.metrics.queued < $1.server.metrics.queued })
            victim.server.stop()
            for index in 15..<30 { origin.release("/k\(index).jpg") }
            for try await status in group { statuses.append(status) }
            return statuses
        }
        #expect(statuses.count == 60)
        #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses.filter { $0 != 200 })")
    }
}
