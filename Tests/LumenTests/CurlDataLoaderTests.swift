#if os(Linux)
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@testable import Lumen
import LumenTestSupport

/// `CurlDataLoader` against the loopback server: `LoaderTests`' scenarios, and the responses
/// that FoundationNetworking cannot survive.
@Suite(.timeLimit(.minutes(1)))
struct CurlDataLoaderTests {
    let server: LoopbackServer
    let loader = CurlDataLoader()

    init() throws {
        server = try LoopbackServer()
    }

    // MARK: Bodies

    @Test func aLoadStreamsTheBodyInOrder() async throws {
        let body = LoaderTests.bytes(count: 3 * 1024 * 1024, seed: 1)
        server.serve(path: "/large.jpg", data: body, contentType: "image/jpeg")
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/large.jpg")), didReceive: sink.append)

        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(http.url == server.url(for: "/large.jpg"))
        #expect(http.expectedContentLength == Int64(body.count))
        #expect(http.mimeType == "image/jpeg")
        #expect(sink.data == body)
        #expect(sink.chunks > 1)
        #expect(sink.responsesMatched(http))
        #expect(server.statistics.totalRequests == 1)
    }

    @Test func chunksArriveWhileTheDownloadIsStillRunning() async throws {
        let body = LoaderTests.bytes(count: 1_000_000, seed: 7)
        server.serve(path: "/progressive", data: body)
        server.holdBody("/progressive", after: 400_000)
        let (chunks, chunkSink) = AsyncStream.makeStream(of: Int.self)
        let load = Task { [loader, server] in
            let sink = ChunkSink()
            defer { chunkSink.finish() }  // also when the load fails: the wait below ends
            _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/progressive"))) { chunk, response in
                sink.append(chunk, response)
                chunkSink.yield(chunk.count)
            }
            return sink.data
        }
        var received = 0
        for await count in chunks {
            received += count
            if received >= 400_000 { break }
        }
        #expect(received == 400_000)
        try await server.waitUntil { $0.pausedBodies == 1 }
        server.release("/progressive")
        #expect(try await load.value == body)
    }

    @Test func chunkedBodyOfUnknownLength() async throws {
        let body = LoaderTests.bytes(count: 700_000, seed: 6)
        server.serve(path: "/c", data: body, contentType: "image/png")
        server.setChunked(for: "/c", chunkSize: 10_000)
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/c")), didReceive: sink.append)
        #expect(response.expectedContentLength == -1)
        #expect(sink.data == body)
    }

    /// libcurl asks for gzip (and deflate, br) and hands over the decoded bytes.
    /// A chunked body's `Content-Length` is ignored (RFC 9112, 6.3), as libcurl ignores it: a
    /// larger one does not make a complete body "incomplete".
    @Test(arguments: [2, 1])
    func aChunkedBodyIgnoresAContentLength(factor: Int) async throws {
        let body = LoaderTests.bytes(count: 50_000, seed: 3)
        server.serve(path: "/c", data: body, headers: ["Content-Length": String(body.count * factor)])
        server.setChunked(for: "/c", chunkSize: 7_000)
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/c")), didReceive: sink.append)

        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(sink.data == body)
    }

    @Test func aGzippedBodyIsDecoded() async throws {
        // `printf 'hello, gzip! hello, gzip! hello, gzip!' | gzip -n -9`
        let gzipped = Data([
            31, 139, 8, 0, 0, 0, 0, 0, 2, 3, 203, 72, 205, 201, 201, 215, 81, 72, 175, 202, 44, 80, 84, 200,
            192, 197, 1, 0, 127, 150, 113, 242, 38, 0, 0, 0,
        ])
        server.serve(path: "/g", data: gzipped, contentType: "text/plain", headers: ["Content-Encoding": "gzip"])
        let sink = ChunkSink()
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/g")), didReceive: sink.append)
        #expect(String(decoding: sink.data, as: UTF8.self) == "hello, gzip! hello, gzip! hello, gzip!")
        #expect(server.recordedRequests(for: "/g").first?.header("Accept-Encoding")?.contains("gzip") == true)
    }

    @Test func undecodableContentEncodingIsCannotDecodeContentData() async throws {
        server.serve(path: "/z", data: LoaderTests.bytes(count: 5_000, seed: 7), headers: ["Content-Encoding": "gzip"])
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/z"))) { _, _ in }
        }
        #expect(error?.code == .cannotDecodeContentData)
    }

    @Test func theRequestsHeadersAndMethodAreSent() async throws {
        server.serve(path: "/h", data: Data("12345".utf8))
        var request = URLRequest(url: server.url(for: "/h?size=2"))
        request.setValue("Bearer abc", forHTTPHeaderField: "Authorization")
        request.setValue("image/webp", forHTTPHeaderField: "Accept")
        _ = try await loader.loadData(for: request) { _, _ in }
        let recorded = try #require(server.recordedRequests(for: "/h").first)
        #expect(recorded.method == "GET")
        #expect(recorded.target == "/h?size=2")
        #expect(recorded.header("Authorization") == "Bearer abc")
        #expect(recorded.header("Accept") == "image/webp")

        // HEAD: the head, no body, and no complaint that the body is missing.
        request.httpMethod = "HEAD"
        let sink = ChunkSink()
        let head = try await loader.loadData(for: request, didReceive: sink.append)
        #expect((head as? HTTPURLResponse)?.statusCode == 200)
        #expect(head.expectedContentLength == 5)
        #expect(sink.chunks == 0)
        #expect(server.recordedRequests(for: "/h").last?.method == "HEAD")

        request.httpMethod = "POST"
        let error = await #expect(throws: URLError.self) { try await loader.loadData(for: request) { _, _ in } }
        #expect(error?.code == .unsupportedURL)
        #expect(server.requestCount(for: "/h") == 2)
    }

    // MARK: Statuses

    @Test(arguments: [404, 500, 503])
    func nonSuccessStatusIsTypedError(status: Int) async throws {
        server.serve(path: "/s", data: Data("body".utf8))
        if status != 404 { server.respond(path: "/s", status: status) }
        let path = status == 404 ? "/unknown" : "/s"
        let sink = ChunkSink()

        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: path)), didReceive: sink.append)
        }
        guard case .statusCode(let code, let response)? = error else {
            Issue.record("expected .statusCode, got \(String(describing: error))")
            return
        }
        #expect(code == status)
        #expect((response as? HTTPURLResponse)?.statusCode == status)
        #expect(response?.url == server.url(for: path))
        #expect(sink.chunks == 0, "a rejected response's body is not delivered")
    }

    @Test func notModifiedPassesThroughForConditionalRequest() async throws {
        server.serve(path: "/e", data: LoaderTests.bytes(count: 10_000, seed: 2), etag: "\"abc\"")
        var conditional = URLRequest(url: server.url(for: "/e"))
        conditional.setValue("\"abc\"", forHTTPHeaderField: "If-None-Match")
        let sink = ChunkSink()
        let response = try await loader.loadData(for: conditional, didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 304)
        #expect(sink.chunks == 0)
        #expect(server.statistics.notModifiedResponses == 1)
    }

    @Test(arguments: [100, 103])
    func interimResponseBeforeTheResponseIsSkipped(status: Int) async throws {
        let body = LoaderTests.bytes(count: 50_000, seed: 3)
        server.serve(path: "/hinted.jpg", data: body, contentType: "image/jpeg")
        server.sendInformational(status, for: "/hinted.jpg")
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/hinted.jpg")), didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(sink.data == body)
    }

    @Test func customValidatorCanAcceptErrorStatuses() async throws {
        let lenient = CurlDataLoader(validate: { _, _ in })
        let sink = ChunkSink()
        let response = try await lenient.loadData(for: URLRequest(url: server.url(for: "/nothing")), didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 404)
        #expect(sink.chunks > 0, "the error page's body is delivered")
    }

    // MARK: Redirects

    @Test(arguments: ["img.png", "/dir/img.png", "http://127.0.0.1:PORT/dir/img.png"])
    func aRedirectIsFollowed(location: String) async throws {
        let body = LoaderTests.bytes(count: 20_000, seed: 9)
        server.serve(path: "/dir/img.png", data: body, contentType: "image/png")
        server.redirect(path: "/dir/r", to: location.replacingOccurrences(of: "PORT", with: "\(server.port)"))
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/dir/r")), didReceive: sink.append)
        #expect(response.url == server.url(for: "/dir/img.png"), "the response names the URL that answered")
        #expect(sink.data == body)
        #expect(sink.responsesMatched(response))
        #expect(server.requestCount(for: "/dir/r") == 1)
        #expect(server.requestCount(for: "/dir/img.png") == 1)
    }

    /// libcurl resolves a relative `Location` as RFC 3986 says: in the directory of the URL
    /// that answered, dot segments removed, each hop of a chain against the one before it.
    @Test(arguments: [("./img.png", "/dir/sub/img.png"), ("x/../img.png", "/dir/sub/img.png"),
                      ("../img.png", "/dir/img.png"), ("../../img.png", "/img.png")])
    func aRelativeRedirectIsResolvedAgainstTheRedirectingURL(location: String, expectedPath: String) async throws {
        for (index, path) in ["/img.png", "/dir/img.png", "/dir/sub/img.png"].enumerated() {
            server.serve(path: path, data: LoaderTests.bytes(count: 3_000 + index, seed: UInt64(20 + index)))
        }
        server.redirect(path: "/dir/sub/r1", to: "r2", status: 301)
        server.redirect(path: "/dir/sub/r2", to: location, status: 307)
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/dir/sub/r1"))) { _, _ in }
        #expect(response.url?.path == expectedPath)
        #expect(server.requestCount(for: expectedPath) == 1)
        #expect(server.statistics.totalRequests == 3)
    }

    /// Loads through a chain of redirects, cancelled after varying numbers of scheduler turns:
    /// each ends as cancelled (or with the image, when it won) and leaves no transfer behind.
    @Test func cancellingDuringRedirectsIsSafe() async throws {
        server.serve(path: "/big.png", data: Data(count: 200_000), contentType: "image/png")
        for hop in 0..<8 { server.redirect(path: "/hop\(hop)", to: hop == 7 ? "/big.png" : "/hop\(hop + 1)") }
        var cancelled = 0
        for round in 0..<200 {
            let load = Task { [loader, server] in
                try await loader.loadData(for: URLRequest(url: server.url(for: "/hop0")), didReceive: { _, _ in })
            }
            for _ in 0..<(round % 40) { await Task.yield() }
            load.cancel()
            switch await load.result {
            case .success(let response): #expect((response as? HTTPURLResponse)?.statusCode == 200)
            case .failure(let error):
                #expect(error is CancellationError, "round \(round): \(error)")
                cancelled += 1
            }
        }
        #expect(cancelled > 0)
        // The loader still works.
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/hop0"))) { _, _ in }
    }

    @Test(arguments: ["file:///etc/passwd", "data:text/plain,root", "ftp://127.0.0.1/etc/passwd"])
    func aRedirectToAnotherSchemeIsRefused(location: String) async throws {
        server.redirect(path: "/r", to: location)
        let sink = ChunkSink()
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/r")), didReceive: sink.append)
        }
        #expect(error?.code == .unsupportedURL)
        #expect(sink.chunks == 0)
        #expect(server.statistics.totalRequests == 1, "no second request")
    }

    @Test func aRedirectLoopStopsAfterTwentyRedirects() async throws {
        server.redirect(path: "/loop", to: "/loop")
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/loop"))) { _, _ in }
        }
        #expect(error?.code == .httpTooManyRedirects)
        #expect(server.requestCount(for: "/loop") == 21)
    }

    // MARK: Broken servers

    @Test func truncatedBodyIsIncompleteBody() async throws {
        let body = LoaderTests.bytes(count: 100_000, seed: 5)
        server.serve(path: "/t", data: body)
        server.truncate(path: "/t", after: 30_000)
        let sink = ChunkSink()
        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/t")), didReceive: sink.append)
        }
        guard case .incompleteBody(let expected, let received)? = error else {
            Issue.record("expected .incompleteBody, got \(String(describing: error))")
            return
        }
        #expect(expected == Int64(body.count))
        #expect(received == Int64(sink.data.count))
        #expect(sink.data == body.prefix(sink.data.count))
    }

    @Test func aChunkedBodyCutShortIsNetworkConnectionLost() async throws {
        server.serve(path: "/ct", data: LoaderTests.bytes(count: 100_000, seed: 5))
        server.setChunked(for: "/ct", chunkSize: 10_000)
        server.truncate(path: "/ct", after: 30_000)
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/ct"))) { _, _ in }
        }
        #expect(error?.code == .networkConnectionLost)
    }

    /// A head that never ends, then a clean close. FoundationNetworking traps on these
    /// ("Transfer completed, but there's no response"), killing the process; here they are a
    /// transient error. Nothing at all is libcurl's "empty reply", named as
    /// FoundationNetworking names it.
    /// A head libcurl cannot make sense of (a `Content-Length` that is not a number) is a bad
    /// server response, not an unknown error.
    @Test(arguments: ["abc", "-5"])
    func anUnreadableContentLengthIsABadServerResponse(length: String) async throws {
        server.respondRaw(path: "/weird", bytes: Data("HTTP/1.1 200 OK\r\nContent-Length: \(length)\r\n\r\nabcdef".utf8))
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/weird"))) { _, _ in }
        }
        #expect(error?.code == .badServerResponse, "\(String(describing: error))")
    }

    @Test(arguments: [
        "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 10", "",
    ])
    func aResponseHeadCutShortIsATypedError(raw: String) async throws {
        server.respondRaw(path: "/cut", bytes: Data(raw.utf8))
        let sink = ChunkSink()
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/cut")), didReceive: sink.append)
        }
        #expect(error?.code == .badServerResponse, "\(String(describing: error))")
        #expect(sink.chunks == 0)
        #expect(ImagePipeline.RetryPolicy.isTransient(.dataLoadingFailed(try #require(error))))

        // After a redirect too: the error is about the head cut short, not the redirect.
        server.redirect(path: "/to-cut", to: "/cut")
        let redirected = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/to-cut")), didReceive: sink.append)
        }
        #expect(redirected?.code == .badServerResponse, "\(String(describing: redirected))")

        // The loader goes on.
        server.serve(path: "/ok", data: Data("ok".utf8))
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/ok"))) { _, _ in }
    }

    /// A complete head without `Content-Length`: the body runs to the close, and is whole.
    @Test func aBodyEndedByTheCloseIsWhole() async throws {
        server.respondRaw(path: "/eof", bytes: Data("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n\r\nabcdef".utf8))
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/eof")), didReceive: sink.append)
        #expect(response.mimeType == "image/png")
        #expect(sink.data == Data("abcdef".utf8))
    }

    @Test func aClosedPortIsCannotConnectToHost() async throws {
        let closed = try LoopbackServer()
        let url = closed.url(for: "/x")
        closed.stop()
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        #expect(error?.code == .cannotConnectToHost)
    }

    // MARK: Timeouts

    /// A fractional request timeout is kept (from the loader or the request): a quick load,
    /// through a redirect too, succeeds; a held request, or a body that stalls, times out.
    @Test(arguments: [false, true])
    func aFractionalRequestTimeoutIsKept(onTheRequest: Bool) async throws {
        let body = LoaderTests.bytes(count: 64 * 1024, seed: 5)
        server.serve(path: "/quick", data: body)
        server.redirect(path: "/hop", to: "/quick")
        server.serve(path: "/never", data: body)
        server.hold("/never")
        server.serve(path: "/stall", data: body)
        server.holdBody("/stall", after: 1_000)
        defer { server.releaseAll() }
        let loader = onTheRequest ? self.loader : CurlDataLoader(requestTimeout: 0.5)
        func request(_ path: String) -> URLRequest {
            var request = URLRequest(url: server.url(for: path))
            if onTheRequest { request.timeoutInterval = 0.5 }
            return request
        }

        for path in ["/quick", "/hop"] {
            let sink = ChunkSink()
            _ = try await loader.loadData(for: request(path), didReceive: sink.append)
            #expect(sink.data == body, "\(path)")
        }
        for path in ["/never", "/stall"] {
            let start = ContinuousClock.now
            let error = await #expect(throws: URLError.self, "\(path)") {
                try await loader.loadData(for: request(path)) { _, _ in }
            }
            #expect(error?.code == .timedOut, "\(path)")
            #expect(ContinuousClock.now - start >= .milliseconds(500), "\(path)")
        }
    }

    @Test func resourceTimeoutEndsALoadThatNeverFinishes() async throws {
        server.serve(path: "/slow", data: Data("body".utf8))
        server.hold("/slow")
        defer { server.release("/slow") }
        let loader = CurlDataLoader(requestTimeout: 120, resourceTimeout: 0.5)
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/slow"))) { _, _ in }
        }
        #expect(error?.code == .timedOut)
        #expect(server.requestCount(for: "/slow") == 1)
    }

    // MARK: Cancellation

    @Test func cancellingTheTaskMidBodyCancelsTheTransfer() async throws {
        let size = 8 << 20
        server.serve(path: "/big", data: Data(repeating: 7, count: size))
        server.holdBody("/big", after: 4096)
        let received = Atomic<Int>(0)
        let (firstChunk, firstChunkSink) = AsyncStream.makeStream(of: Void.self)
        let load = Task { [loader, server] in
            defer { firstChunkSink.finish() }  // also when the load fails: the wait below ends
            return try await loader.loadData(for: URLRequest(url: server.url(for: "/big"))) { data, _ in
                received.add(data.count, ordering: .relaxed)
                firstChunkSink.yield()
            }
        }
        for await _ in firstChunk { break }
        load.cancel()
        await #expect(throws: CancellationError.self) { try await load.value }
        // The transfer is over when the call returns: the paused server meets a closed
        // connection, never a client that reads the rest.
        server.release("/big")
        try await server.waitUntil { $0.clientDisconnects == 1 || $0.inFlightRequests == 0 }
        let statistics = server.statistics
        #expect(statistics.clientDisconnects == 1, "\(statistics)")
        #expect(statistics.bodyBytesSent < size)
        #expect(received.load(ordering: .relaxed) >= 1)
    }

    @Test func cancellingAHeldRequestDisconnects() async throws {
        server.serve(path: "/held", data: LoaderTests.bytes(count: 100_000, seed: 3))
        server.hold("/held")
        let sink = ChunkSink()
        let load = Task { [loader, server] in
            try await loader.loadData(for: URLRequest(url: server.url(for: "/held")), didReceive: sink.append)
        }
        try await server.waitForRequests(path: "/held", count: 1)
        load.cancel()
        await #expect(throws: CancellationError.self) { try await load.value }
        try await server.waitUntil { $0.clientDisconnects == 1 }
        #expect(sink.chunks == 0)
        #expect(server.statistics.bodyBytesSent == 0)
    }

    @Test func cancelledBeforeStartingSendsNothing() async throws {
        server.serve(path: "/x", data: Data("x".utf8))
        let load = Task { [loader, server] in
            withUnsafeCurrentTask { $0?.cancel() }
            return try await loader.loadData(for: URLRequest(url: server.url(for: "/x"))) { _, _ in }
        }
        await #expect(throws: CancellationError.self) { try await load.value }
        #expect(server.statistics.totalRequests == 0)
    }

    @Test func throwingFromDidReceiveStopsTheLoad() async throws {
        struct TooLarge: Error, Equatable {}
        server.serve(path: "/big", data: Data(repeating: 0xA5, count: 1024 * 1024))
        server.holdBody("/big", after: 300_000)
        let limit = 200_000
        let calls = Mutex((bytes: 0, afterThrow: 0))

        await #expect(throws: TooLarge.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/big"))) { chunk, _ in
                let over = calls.withLock { state -> Bool in
                    if state.bytes > limit { state.afterThrow += 1 }
                    state.bytes += chunk.count
                    return state.bytes > limit
                }
                if over { throw TooLarge() }
            }
        }
        #expect(calls.withLock { $0.afterThrow } == 0, "no chunk is delivered after didReceive threw")
        try await server.waitUntil { $0.clientDisconnects == 1 }
        #expect(server.statistics.bodyBytesSent == 300_000)

        server.serve(path: "/small", data: Data("ok".utf8))
        let sink = ChunkSink()
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/small")), didReceive: sink.append)
        #expect(sink.data == Data("ok".utf8))
    }

    // MARK: Concurrency

    /// Twenty paths at once, three loads each: every body arrives whole, over at most six
    /// connections (the per-host limit).
    @Test func concurrentLoadsAllSucceedWithinTheConnectionLimit() async throws {
        let paths = (0..<20).map { "/image-\($0).jpg" }
        var bodies: [String: Data] = [:]
        for (i, path) in paths.enumerated() {
            let body = LoaderTests.bytes(count: 5_000 + i * 37_000, seed: UInt64(100 + i))
            bodies[path] = body
            server.serve(path: path, data: body, contentType: "image/jpeg")
            server.hold(path)
        }
        let limit = CurlDataLoader.defaultMaximumConnectionsPerHost
        try await withThrowingTaskGroup(of: (String, Data).self) { group in
            for _ in 0..<3 {
                for path in paths {
                    group.addTask { [loader, server] in
                        let sink = ChunkSink()
                        _ = try await loader.loadData(for: URLRequest(url: server.url(for: path)), didReceive: sink.append)
                        return (path, sink.data)
                    }
                }
            }
            // Every connection the loader may open is busy with a held request.
            try await server.waitUntil { $0.heldRequests == limit }
            server.releaseAll()
            var count = 0
            for try await (path, data) in group {
                #expect(data == bodies[path], "body of \(path)")
                count += 1
            }
            #expect(count == 60)
        }
        let stats = server.statistics
        #expect(stats.totalRequests == 60)
        #expect(stats.peakConnections == limit)
        #expect(stats.peakInFlightRequests <= limit)
    }

    // MARK: Local URLs and the pipeline

    @Test func fileAndDataURLsAreReadLocally() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("curl-loader-\(UUID().uuidString).png")
        try Data("png bytes".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: file), didReceive: sink.append)
        #expect(sink.data == Data("png bytes".utf8))
        #expect(response.mimeType == "image/png")

        let inline = ChunkSink()
        _ = try await loader.loadData(for: URLRequest(url: URL(string: "data:text/plain,hi")!), didReceive: inline.append)
        #expect(inline.data == Data("hi".utf8))

        let locked = CurlDataLoader(allowsLocalFiles: false)
        let denied = await #expect(throws: DataLoader.Error.self) {
            try await locked.loadData(for: URLRequest(url: file)) { _, _ in }
        }
        guard case .localFileAccessDenied? = denied else {
            Issue.record("expected .localFileAccessDenied, got \(String(describing: denied))")
            return
        }
        let ftp = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: URL(string: "ftp://127.0.0.1/x")!)) { _, _ in }
        }
        #expect(ftp?.code == .unsupportedURL)
    }

    @Test func aPipelineLoadsThroughIt() async throws {
        let body = LoaderTests.bytes(count: 10_000, seed: 4)
        server.serve(path: "/p", data: body)
        let pipeline = ImagePipeline(configuration: .init(dataLoader: CurlDataLoader()))
        let (data, response) = try await pipeline.data(for: ImageRequest(url: server.url(for: "/p")))
        #expect(data == body)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
    }

    // MARK: Header blocks

    @Test func headerBlocksStartAgainAtEachStatusLine() throws {
        var block = CurlDataLoader.HeaderBlock()
        #expect(block.feed("HTTP/1.1 103 Early Hints\r\n") == nil)
        #expect(block.feed("Link: </a.css>\r\n") == nil)
        #expect(block.feed("\r\n")?.status == 103)
        #expect(block.feed("HTTP/2 200 \r\n") == nil)
        #expect(block.feed("Set-Cookie: a=1\r\n") == nil)
        #expect(block.feed("set-cookie: b=2\r\n") == nil)
        #expect(block.feed("X-Long: one\r\n") == nil)
        #expect(block.feed("\t two\r\n") == nil)
        let ended = block.feed("\r\n")
        let head = try #require(ended)
        #expect(head.status == 200)
        #expect(head.version == "HTTP/2")
        #expect(head.joinedFields == ["Set-Cookie": "a=1, b=2", "X-Long": "one two"])
        // Trailers or stray lines with no status line before them start nothing.
        #expect(block.feed("X-Trailer: 1\r\n") == nil)
        #expect(block.feed("\r\n") == nil)
    }
}
#endif
