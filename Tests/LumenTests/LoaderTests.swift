import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
import Lumen
import LumenTestSupport

/// `DataLoader` against the loopback server; the scenarios both HTTP loaders share run against
/// `CurlDataLoader` too (see ``LoaderKind``).
@Suite(.timeLimit(.minutes(1)))
struct LoaderTests {
    let server: LoopbackServer
    let loader = DataLoader()

    init() throws {
        server = try LoopbackServer()
    }

    @Test(arguments: LoaderKind.available)
    func largeBodyArrivesInOrderInSeveralChunks(kind: LoaderKind) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 3 * 1024 * 1024, seed: 1)
        server.serve(path: "/large.jpg", data: body, contentType: "image/jpeg")
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/large.jpg")), didReceive: sink.append)

        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(http.url == server.url(for: "/large.jpg"))
        #expect(http.expectedContentLength == Int64(body.count))
        #expect(http.mimeType == "image/jpeg")
        #expect(sink.data == body)
        // libcurl hands bodies over in buffers far smaller than 3 MB.
        #expect(sink.chunks > 1)
        #expect(sink.responsesMatched(http))
        #expect(server.statistics.totalRequests == 1)
    }

    /// `http:/host/…`, `http:///host/…`, `http:host/…` name no host as `URL` reads them (and
    /// as the pipeline keys them), though libcurl would find one — and credentials — in the
    /// path: refused as `.badURL` before anything is sent.
    @Test(arguments: LoaderKind.available, ["http:/u:pw@127.0.0.1:PORT/a.jpg", "http:///u:pw@127.0.0.1:PORT/a.jpg", "HTTPS:/127.0.0.1:PORT/a.jpg", "http:u:pw@127.0.0.1:PORT/a.jpg"])
    func aURLWithoutAHostIsRefused(kind: LoaderKind, template: String) async throws {
        server.serve(path: "/a.jpg", data: Data([1, 2, 3]), contentType: "image/jpeg")
        let url = try #require(URL(string: template.replacingOccurrences(of: "PORT", with: "\(server.baseURL.port!)")))
        let error = await #expect(throws: URLError.self) {
            try await kind.make().loadData(for: URLRequest(url: url)) { _, _ in }
        }
        #expect(error?.code == .badURL, "\(String(describing: error))")
        #expect(server.statistics.totalConnections == 0)
    }

    @Test(arguments: LoaderKind.available)
    func chunksArriveWhileTheDownloadIsStillRunning(kind: LoaderKind) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 1_000_000, seed: 7)
        server.serve(path: "/progressive", data: body)
        server.holdBody("/progressive", after: 400_000)
        let (chunks, chunkSink) = AsyncStream.makeStream(of: Int.self)
        let load = Task { [loader, server] in
            let sink = ChunkSink()
            _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/progressive"))) { chunk, response in
                sink.append(chunk, response)
                chunkSink.yield(chunk.count)
            }
            chunkSink.finish()
            return sink.data
        }
        // The first 400,000 bytes reach the caller while the server withholds the rest.
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

    @Test(arguments: LoaderKind.available, [404, 500, 503])
    func nonSuccessStatusIsTypedError(kind: LoaderKind, status: Int) async throws {
        let loader = kind.make()
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
        #expect(error?.statusCode == status)
        #expect(sink.chunks == 0, "a rejected response's body is not delivered")
    }

    @Test(arguments: LoaderKind.available)
    func notModifiedPassesThroughForConditionalRequest(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/e", data: Self.bytes(count: 10_000, seed: 2), etag: "\"abc\"")
        let url = server.url(for: "/e")

        var conditional = URLRequest(url: url)
        conditional.setValue("\"abc\"", forHTTPHeaderField: "If-None-Match")
        let sink = ChunkSink()
        let response = try await loader.loadData(for: conditional, didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 304)
        #expect(sink.chunks == 0)

        let modified = LoopbackServer.httpDate(Date(timeIntervalSince1970: 1_600_000_000))
        server.serve(path: "/m", data: Data("m".utf8), lastModified: modified)
        var sinceRequest = URLRequest(url: server.url(for: "/m"))
        sinceRequest.setValue(modified, forHTTPHeaderField: "If-Modified-Since")
        let since = try await loader.loadData(for: sinceRequest, didReceive: sink.append)
        #expect((since as? HTTPURLResponse)?.statusCode == 304)
        #expect(server.statistics.notModifiedResponses == 2)
        // The conditional headers reached the server as set.
        #expect(server.recordedRequests(for: "/e").first?.header("If-None-Match") == "\"abc\"")
        #expect(server.recordedRequests(for: "/m").first?.header("If-Modified-Since") == modified)

        // A 304 to an unconditional request is an error like any other non-2xx status.
        server.respond(path: "/e", status: 304)
        await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: url), didReceive: sink.append)
        }
    }

    /// An interim `100 Continue` or `103 Early Hints` before the response is not the response.
    /// FoundationNetworking hands it to the delegate first, and the load failed with
    /// `.statusCode(103)` although a good 200 followed.
    @Test(arguments: LoaderKind.available, [100, 103])
    func interimResponseBeforeTheResponseIsSkipped(kind: LoaderKind, status: Int) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 50_000, seed: 3)
        server.serve(path: "/hinted.jpg", data: body, contentType: "image/jpeg")
        server.sendInformational(status, for: "/hinted.jpg")
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/hinted.jpg")), didReceive: sink.append)

        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(sink.data == body)
        #expect(sink.responsesMatched(http))
    }

    /// A `206 Partial Content` answering a request that asked for no range is a part of the
    /// image, not the image: a typed error (it was returned as the body, and decoded).
    @Test(arguments: LoaderKind.available)
    func partialContentForAWholeRequestIsATypedError(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/part", data: Data("body".utf8))
        server.respond(path: "/part", status: 206)

        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/part"))) { _, _ in }
        }
        #expect(error?.statusCode == 206)

        // Asked for: accepted.
        var ranged = URLRequest(url: server.url(for: "/part"))
        ranged.setValue("bytes=0-9", forHTTPHeaderField: "Range")
        let response = try await loader.loadData(for: ranged) { _, _ in }
        #expect((response as? HTTPURLResponse)?.statusCode == 206)
    }

    /// `timeoutIntervalForResource` bounds the whole load. FoundationNetworking ignores it: a
    /// held request (or a server trickling bytes, which the request timeout never catches)
    /// kept the load waiting for ever.
    @Test(arguments: LoaderKind.available)
    func resourceTimeoutEndsALoadThatNeverFinishes(kind: LoaderKind) async throws {
        server.serve(path: "/slow", data: Data("body".utf8))
        server.hold("/slow")
        defer { server.release("/slow") }
        let loader = kind.make(requestTimeout: 120, resourceTimeout: 1)

        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/slow"))) { _, _ in }
        }
        #expect(error?.code == .timedOut)
        #expect(server.requestCount(for: "/slow") == 1)
    }

    /// FoundationNetworking keeps only the whole seconds of a request timeout (0.9 s became 0
    /// and timed every load out at once; 1.5 s became 1 s). The loader keeps a fractional one
    /// itself, from the session's configuration or the request's own: a server that answers
    /// at once is loaded, through a redirect too; one that never answers, or stops in the
    /// middle of the body, times out.
    @Test(arguments: LoaderKind.available, [false, true])
    func aFractionalRequestTimeoutIsKept(kind: LoaderKind, onTheRequest: Bool) async throws {
        let body = LoaderTests.bytes(count: 64 * 1024, seed: 5)
        server.serve(path: "/quick", data: body)
        server.redirect(path: "/hop", to: "/quick")
        server.serve(path: "/never", data: body)
        server.hold("/never")
        server.serve(path: "/stall", data: body)
        server.holdBody("/stall", after: 1_000)
        defer { server.releaseAll() }
        let loader = onTheRequest ? kind.make() : kind.make(requestTimeout: 0.9)
        func request(_ path: String) -> URLRequest {
            var request = URLRequest(url: server.url(for: path))
            if onTheRequest { request.timeoutInterval = 0.9 }
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
            #expect(ContinuousClock.now - start >= .milliseconds(900), "\(path): not before the timeout")
        }
    }

    /// A request's method and body reach the server as given; a body-less method sends none,
    /// and a POST without a body sends an empty one.
    @Test(arguments: LoaderKind.available, [("POST", true), ("PUT", true), ("PATCH", true), ("DELETE", false), ("POST", false)])
    func theRequestsMethodAndBodyAreSent(kind: LoaderKind, method: (name: String, hasBody: Bool)) async throws {
        let loader = kind.make()
        let answer = Self.bytes(count: 3_000, seed: 21)
        server.allow(methods: [method.name], for: "/m")
        server.serve(path: "/m", data: answer)
        // Binary, with zero bytes in it: sent with its length, not as a C string.
        let body = method.hasBody ? Data([0x7B, 0x00, 0xFF, 0x0A]) + Data("\(method.name)".utf8) : nil
        var request = URLRequest(url: server.url(for: "/m"))
        request.httpMethod = method.name
        request.httpBody = body
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        let sink = ChunkSink()
        let response = try await loader.loadData(for: request, didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(sink.data == answer)
        let recorded = try #require(server.recordedRequests(for: "/m").first)
        #expect(recorded.method == method.name)
        #expect(recorded.body == body ?? Data())
        #expect(recorded.header("Content-Type") == "application/octet-stream")
        if let body { #expect(recorded.header("Content-Length") == String(body.count)) }
        #expect(recorded.header("Transfer-Encoding") == nil)
    }

    /// A `301`, `302` or `303` to a POST is followed with a GET and no body.
    @Test(arguments: LoaderKind.available, [301, 302, 303])
    func aRedirectedPostBecomesAGet(kind: LoaderKind, status: Int) async throws {
        let loader = kind.make()
        let answer = Self.bytes(count: 2_000, seed: 22)
        server.allow(methods: ["POST"], for: "/form")
        server.redirect(path: "/form", to: "/result", status: status)
        server.serve(path: "/result", data: answer)
        var request = URLRequest(url: server.url(for: "/form"))
        request.httpMethod = "POST"
        request.httpBody = Data("a=1".utf8)
        let sink = ChunkSink()
        _ = try await loader.loadData(for: request, didReceive: sink.append)
        #expect(sink.data == answer)
        #expect(server.recordedRequests(for: "/form").first?.method == "POST")
        let followed = try #require(server.recordedRequests(for: "/result").first)
        #expect(followed.method == "GET")
        #expect(followed.body.isEmpty)
    }

    @Test(arguments: LoaderKind.available)
    func customValidatorCanAcceptErrorStatuses(kind: LoaderKind) async throws {
        let lenient = kind.make(validate: { _, _ in })
        let sink = ChunkSink()
        let response = try await lenient.loadData(for: URLRequest(url: server.url(for: "/nothing")), didReceive: sink.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 404)
        #expect(sink.chunks > 0, "the error page's body is delivered")
    }

    @Test(arguments: LoaderKind.available)
    func cancellingTheTaskCancelsTheTransfer(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/held", data: Self.bytes(count: 100_000, seed: 3))
        server.hold("/held")
        let sink = ChunkSink()
        let load = Task { [loader, server] in
            try await loader.loadData(for: URLRequest(url: server.url(for: "/held")), didReceive: sink.append)
        }
        try await server.waitForRequests(path: "/held", count: 1)
        load.cancel()

        await #expect(throws: CancellationError.self) { try await load.value }
        // The connection is closed under the held request: the server notices.
        try await server.waitUntil { $0.clientDisconnects == 1 }
        #expect(sink.chunks == 0)
        #expect(server.statistics.bodyBytesSent == 0)
    }

    @Test(arguments: LoaderKind.available)
    func cancelledBeforeStartingSendsNothing(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/x", data: Data("x".utf8))
        let load = Task { [loader, server] in
            withUnsafeCurrentTask { $0?.cancel() }
            return try await loader.loadData(for: URLRequest(url: server.url(for: "/x"))) { _, _ in }
        }
        await #expect(throws: CancellationError.self) { try await load.value }
        #expect(server.statistics.totalRequests == 0)
    }

    @Test(arguments: LoaderKind.available)
    func throwingFromDidReceiveStopsTheLoad(kind: LoaderKind) async throws {
        let loader = kind.make()
        struct TooLarge: Error, Equatable {}
        // The server pauses mid-body, so the transfer is still running when didReceive throws.
        let size = 1024 * 1024
        server.serve(path: "/big", data: Data(repeating: 0xA5, count: size))
        server.holdBody("/big", after: 300_000)
        let limit = 200_000
        let calls = Mutex((count: 0, bytes: 0, afterThrow: 0))

        await #expect(throws: TooLarge.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/big"))) { chunk, _ in
                let over = calls.withLock { state -> Bool in
                    if state.bytes > limit { state.afterThrow += 1 }
                    state.count += 1
                    state.bytes += chunk.count
                    return state.bytes > limit
                }
                if over { throw TooLarge() }
            }
        }
        #expect(calls.withLock { $0.afterThrow } == 0, "no chunk is delivered after didReceive threw")
        // The transfer was cancelled: the client closed the connection mid-body.
        try await server.waitUntil { $0.clientDisconnects == 1 }
        #expect(server.statistics.bodyBytesSent == 300_000)

        // The loader is still usable afterwards.
        server.serve(path: "/small", data: Data("ok".utf8))
        let sink = ChunkSink()
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/small")), didReceive: sink.append)
        #expect(sink.data == Data("ok".utf8))
    }

    @Test(arguments: LoaderKind.available)
    func truncatedBodyIsAnError(kind: LoaderKind) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 100_000, seed: 5)
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
        #expect(sink.data.count <= 30_000)
        #expect(sink.data == body.prefix(sink.data.count))
    }

    /// A gzip body cut short by the server's close (its `Content-Length` counts the whole
    /// gzip) is a lost connection, which the pipeline retries, not an unknown error; the
    /// length is not comparable with the bytes decoded, so it is not `.incompleteBody`.
    @Test(arguments: LoaderKind.available)
    func aContentEncodedBodyCutShortIsALostConnection(kind: LoaderKind) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 60_000, seed: 9)
        let gzip = Self.storedGzip(body)
        server.serve(path: "/gz", data: gzip, headers: ["Content-Encoding": "gzip"])
        // Whole: decoded by libcurl.
        let sink = ChunkSink()
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/gz")), didReceive: sink.append)
        #expect(sink.data == body)

        server.truncate(path: "/gz", after: gzip.count / 2)
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/gz"))) { _, _ in }
        }
        #expect(error?.code == .networkConnectionLost, "\(String(describing: error))")
    }

    /// A chunked body's `Content-Length` is ignored, as libcurl ignores it (RFC 9112, 6.3): a
    /// complete chunked body is not "incomplete" for a larger length, nor is the load refused.
    @Test(arguments: LoaderKind.available, [2, 1])
    func aChunkedBodyIgnoresAContentLength(kind: LoaderKind, factor: Int) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 50_000, seed: 3)
        server.serve(path: "/c", data: body, headers: ["Content-Length": String(body.count * factor)])
        server.setChunked(for: "/c", chunkSize: 7_000)
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/c")), didReceive: sink.append)

        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(sink.data == body)
    }

    /// `data` as a gzip stream of stored (uncompressed) deflate blocks.
    static func storedGzip(_ data: Data) -> Data {
        var out = Data([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])
        var offset = 0
        repeat {
            let count = min(65_535, data.count - offset)
            let isLast = offset + count == data.count
            out.append(isLast ? 1 : 0)
            out.append(contentsOf: [UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF)])
            out.append(data[data.startIndex + offset ..< data.startIndex + offset + count])
            offset += count
        } while offset < data.count
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in data {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        crc = ~crc
        for value in [crc, UInt32(truncatingIfNeeded: data.count)] {
            out.append(contentsOf: [UInt8(value & 0xFF), UInt8((value >> 8) & 0xFF), UInt8((value >> 16) & 0xFF), UInt8(value >> 24)])
        }
        return out
    }

    /// Each transport error is named in the pipeline's description, the TLS ones included: on
    /// Linux `NSURLErrorSecureConnectionFailed` (-1201) is not `URLError(.secureConnectionFailed)`'s
    /// code (-1200), and a lookup by the constants described a failed handshake as "failed".
    @Test(arguments: [(URLError.Code.secureConnectionFailed, "secure connection failed"),
                      (.serverCertificateUntrusted, "server certificate untrusted"),
                      (.timedOut, "timed out"), (.badServerResponse, "bad server response")])
    func aTransportErrorIsNamed(code: URLError.Code, name: String) {
        let description = ImagePipeline.Error.dataLoadingFailed(URLError(code)).description
        #expect(description.contains("URL error \(code.rawValue), \(name)"), "\(description)")
    }

    /// An `https` URL whose server does not speak TLS (the plain loopback server answers the
    /// ClientHello with a 400): a failed secure connection, from either loader.
    @Test(arguments: LoaderKind.available)
    func aServerThatDoesNotSpeakTLSIsASecureConnectionFailure(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/s", data: Data("plain".utf8))
        let url = try #require(URL(string: "https://127.0.0.1:\(server.port)/s"))
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        #expect(error?.code == .secureConnectionFailed, "\(String(describing: error)) \(String(describing: error?.userInfo))")
    }

    #if os(Linux)
    /// An `https` server whose certificate the system's store does not vouch for (a
    /// self-signed one, through the test TLS proxy): `URLError(.serverCertificateUntrusted)`
    /// from either loader, and nothing reaches the server.
    @Test(arguments: LoaderKind.available)
    func anUntrustedCertificateIsServerCertificateUntrusted(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/s", data: Data("secret".utf8))
        let tls = try TLSProxy(forwardingTo: server)
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: tls.url(for: "/s"))) { _, _ in }
        }
        #expect(error?.code == .serverCertificateUntrusted, "\(String(describing: error)) \(String(describing: error?.userInfo))")
        #expect(server.requestCount(for: "/s") == 0)
    }
    #endif

    /// A body declared gzip that is not: libcurl cannot undo the encoding, and that is what
    /// the error says — not "incomplete body" (the wire length is not the decoded length).
    @Test func undecodableContentEncodingIsNotCalledAnIncompleteBody() async throws {
        server.serve(path: "/z", data: Self.bytes(count: 5_000, seed: 7), headers: ["Content-Encoding": "gzip"])
        let sink = ChunkSink()
        let error = await #expect(throws: (any Error).self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/z")), didReceive: sink.append)
        }
        #expect(error is URLError, "\(String(describing: error))")
        let description = ImagePipeline.Error.dataLoadingFailed(try #require(error)).description
        #expect(description.contains("URL error") && !description.contains("Error Domain="), "\(description)")
    }

    /// Once `loadData` has thrown `CancellationError`, the transfer is over: releasing the
    /// paused server meets a closed connection, never a client that reads the whole body.
    /// (FoundationNetworking stops a cancelled transfer asynchronously; without waiting for
    /// the session's "done", about one cancellation in a hundred let the body stream in.)
    @Test(arguments: LoaderKind.available, 0..<24)
    func aCancelledLoadsTransferNeverOutlivesTheCall(kind: LoaderKind, round: Int) async throws {
        let loader = kind.make()
        let size = 8 << 20
        server.serve(path: "/big", data: Data(repeating: 7, count: size))
        server.holdBody("/big", after: 4096)
        let received = Atomic<Int>(0)
        let load = Task { [loader, server] in
            try await loader.loadData(for: URLRequest(url: server.url(for: "/big"))) { data, _ in
                received.add(data.count, ordering: .relaxed)
            }
        }
        try await server.waitUntil { $0.pausedBodies == 1 }
        // Odd rounds cancel at once; even ones once the first chunk arrived (polling by
        // yielding: a busy pool is what widens FoundationNetworking's window).
        if round % 2 == 0 { while received.load(ordering: .relaxed) < 4096 { await Task.yield() } }
        load.cancel()
        await #expect(throws: CancellationError.self) { try await load.value }
        server.release("/big")
        try await server.waitUntil { $0.clientDisconnects == 1 || $0.inFlightRequests == 0 }
        let statistics = server.statistics
        #expect(statistics.clientDisconnects == 1, "\(statistics)")
        #expect(statistics.bodyBytesSent < size)
    }

    @Test(arguments: LoaderKind.available)
    func chunkedBodyOfUnknownLength(kind: LoaderKind) async throws {
        let loader = kind.make()
        let body = Self.bytes(count: 700_000, seed: 6)
        server.serve(path: "/c", data: body, contentType: "image/png")
        server.setChunked(for: "/c", chunkSize: 10_000)
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/c")), didReceive: sink.append)
        #expect(response.expectedContentLength == -1)
        #expect(sink.data == body)
    }

    @Test(arguments: LoaderKind.available)
    func concurrentLoadsShareTheConnectionLimit(kind: LoaderKind) async throws {
        let loader = kind.make()
        let paths = (0..<20).map { "/image-\($0).jpg" }
        var bodies: [String: Data] = [:]
        for (i, path) in paths.enumerated() {
            let body = Self.bytes(count: 5_000 + i * 37_000, seed: UInt64(100 + i))
            bodies[path] = body
            server.serve(path: path, data: body, contentType: "image/jpeg")
            server.hold(path)
        }
        let limit = kind.connectionLimit
        #expect(limit == 6)

        try await withThrowingTaskGroup(of: (String, Data).self) { group in
            for round in 0..<3 {
                for path in paths {
                    group.addTask { [loader, server] in
                        let sink = ChunkSink()
                        _ = try await loader.loadData(for: URLRequest(url: server.url(for: path)), didReceive: sink.append)
                        return (path, sink.data)
                    }
                }
                _ = round
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
        for path in paths { #expect(stats.requests(for: path) == 3) }
        #expect(stats.peakConnections == limit)
        #expect(stats.peakInFlightRequests <= limit)
    }

    /// Deterministic pseudo-random bytes (SplitMix64).
    static func bytes(count: Int, seed: UInt64) -> Data {
        var state = seed
        var data = Data(count: count)
        data.withUnsafeMutableBytes { (raw: UnsafeMutableRawBufferPointer) in
            for i in 0..<count {
                if i % 8 == 0 { state &+= 0x9E37_79B9_7F4A_7C15 }
                var z = state
                z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                z ^= z >> 31
                raw[i] = UInt8(truncatingIfNeeded: z >> ((i % 8) * 8))
            }
        }
        return data
    }
}

/// Collects the chunks a load delivers.
final class ChunkSink: Sendable {
    private let state = Mutex((data: Data(), chunks: 0, urls: Set<String>()))

    var data: Data { state.withLock { $0.data } }
    var chunks: Int { state.withLock { $0.chunks } }

    @Sendable func append(_ chunk: Data, _ response: URLResponse) {
        state.withLock {
            $0.data.append(chunk)
            $0.chunks += 1
            $0.urls.insert(response.url?.absoluteString ?? "")
        }
    }

    /// Whether every chunk came with a response for the same URL as `response`.
    func responsesMatched(_ response: URLResponse) -> Bool {
        state.withLock { $0.urls == [response.url?.absoluteString ?? ""] }
    }
}
