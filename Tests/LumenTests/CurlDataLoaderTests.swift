#if os(Linux)
import CCurl
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@testable import Lumen
import LumenTestSupport

/// `CurlDataLoader` against the loopback server: what only it does, and the responses that
/// FoundationNetworking cannot survive. The scenarios both loaders share (bodies, statuses,
/// redirects, timeouts, cancellation, the connection limit) run in `LoaderTests` and
/// `LoaderRedirectTests` for every ``LoaderKind``.
@Suite(.timeLimit(.minutes(1)))
struct CurlDataLoaderTests {
    let server: LoopbackServer
    let loader = CurlDataLoader()

    init() throws {
        server = try LoopbackServer()
    }

    // MARK: Bodies

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

        // A method that is not an HTTP token, and a body stream: refused before anything is sent.
        request.httpMethod = "GET /x HTTP/1.1\r\nX:"
        let notAToken = await #expect(throws: URLError.self) { try await loader.loadData(for: request) { _, _ in } }
        #expect(notAToken?.code == .badURL)
        request.httpMethod = "POST"
        request.httpBodyStream = InputStream(data: Data("abc".utf8))
        let stream = await #expect(throws: URLError.self) { try await loader.loadData(for: request) { _, _ in } }
        #expect(stream?.code == .unsupportedURL)
        #expect(server.requestCount(for: "/h") == 2)
    }

    /// A `User-Agent` goes with every request (libcurl sends none of its own, and some servers
    /// refuse a request without one); the request's own wins, and a loader can send none.
    @Test func aUserAgentIsSentUnlessTheRequestHasOne() async throws {
        server.serve(path: "/ua", data: Data("12345".utf8))
        var request = URLRequest(url: server.url(for: "/ua"))
        _ = try await loader.loadData(for: request) { _, _ in }
        request.setValue("Thumbnailer/2.0", forHTTPHeaderField: "User-Agent")
        _ = try await loader.loadData(for: request) { _, _ in }
        _ = try await CurlDataLoader(userAgent: nil).loadData(for: URLRequest(url: server.url(for: "/ua"))) { _, _ in }
        let agents = server.recordedRequests(for: "/ua").map { $0.header("User-Agent") }
        #expect(agents == [CurlDataLoader.defaultUserAgent, "Thumbnailer/2.0", nil])
        #expect(CurlDataLoader.defaultUserAgent.hasSuffix(" Lumen libcurl/" + String(cString: curl_version_info(CURLVERSION_FIRST)!.pointee.version)))
    }

    // MARK: https

    /// Over TLS: a server whose certificate the trusted authorities vouch for loads (the
    /// body whole, the response's URL https); one they do not is
    /// `URLError(.serverCertificateUntrusted)` after a refused handshake, and not retried
    /// as if the network had failed.
    @Test func httpsLoadsWithATrustedCertificateAndFailsWithAnUntrustedOne() async throws {
        let body = LoaderTests.bytes(count: 400_000, seed: 31)
        server.serve(path: "/secure.jpg", data: body, contentType: "image/jpeg")
        let tls = try TLSProxy(forwardingTo: server)
        let url = tls.url(for: "/secure.jpg")

        let trusting = CurlDataLoader(trustedCertificates: tls.certificateFile)
        #expect(trusting.trustedCertificates == tls.certificateFile)
        let sink = ChunkSink()
        let response = try await trusting.loadData(for: URLRequest(url: url), didReceive: sink.append)
        #expect(sink.data == body)
        #expect(response.url == url)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(server.requestCount(for: "/secure.jpg") == 1)

        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        #expect(error?.code == .serverCertificateUntrusted, "\(String(describing: error))")
        #expect(!ImagePipeline.RetryPolicy.isTransient(.dataLoadingFailed(try #require(error))))
        #expect(tls.waitForFailedHandshakes(1) == 1)
        #expect(server.requestCount(for: "/secure.jpg") == 1, "nothing reached the server")
    }

    /// `DataLoader` names TLS failures from libcurl's messages (FoundationNetworking reports
    /// them as unknown errors): the certificate's, the handshake's, and nothing else — a
    /// connection lost after the handshake, or a host whose name says SSL, stays as it was.
    @Test(arguments: [
        ("SSL certificate problem: self-signed certificate", URLError.Code.serverCertificateUntrusted),
        ("SSL certificate problem: certificate has expired", .serverCertificateUntrusted),
        ("SSL certificate problem: unable to get local issuer certificate", .serverCertificateUntrusted),
        ("SSL: no alternative certificate subject name matches target host name 'a.test'", .serverCertificateUntrusted),
        ("OpenSSL/3.0.22: error:0A00010B:SSL routines::wrong version number", .secureConnectionFailed),
        ("OpenSSL SSL_connect: Connection reset by peer in connection to a.test:443", .secureConnectionFailed),
        ("SSL connect error", .secureConnectionFailed),
    ] as [(String, URLError.Code)])
    func dataLoaderNamesATLSFailureFromLibcurlsMessage(message: String, code: URLError.Code) {
        #expect(DataLoader.tlsFailure(URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: message])) == code)
    }

    @Test(arguments: [
        "OpenSSL SSL_read: Connection reset by peer, errno 104",
        "OpenSSL SSL_write: Broken pipe, errno 32",
        "Failed to connect to SSL-IMAGES.example port 443: No route to host",
        "Recv failure: Connection reset by peer",
    ])
    func dataLoaderLeavesOtherFailuresUnnamed(message: String) {
        #expect(DataLoader.tlsFailure(URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: message])) == nil)
    }

    /// A pipeline over https: its default decoder gets the bytes through TLS.
    @Test func aPipelineLoadsAnImageOverHTTPS() async throws {
        let png = try #require(Data(base64Encoded: "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAAABJRU5ErkJggg=="))
        server.serve(path: "/tiny.png", data: png, contentType: "image/png")
        let tls = try TLSProxy(forwardingTo: server)
        let pipeline = ImagePipeline(configuration: .init(dataLoader: CurlDataLoader(trustedCertificates: tls.certificateFile)))
        let image = try await pipeline.image(for: ImageRequest(url: tls.url(for: "/tiny.png"))).image
        #expect(image.width == 2 && image.height == 2)
    }

    /// A body libcurl would send with `Expect: 100-continue` (over 1 MiB in this libcurl, over
    /// 1 KiB in older ones) goes at once: the loopback server never sends `100 Continue`, so a
    /// load that waited for one would still succeed, a second later; the header shows it.
    @Test func aLargeBodyIsSentWithoutExpectContinue() async throws {
        server.allow(methods: ["POST"], for: "/upload")
        server.serve(path: "/upload", data: Data("ok".utf8))
        let body = LoaderTests.bytes(count: 1_500_000, seed: 12)
        var request = URLRequest(url: server.url(for: "/upload"))
        request.httpMethod = "POST"
        request.httpBody = body
        _ = try await loader.loadData(for: request) { _, _ in }
        let recorded = try #require(server.recordedRequests(for: "/upload").first)
        #expect(recorded.body == body)
        #expect(recorded.header("Expect") == nil)
    }

    /// GET, HEAD and POST are recognised in any case (sent in capitals, with their meaning:
    /// a lowercase `head` waits for no body); a GET's body is not sent.
    @Test func wellKnownMethodsInAnyCaseAndAGetsBody() async throws {
        server.allow(methods: ["POST"], for: "/w")
        server.serve(path: "/w", data: Data("12345".utf8))
        var request = URLRequest(url: server.url(for: "/w"))
        request.httpMethod = "head"
        let head = try await loader.loadData(for: request) { _, _ in }
        #expect(head.expectedContentLength == 5)
        request.httpMethod = "post"
        request.httpBody = Data("x=1".utf8)
        _ = try await loader.loadData(for: request) { _, _ in }
        request.httpMethod = "GET"
        _ = try await loader.loadData(for: request) { _, _ in }
        let recorded = server.recordedRequests(for: "/w")
        #expect(recorded.map(\.method) == ["HEAD", "POST", "GET"])
        #expect(recorded.map(\.body) == [Data(), Data("x=1".utf8), Data()])
        #expect(recorded.last?.header("Content-Length") == nil)
    }

    /// A method other than GET, HEAD and POST goes again, with its body, to wherever it is
    /// redirected (libcurl keeps a custom method across redirects; the body is kept with it).
    @Test(arguments: [301, 302, 303, 307, 308])
    func anotherMethodKeepsItsBodyAcrossRedirects(status: Int) async throws {
        server.allow(methods: ["PUT"], for: "/put")
        server.redirect(path: "/put", to: "/stored", status: status)
        server.allow(methods: ["PUT"], for: "/stored")
        server.serve(path: "/stored", data: Data("ok".utf8))
        var request = URLRequest(url: server.url(for: "/put"))
        request.httpMethod = "PUT"
        request.httpBody = Data("payload".utf8)
        _ = try await loader.loadData(for: request) { _, _ in }
        let followed = try #require(server.recordedRequests(for: "/stored").first)
        #expect(followed.method == "PUT")
        #expect(followed.body == Data("payload".utf8))
    }

    /// On Linux the pipeline's default loader is this one: a server that cuts its response head
    /// short fails that load with a typed error, where FoundationNetworking would trap and end
    /// the process (this test process with it).
    @Test func theDefaultPipelineSurvivesAResponseHeadCutShort() async throws {
        server.respondRaw(path: "/cut", bytes: Data("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n".utf8))
        let body = LoaderTests.bytes(count: 1_000, seed: 5)
        server.serve(path: "/fine", data: body)
        let configuration = ImagePipeline.Configuration()
        // Checked first: with FoundationNetworking the load below would end this process.
        try #require(configuration.dataLoader is CurlDataLoader)
        let pipeline = ImagePipeline(configuration: configuration)
        let error = await #expect(throws: ImagePipeline.Error.self) {
            try await pipeline.data(for: ImageRequest(url: server.url(for: "/cut")))
        }
        #expect(error?.code == .dataLoadingFailed)
        #expect((error?.underlyingError as? URLError)?.code == .badServerResponse)
        // The pipeline goes on loading.
        #expect(try await pipeline.data(for: ImageRequest(url: server.url(for: "/fine"))).0 == body)
    }

    // MARK: Redirects

    @Test func aRedirectLoopStopsAfterTwentyRedirects() async throws {
        server.redirect(path: "/loop", to: "/loop")
        let error = await #expect(throws: URLError.self) {
            try await loader.loadData(for: URLRequest(url: server.url(for: "/loop"))) { _, _ in }
        }
        #expect(error?.code == .httpTooManyRedirects)
        #expect(server.requestCount(for: "/loop") == 21)
    }

    // MARK: Broken servers

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

    /// An origin that sends bytes past a response's `Content-Length` after the client has
    /// read it spoils that kept-alive connection (libcurl 7.x keeps it and reads the leftovers
    /// as the next response's status line: "Received HTTP/0.9"); the next load goes again on
    /// a new connection instead of failing. Found by `lumen bench soak`'s lie-short fault.
    @Test func bytesLeftInAnIdleConnectionDoNotFailTheNextLoad() async throws {
        let origin = try SpoilingOrigin()
        defer { origin.stop() }
        let first = ChunkSink()
        _ = try await loader.loadData(for: URLRequest(url: origin.url("/first")), didReceive: first.append)
        #expect(first.data == SpoilingOrigin.body)
        await origin.sendLeftovers()
        let second = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: origin.url("/second")), didReceive: second.append)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(second.data == SpoilingOrigin.body)
        #expect(origin.connections == 2)
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

