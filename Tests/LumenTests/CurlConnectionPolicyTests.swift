#if os(Linux)
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import Lumen
import LumenTestSupport

/// `CurlDataLoader` with a `ConnectionPolicy` that allows exactly 127.0.0.1/32, against the
/// loopback server (which listens on 127.0.0.1 only) and probes that listen, without ever
/// answering, on the same port at 127.0.0.2 and ::1. Every connection stays on loopback.
@Suite(.timeLimit(.minutes(1)))
struct CurlConnectionPolicyTests {
    let server: LoopbackServer
    let loader: CurlDataLoader
    /// 127.0.0.2 and ::1 at the server's port: where a refused load would have connected.
    let probeV4: ListenerProbe
    let probeV6: ListenerProbe

    init() throws {
        server = try LoopbackServer()
        probeV4 = try ListenerProbe(address: "127.0.0.2", port: server.port)
        probeV6 = try ListenerProbe(address: "::1", port: server.port)
        let policy = ConnectionPolicy(allowing: [try #require(IPAddressRange("127.0.0.1/32"))])
        loader = CurlDataLoader(requestTimeout: 10, connectionPolicy: policy, maximumRedirects: 5)
        server.serve(path: "/a.png", data: Data("image".utf8), contentType: "image/png")
    }

    private func url(_ host: String, _ path: String = "/a.png") throws -> URL {
        try #require(URL(string: "http://\(host):\(server.port)\(path)"), "Foundation refuses the host \(host)")
    }

    /// The load's error, which must be `.addressRefused(expected)`.
    private func expectRefused(_ url: URL, as expected: String, sourceLocation: SourceLocation = #_sourceLocation) async {
        let error = await #expect(throws: DataLoader.Error.self, sourceLocation: sourceLocation) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        guard case .addressRefused(let address)? = error else {
            Issue.record("\(url.absoluteString): \(String(describing: error)), not addressRefused", sourceLocation: sourceLocation)
            return
        }
        #expect(address == expected, sourceLocation: sourceLocation)
        #expect(error?.description == "Connection to \(expected) refused by the connection policy", sourceLocation: sourceLocation)
    }

    @Test func theAllowedAddressLoads() async throws {
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: try url("127.0.0.1")), didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: sink.data, as: UTF8.self) == "image")
    }

    /// However the URL spells it, an address other than 127.0.0.1 is refused before a
    /// connection: libcurl turns every numeric spelling into the address, and the check is on
    /// the address it is about to connect to.
    @Test(arguments: [
        ("127.0.0.2", "127.0.0.2"), ("2130706434", "127.0.0.2"), ("0x7f.2", "127.0.0.2"), ("0177.0.0.2", "127.0.0.2"),
        ("127.2", "127.0.0.2"), ("[::ffff:127.0.0.2]", "::ffff:127.0.0.2"), ("[::1]", "::1"), ("[0:0:0:0:0:0:0:1]", "::1"),
        // 0.0.0.0 reaches this host's own listeners on Linux.
        ("0.0.0.0", "0.0.0.0"),
    ])
    func otherLoopbackSpellingsAreRefusedBeforeConnecting(host: String, refused: String) async throws {
        await expectRefused(try url(host), as: refused)
        #expect(probeV4.takeConnections() == 0)
        #expect(probeV6.takeConnections() == 0)
        #expect(server.statistics.totalConnections == 0)
    }

    /// The v4-mapped form of the allowed address is the allowed address.
    @Test func theMappedFormOfTheAllowedAddressLoads() async throws {
        let response = try await loader.loadData(for: URLRequest(url: try url("[::ffff:127.0.0.1]"))) { _, _ in }
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
    }

    /// A host name is checked as the addresses it resolves to (`localhost`: ::1 refused,
    /// 127.0.0.1 allowed, whichever libcurl tries first).
    @Test func aHostNameIsCheckedAfterResolution() async throws {
        let response = try await loader.loadData(for: URLRequest(url: try url("localhost"))) { _, _ in }
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(probeV6.takeConnections() == 0)
    }

    @Test(arguments: [("127.0.0.2", "127.0.0.2"), ("[::1]", "::1"), ("2130706434", "127.0.0.2"), ("[::ffff:127.0.0.2]", "::ffff:127.0.0.2")])
    func aRedirectToARefusedAddressIsRefused(host: String, refused: String) async throws {
        server.redirect(path: "/r", to: try url(host).absoluteString)
        await expectRefused(server.url(for: "/r"), as: refused)
        #expect(server.requestCount(for: "/r") == 1)
        #expect(probeV4.takeConnections() == 0)
        #expect(probeV6.takeConnections() == 0)
    }

    @Test func aRedirectWithinTheAllowedAddressIsFollowed() async throws {
        server.redirect(path: "/r", to: "/a.png")
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/r"))) { _, _ in }
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(response.url?.path == "/a.png")
    }

    /// `maximumRedirects` (5 here) are followed; one more fails.
    @Test(arguments: [5, 6])
    func redirectsPastTheMaximumFail(hops: Int) async throws {
        for hop in 0..<hops { server.redirect(path: "/hop\(hop)", to: hop == hops - 1 ? "/a.png" : "/hop\(hop + 1)") }
        let request = URLRequest(url: server.url(for: "/hop0"))
        if hops <= 5 {
            let response = try await loader.loadData(for: request) { _, _ in }
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
        } else {
            let error = await #expect(throws: URLError.self) { try await loader.loadData(for: request) { _, _ in } }
            #expect(error?.code == .httpTooManyRedirects)
            #expect(server.requestCount(for: "/a.png") == 0)
        }
    }

    @Test func theDefaultsAreNoPolicyAndTwentyRedirects() async throws {
        let plain = CurlDataLoader()
        #expect(plain.connectionPolicy == nil)
        #expect(CurlDataLoader.maximumRedirects == 20)
        // /hop0 … /hop20: 21 redirects from /hop0, 20 from /hop1.
        for hop in 0...20 { server.redirect(path: "/hop\(hop)", to: hop == 20 ? "/a.png" : "/hop\(hop + 1)") }
        let response = try await plain.loadData(for: URLRequest(url: server.url(for: "/hop1"))) { _, _ in }
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let error = await #expect(throws: URLError.self) {
            try await plain.loadData(for: URLRequest(url: server.url(for: "/hop0"))) { _, _ in }
        }
        #expect(error?.code == .httpTooManyRedirects)
    }

    /// Without a policy nothing is checked: the load connects to 127.0.0.2 (the probe, which
    /// never answers, so it times out), and a closed port on 127.0.0.3 is a transport error.
    @Test func withoutAPolicyEveryAddressIsConnectedTo() async throws {
        let plain = CurlDataLoader(requestTimeout: 0.3)
        let timedOut = await #expect(throws: URLError.self) {
            try await plain.loadData(for: URLRequest(url: try url("127.0.0.2"))) { _, _ in }
        }
        #expect(timedOut?.code == .timedOut)
        #expect(probeV4.takeConnections() == 1)

        // Nothing listens on 127.0.0.3 at this port: the kernel refuses the connection.
        let closed = await #expect(throws: URLError.self) {
            try await plain.loadData(for: URLRequest(url: try url("127.0.0.3"))) { _, _ in }
        }
        #expect(closed?.code == .cannotConnectToHost)
    }
}
#endif
