import Foundation
import Testing
import LumenTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The loopback server, spoken to over raw sockets so that every byte on the wire is visible.
@Suite(.timeLimit(.minutes(1)))
struct ServerTests {
    let server: LoopbackServer
    let payload = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })

    init() throws {
        server = try LoopbackServer()
    }

    @Test func servesBytesAndCountsRequestsPerPath() throws {
        let other = Data("second".utf8)
        server.serve(path: "/a.jpg", data: payload, contentType: "image/jpeg")
        server.serve(path: "b.png", data: other, contentType: "image/png")

        let client = try RawHTTPClient(port: server.port)
        let first = try #require(client.request("GET /a.jpg HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(first.status == 200)
        #expect(first.header("content-type") == "image/jpeg")
        #expect(first.header("content-length") == String(payload.count))
        #expect(first.body == payload)
        let second = try #require(client.request("GET /a.jpg?size=10 HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(second.body == payload)
        let third = try #require(client.request("GET /b.png HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(third.body == other)
        let missing = try #require(client.request("GET /missing HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(missing.status == 404)

        let stats = server.statistics
        #expect(stats.requests(for: "/a.jpg") == 2)
        #expect(stats.requests(for: "b.png") == 1)
        #expect(stats.requests(for: "/missing") == 1)
        #expect(stats.totalRequests == 4)
        #expect(stats.bodyBytesSent == 2 * payload.count + other.count)
        #expect(stats.totalConnections == 1, "four requests on one kept-alive connection")

        let log = server.recordedRequests
        #expect(log.map(\.target) == ["/a.jpg", "/a.jpg?size=10", "/b.png", "/missing"])
        #expect(log.allSatisfy { $0.method == "GET" && $0.header("HOST") == "x" })
        #expect(server.recordedRequests(for: "/a.jpg").count == 2)
    }

    @Test func etagMatchAnswers304WithoutBody() async throws {
        server.serve(path: "/e", data: payload, etag: "\"v1\"", cacheControl: "max-age=60")
        let client = try RawHTTPClient(port: server.port)

        let full = try #require(client.request("GET /e HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(full.status == 200)
        #expect(full.header("etag") == "\"v1\"")
        #expect(full.header("cache-control") == "max-age=60")

        for tag in ["\"v1\"", "W/\"v1\"", "\"v0\", \"v1\"", "*"] {
            let response = try #require(client.request("GET /e HTTP/1.1\r\nHost: x\r\nIf-None-Match: \(tag)\r\n\r\n"))
            #expect(response.status == 304, "If-None-Match: \(tag)")
            #expect(response.body.isEmpty)
            #expect(response.header("etag") == "\"v1\"")
            #expect(response.header("cache-control") == "max-age=60")
        }
        let changed = try #require(client.request("GET /e HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"v0\"\r\n\r\n"))
        #expect(changed.status == 200)
        #expect(changed.body == payload)

        // Counters are updated just after each write: wait for the last response to finish.
        try await server.waitUntil { $0.inFlightRequests == 0 }
        let stats = server.statistics
        #expect(stats.notModifiedResponses == 4)
        #expect(stats.requests(for: "/e") == 6)
        #expect(stats.bodyBytesSent == 2 * payload.count)
    }

    @Test func lastModifiedAnswers304WhenNotModifiedSince() throws {
        let modified = Date(timeIntervalSince1970: 1_700_000_000)
        let stamp = LoopbackServer.httpDate(modified)
        server.serve(path: "/m", data: payload, lastModified: stamp)
        let client = try RawHTTPClient(port: server.port)

        let cases: [(String, Int)] = [
            (stamp, 304),
            (LoopbackServer.httpDate(modified.addingTimeInterval(3600)), 304),
            (LoopbackServer.httpDate(modified.addingTimeInterval(-1)), 200),
            ("not a date", 200),
        ]
        for (since, status) in cases {
            let response = try #require(client.request("GET /m HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: \(since)\r\n\r\n"))
            #expect(response.status == status, "If-Modified-Since: \(since)")
            #expect(response.header("last-modified") == stamp)
        }
        // If-None-Match takes precedence over If-Modified-Since; this route has no ETag.
        let both = try #require(client.request(
            "GET /m HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\"\r\nIf-Modified-Since: \(stamp)\r\n\r\n"
        ))
        #expect(both.status == 200)
        #expect(server.statistics.notModifiedResponses == 2)
    }

    @Test func httpDateFormatsIMFFixdate() {
        #expect(LoopbackServer.httpDate(Date(timeIntervalSince1970: 784_111_777)) == "Sun, 06 Nov 1994 08:49:37 GMT")
    }

    @Test(arguments: [
        "GARBAGE\r\n\r\n",
        "GET /a HTTP/1.1\r\nNoColonHere\r\n\r\n",
        "GET a-relative-path HTTP/1.1\r\n\r\n",
        "GET /a HTTP/9.9\r\n\r\n",
        "GET /a HTTP/1.1\r\nContent-Length: banana\r\n\r\n",
        "\u{1}\u{2}\u{3} \u{4} \u{5}\r\n\r\n",
    ])
    func malformedRequestGets400AndServerKeepsServing(raw: String) throws {
        server.serve(path: "/ok", data: payload)
        let bad = try RawHTTPClient(port: server.port)
        let response = try #require(bad.request(raw))
        #expect(response.status == 400)
        #expect(bad.isClosedByServer())

        let good = try RawHTTPClient(port: server.port)
        let ok = try #require(good.request("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(ok.status == 200)
        #expect(server.statistics.badRequests == 1)
    }

    @Test func oversizedHeadGets400() throws {
        let client = try RawHTTPClient(port: server.port)
        let huge = "GET / HTTP/1.1\r\nX-Big: " + String(repeating: "a", count: 70_000) + "\r\n\r\n"
        let response = try #require(client.request(huge))
        #expect(response.status == 400)
    }

    @Test func methodsOtherThanGetAndHead() throws {
        server.serve(path: "/h", data: payload)
        let client = try RawHTTPClient(port: server.port)
        let head = try #require(client.request("HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n", isHead: true))
        #expect(head.status == 200)
        #expect(head.header("content-length") == String(payload.count))
        #expect(head.body.isEmpty)
        let post = try #require(client.request("POST /h HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"))
        #expect(post.status == 405)
        // The body of the POST was consumed: the connection is still in sync.
        let get = try #require(client.request("GET /h HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(get.body == payload)
    }

    @Test func statusOverrideAndRestore() throws {
        server.serve(path: "/s", data: payload)
        server.respond(path: "/s", status: 503)
        let client = try RawHTTPClient(port: server.port)
        #expect(try #require(client.request("GET /s HTTP/1.1\r\n\r\n")).status == 503)
        server.respond(path: "/s", status: nil)
        let restored = try #require(client.request("GET /s HTTP/1.1\r\n\r\n"))
        #expect(restored.status == 200)
        #expect(restored.body == payload)
        // An override on a path without content still answers with that status.
        server.respond(path: "/fail", status: 500)
        #expect(try #require(client.request("GET /fail HTTP/1.1\r\n\r\n")).status == 500)
        // A forced 304 has no body, so the connection stays in sync.
        server.respond(path: "/s", status: 304)
        #expect(try #require(client.request("GET /s HTTP/1.1\r\n\r\n")).status == 304)
        #expect(try #require(client.request("GET /fail HTTP/1.1\r\n\r\n")).status == 500)
    }

    @Test func changesWhileARequestIsHeldApplyWhenReleased() async throws {
        server.serve(path: "/late", data: payload)
        server.hold("/late")
        let client = try RawHTTPClient(port: server.port)
        client.send("GET /late HTTP/1.1\r\n\r\n")
        try await server.waitUntil { $0.heldRequests == 1 }
        server.respond(path: "/late", status: 502)
        server.release("/late")
        #expect(try #require(client.readResponse()).status == 502)
    }

    @Test func truncatedBodySendsFullLengthThenCloses() throws {
        server.serve(path: "/t", data: payload)
        server.truncate(path: "/t", after: 1000)
        let client = try RawHTTPClient(port: server.port)
        let response = try #require(client.request("GET /t HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(response.header("content-length") == String(payload.count))
        #expect(response.body == payload.prefix(1000))
        #expect(client.isClosedByServer())
        #expect(server.statistics.bodyBytesSent == 1000)
    }

    @Test func chunkedEncodingHasNoContentLength() throws {
        server.serve(path: "/c", data: payload)
        server.setChunked(for: "/c", chunkSize: 4096)
        let client = try RawHTTPClient(port: server.port)
        let response = try #require(client.request("GET /c HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(response.header("transfer-encoding") == "chunked")
        #expect(response.header("content-length") == nil)
        #expect(response.chunkCount == (payload.count + 4095) / 4096)
        #expect(response.body == payload)
        // Still kept alive after the terminating chunk.
        #expect(try #require(client.request("GET /c HTTP/1.1\r\nHost: x\r\n\r\n")).body == payload)
    }

    @Test func heldRequestsWaitForReleaseAndPeaksAreCounted() async throws {
        server.serve(path: "/held", data: payload)
        server.hold("/held")
        let clients = try (0..<3).map { _ in try RawHTTPClient(port: server.port) }
        for client in clients { client.send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n") }

        try await server.waitUntil { $0.heldRequests == 3 }
        var stats = server.statistics
        #expect(stats.openConnections == 3)
        #expect(stats.peakConnections == 3)
        #expect(stats.inFlightRequests == 3)
        #expect(stats.peakInFlightRequests == 3)
        #expect(stats.bodyBytesSent == 0, "nothing is sent while held")

        server.release("/held")
        for client in clients {
            #expect(try #require(client.readResponse()).body == payload)
            client.close()
        }
        try await server.waitUntil { $0.openConnections == 0 }
        stats = server.statistics
        #expect(stats.peakConnections == 3)
        #expect(stats.inFlightRequests == 0)
        #expect(stats.heldRequests == 0)
        #expect(stats.clientDisconnects == 0)
    }

    @Test func clientDisconnectingWhileHeldIsNoticed() async throws {
        server.serve(path: "/gone", data: payload)
        server.hold("/gone")
        let client = try RawHTTPClient(port: server.port)
        client.send("GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
        try await server.waitForRequests(path: "/gone", count: 1)
        client.close()
        try await server.waitUntil { $0.clientDisconnects == 1 && $0.openConnections == 0 }
        #expect(server.statistics.bodyBytesSent == 0)
    }

    @Test func clientDisconnectingMidBodyDoesNotCrash() async throws {
        let big = Data(count: 32 * 1024 * 1024)
        server.serve(path: "/big", data: big)
        let client = try RawHTTPClient(port: server.port)
        client.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = client.readSome()
        client.close()
        try await server.waitUntil { $0.clientDisconnects == 1 && $0.openConnections == 0 }
        #expect(server.statistics.bodyBytesSent < big.count)
        // And the server still answers.
        server.serve(path: "/after", data: payload)
        #expect(try #require(RawHTTPClient(port: server.port).request("GET /after HTTP/1.1\r\n\r\n")).body == payload)
    }

    @Test func latencyDelaysTheResponseAndNoticesAClientThatLeaves() async throws {
        server.serve(path: "/slow", data: payload)
        server.setLatency(.seconds(600), for: "/slow")
        let client = try RawHTTPClient(port: server.port)
        client.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        try await server.waitForRequests(path: "/slow", count: 1)
        #expect(server.statistics.inFlightRequests == 1)
        client.close()
        // The delayed request ends when its client leaves, long before the latency passes.
        try await server.waitUntil { $0.clientDisconnects == 1 && $0.inFlightRequests == 0 }
        #expect(server.statistics.bodyBytesSent == 0)

        // A short latency still answers; removing it answers at once.
        server.setLatency(.milliseconds(5), for: "/slow")
        #expect(try #require(RawHTTPClient(port: server.port).request("GET /slow HTTP/1.1\r\n\r\n")).body == payload)
        server.setLatency(.zero, for: "/slow")
        #expect(try #require(RawHTTPClient(port: server.port).request("GET /slow HTTP/1.1\r\n\r\n")).body == payload)
    }

    @Test func connectionHeadersDecideKeepAlive() throws {
        server.serve(path: "/k", data: payload)
        let closing = try RawHTTPClient(port: server.port)
        let first = try #require(closing.request("GET /k HTTP/1.1\r\nConnection: close\r\n\r\n"))
        #expect(first.header("connection") == "close")
        #expect(closing.isClosedByServer())

        let old = try RawHTTPClient(port: server.port)
        #expect(try #require(old.request("GET /k HTTP/1.0\r\n\r\n")).body == payload)
        #expect(old.isClosedByServer(), "HTTP/1.0 closes unless asked to keep alive")

        let kept = try RawHTTPClient(port: server.port)
        let response = try #require(kept.request("GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"))
        #expect(response.header("connection") == "keep-alive")
        #expect(try #require(kept.request("GET /k HTTP/1.0\r\n\r\n")).body == payload)
        #expect(server.statistics.totalConnections == 3)
    }

    @Test func bodyHoldPausesMidBody() async throws {
        server.serve(path: "/p", data: payload)
        server.holdBody("/p", after: 1234)
        let client = try RawHTTPClient(port: server.port)
        client.send("GET /p HTTP/1.1\r\n\r\n")
        try await server.waitUntil { $0.pausedBodies == 1 }
        #expect(server.statistics.bodyBytesSent == 1234)
        server.release("/p")
        #expect(try #require(client.readResponse()).body == payload)
        try await server.waitUntil { $0.inFlightRequests == 0 }
        #expect(server.statistics.pausedBodies == 0)
        #expect(server.statistics.bodyBytesSent == payload.count)
    }

    @Test func waitingResumesOnCancellationAndOnStop() async throws {
        let waiting = Task { [server] in try await server.waitForRequests(path: "/never", count: 1) }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }

        let stopped = Task { [server] in try await server.waitForRequests(path: "/never", count: 1) }
        server.serve(path: "/x", data: payload)
        server.hold("/x")
        let client = try RawHTTPClient(port: server.port)
        client.send("GET /x HTTP/1.1\r\n\r\n")
        try await server.waitUntil { $0.heldRequests == 1 }
        server.stop()
        server.stop()
        await #expect(throws: LoopbackServer.Error.stopped) { try await stopped.value }
        #expect(client.isClosedByServer(), "stop() closes held connections")
        #expect(throws: LoopbackServer.Error.stopped) { try server.start() }
    }

    @Test func resetStatisticsKeepsLiveValues() async throws {
        server.serve(path: "/r", data: payload)
        let client = try RawHTTPClient(port: server.port)
        _ = client.request("GET /r HTTP/1.1\r\n\r\n")
        try await server.waitUntil { $0.inFlightRequests == 0 }
        server.resetStatistics()
        let stats = server.statistics
        #expect(stats.totalRequests == 0)
        #expect(stats.bodyBytesSent == 0)
        #expect(stats.openConnections == 1)
        #expect(stats.peakConnections == 1)
    }
}
