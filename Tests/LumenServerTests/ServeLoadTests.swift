import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Many clients at once: coalescing, the queue bound, slow and malformed clients, SSRF, drain.
@Suite(.timeLimit(.minutes(3)))
struct ServeLoadTests {
    @Test func aHundredClientsForOneNewSourceAtThreeSizesMakeOneOriginFetch() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/new.jpg", width: 1024, height: 768)
        f.origin.hold("/new.jpg")
        let sizes = ["w:64", "w:128,h:128", "w:256,fit:cover,h:200"]
        let responses = try await withThrowingTaskGroup(of: RawResponse.self) { group in
            for i in 0..<100 {
                let path = f.path(sizes[i % 3], "/new.jpg")
                group.addTask { try await f.get(path) }
            }
            // Every request is waiting for work, and the origin has seen exactly one fetch.
            await eventually("100 requests wait on one fetch") {
                f.server.metrics.queued == 100 && f.origin.requestCount(for: "/new.jpg") >= 1
            }
            #expect(f.origin.requestCount(for: "/new.jpg") == 1)
            f.origin.release("/new.jpg")
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(responses.allSatisfy { $0.status == 200 })
        #expect(f.origin.requestCount(for: "/new.jpg") == 1)
        let metrics = f.server.metrics
        #expect(metrics.originFetches == 1)
        #expect(metrics.encodes == 3)
        #expect(metrics.encodeJoins == 97)
        #expect(metrics.decodes == 3) // one per distinct decode size
        let text = String(decoding: try await f.get("/metrics").body, as: UTF8.self)
        #expect(text.contains("lumen_origin_fetches_total 1\n"))
        #expect(text.contains("lumen_joins_total{stage=\"encode\"} 97\n"))
    }

    @Test func overTheQueueIs429AndServiceResumes() async throws {
        let f = try ServerFixture { c in c.maximumQueue = 2 }
        f.serveJPEG("/a.jpg")
        f.serveJPEG("/b.jpg")
        f.origin.hold("/a.jpg")
        async let first = f.get(f.path("w:10", "/a.jpg"))
        async let second = f.get(f.path("w:20", "/a.jpg"))
        await eventually("two requests wait") { f.server.metrics.queued == 2 }
        let refused = try await f.get(f.path("w:30", "/b.jpg"))
        #expect(refused.status == 429)
        #expect(refused.header("Retry-After") == "1")
        f.origin.release("/a.jpg")
        #expect(try await first.status == 200)
        #expect(try await second.status == 200)
        #expect(try await f.get(f.path("w:30", "/b.jpg")).status == 200)
        #expect(f.server.metrics.queueRejections == 1)
    }

    @Test func slowClientsDoNotBlockOthers() async throws {
        let f = try ServerFixture { c in c.clientTimeout = 30 }
        f.serveJPEG("/p.jpg")
        // 100 connections that send half a request line and then nothing.
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        for _ in 0..<100 {
            let fd = try RawHTTP.connect(port: f.port)
            _ = RawHTTP.write(fd, Array("GET /health HT".utf8))
            sockets.append(fd)
        }
        let response = try await f.get(f.path("w:40", "/p.jpg"))
        #expect(response.status == 200)
        #expect(try await f.get("/health").status == 200)
    }

    @Test func anIdleClientIsClosedAfterTheClientTimeout() async throws {
        let f = try ServerFixture { c in c.clientTimeout = 1 }
        let fd = try RawHTTP.connect(port: f.port)
        defer { close(fd) }
        _ = RawHTTP.write(fd, Array("GET /health HTTP/1.1\r\nHost: x\r\n".utf8)) // never finished
        // The server closes it: the read ends (with no response) well before the 60 s receive timeout.
        let started = Date()
        let data = RawHTTP.readAll(fd)
        #expect(Date().timeIntervalSince(started) < 30)
        #expect(!String(decoding: data, as: UTF8.self).contains("200"))
    }

    @Test(arguments: [
        ("bare LF", "GET /health HTTP/1.1\nHost: x\n\n"),
        ("Transfer-Encoding on a GET", "GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("duplicate Content-Length", "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n"),
        ("a body on a GET", "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
        ("a huge header", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "a", count: 100_000) + "\r\n\r\n"),
        ("many headers", "GET /health HTTP/1.1\r\nHost: x\r\n" + (0..<5000).map { "X-\($0): v\r\n" }.joined() + "\r\n"),
        ("no Host on HTTP/1.1", "GET /health HTTP/1.1\r\n\r\n"),
        ("garbage", "\u{1}\u{2}\u{3} nonsense\r\n\r\n"),
    ])
    func malformedRequestsGet4xxAndTheServerLives(_ name: String, _ raw: String) async throws {
        let f = try ServerFixture()
        let response = try? RawHTTP.exchange(port: f.port, raw: raw)
        if let response {
            #expect((400...499).contains(response.status), "\(name): \(response.status)")
        } // else: the server closed the connection without an answer, which is also a refusal
        #expect(try await f.get("/health").status == 200, "\(name): the server stopped answering")
    }

    @Test func theSSRFMatrixIsRefusedWithoutConnecting() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/p.jpg")
        let port = f.origin.port
        #expect(try await f.get(f.path("w:10", source: "http://127.0.0.1:\(port)/p.jpg")).status == 200)
        for host in ["127.0.0.2", "2130706434", "0x7f.2", "0177.0.0.2", "[::ffff:127.0.0.2]", "[::1]", "localhost6"] {
            let before = f.origin.statistics.totalConnections
            let response = try await f.get(f.path("w:10", source: "http://\(host):\(port)/p.jpg"))
            #expect(response.status == 403 || (host == "localhost6" && response.status == 502), "\(host): \(response.status)")
            #expect(f.origin.statistics.totalConnections == before, "\(host) reached the origin")
        }
        // A redirect from the allowed origin to a refused address.
        for target in ["http://127.0.0.2:\(port)/p.jpg", "http://[::1]:\(port)/p.jpg", "http://2130706434:\(port)/p.jpg"] {
            f.origin.redirect(path: "/hop.jpg", to: target)
            let response = try await f.get(f.path("w:11", "/hop.jpg"))
            #expect(response.status == 403, "redirect to \(target): \(response.status)")
        }
    }

    @Test func aGracefulDrainLosesNoInFlightResponse() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/d.jpg")
        f.origin.hold("/d.jpg")
        let responses = try await withThrowingTaskGroup(of: RawResponse.self) { group in
            for i in 0..<6 {
                let path = f.path("w:\(20 + i)", "/d.jpg")
                group.addTask { try await f.get(path) }
            }
            await eventually("six requests wait") { f.server.metrics.queued == 6 }
            let drain = Task { await f.server.drain(timeout: 60) }
            // Draining: /health says so and new connections are refused.
            await eventually("the server stops accepting") { (try? RawHTTP.connect(port: f.port)).map { close($0); return false } ?? true }
            f.origin.release("/d.jpg")
            let all = try await group.reduce(into: [RawResponse]()) { $0.append($1) }
            await drain.value
            return all
        }
        #expect(responses.count == 6)
        #expect(responses.allSatisfy { $0.status == 200 })
    }
}