/// An HTTP/1.1 origin on 127.0.0.1 that answers every request with ``body`` on kept-alive
/// connections and, on its first connection, sends 700 bytes past the first response when
/// ``sendLeftovers()`` asks (once the client has read that response).
final class SpoilingOrigin: Sendable {
    static let body = Data((0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 3) })
    let port: UInt16
    private let listener: Int32
    private let accepted = Atomic<Int>(0)
    private let go = DispatchSemaphore(value: 0)
    private let sent = DispatchSemaphore(value: 0)

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && listen(fd, 8) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard fd >= 0, bound else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [self] in
            while true {
                let connection = accept(fd, nil, nil)
                guard connection >= 0 else { return }
                let index = accepted.add(1, ordering: .relaxed).oldValue
                Thread.detachNewThread { [self] in serve(connection, spoils: index == 0) }
            }
        }
    }

    /// Connections accepted so far.
    var connections: Int { accepted.load(ordering: .relaxed) }

    func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// Sends the leftovers on the first connection; returns once they are sent.
    func sendLeftovers() async {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { [self] in
                go.signal()
                sent.wait()
                continuation.resume()
            }
        }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ fd: Int32, spoils: Bool) {
        defer { close(fd) }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var answered = 0
        while true {
            while buffer.firstRange(of: Array("\r\n\r\n".utf8)) == nil {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0 else { return }
                buffer += chunk[0..<n]
            }
            buffer.removeFirst(buffer.firstRange(of: Array("\r\n\r\n".utf8))!.upperBound)
            let response = Array("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: \(Self.body.count)\r\n\r\n".utf8) + Self.body
            guard write(fd, response) else { return }
            answered += 1
            if spoils && answered == 1 {
                go.wait()
                let written = write(fd, [UInt8](repeating: 0x5A, count: 700))
                sent.signal()
                guard written else { return }
            }
        }
    }

    private func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) == $0.count }
    }
}
#endif
