import Foundation

/// An HTTP/1.1 server on 127.0.0.1 for tests: serves given bytes at given paths, with faults
/// on demand, and counts everything it does.
///
/// The server listens on an ephemeral port (`baseURL` says which) and handles each
/// connection on its own thread with blocking POSIX sockets; connections are kept alive
/// between requests, as `URLSession` expects. `GET` and `HEAD` are served, other methods
/// where `allow(methods:for:)` allows them. Paths are
/// matched verbatim, without the query string; an unknown path is a 404, a malformed request
/// a 400 (the server never crashes on input, and a client that disconnects mid-response is
/// counted, not fatal).
///
/// Per path you can add latency (`setLatency(_:for:)`), hold requests until released
/// (`hold(_:)` / `release(_:)`), pause a body part-way (`holdBody(_:after:)`), force a status code (`respond(path:status:)`), cut the body
/// short (`truncate(path:after:)`), send it with chunked transfer encoding and no
/// `Content-Length` (`setChunked(_:for:)`) or precede it with an interim `1xx` response
/// (`sendInformational(_:for:)`), or answer with raw bytes and close (`respondRaw(path:bytes:)`). A route with an ETag or a Last-Modified date
/// answers matching conditional requests with `304 Not Modified` and no body.
///
/// Tests wait for the server without sleeping: `waitForRequests(path:count:)` and
/// `waitUntil(_:)` suspend until the counters in `statistics` satisfy them.
/// `recordedRequests` shows what clients sent (headers, query strings).
///
/// ```swift
/// let server = try LoopbackServer()
/// server.serve(path: "/a.jpg", data: jpeg, contentType: "image/jpeg", etag: "\"v1\"")
/// server.hold("/a.jpg")
/// let load = Task { try await loader.loadData(for: URLRequest(url: server.url(for: "/a.jpg"))) { _, _ in } }
/// try await server.waitForRequests(path: "/a.jpg", count: 1)
/// server.release("/a.jpg")
/// ```
///
/// `stop()` closes the listener and every connection, wakes held requests and waits for all
/// the server's threads to end; it is also called when the server is deinitialized.
public final class LoopbackServer: Sendable {
    /// What the server has done so far; a consistent snapshot.
    public struct Statistics: Sendable, Equatable {
        /// Requests whose head was parsed (any path, any outcome, including 404s).
        public var totalRequests = 0
        /// Requests per path (without the query string).
        public var requestsByPath: [String: Int] = [:]
        /// `304 Not Modified` responses sent.
        public var notModifiedResponses = 0
        /// Malformed requests answered with 400.
        public var badRequests = 0
        /// Content bytes written to sockets: bodies of routes served with `serve(...)`
        /// (headers, chunk framing and the short bodies of error responses not included).
        public var bodyBytesSent = 0
        /// Connections accepted since the server started.
        public var totalConnections = 0
        /// Connections open now.
        public var openConnections = 0
        /// The most connections that were open at the same time.
        public var peakConnections = 0
        /// Requests being answered now (parsed, response not yet fully written).
        public var inFlightRequests = 0
        /// The most requests that were in flight at the same time.
        public var peakInFlightRequests = 0
        /// Requests waiting now because their path is held.
        public var heldRequests = 0
        /// Responses paused mid-body now, waiting for `release(_:)` (see `holdBody(_:after:)`).
        public var pausedBodies = 0
        /// Requests abandoned because the client closed the connection before the response
        /// was fully written (for example a cancelled download).
        public var clientDisconnects = 0

        /// Requests that reached `path` (without the query string).
        public func requests(for path: String) -> Int {
            requestsByPath[LoopbackServer.normalize(path)] ?? 0
        }
    }

    /// Errors from starting the server or waiting on it.
    public enum Error: Swift.Error, Sendable, Equatable {
        /// A socket call failed while starting; `errno` is the C error number.
        case socket(call: String, errno: Int32)
        /// The server was stopped (before `start()`, or while a wait was pending).
        case stopped
    }

    let core: Core

    /// The port the server listens on (valid after `start()`).
    public var port: UInt16 { core.port }

    /// `http://127.0.0.1:<port>`.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(core.port)")! }

    /// Creates a server and, when `start` is true (the default), starts listening at once.
    /// - Throws: `LoopbackServer.Error.socket` when the listening socket cannot be set up.
    public init(start: Bool = true) throws {
        core = Core()
        if start { try core.start() }
    }

    deinit {
        core.stop()
    }

    /// Starts listening on 127.0.0.1 on an ephemeral port. Calling it on a running server
    /// does nothing.
    /// - Throws: `.socket` if a socket call fails, `.stopped` once the server was stopped.
    public func start() throws {
        try core.start()
    }

    /// Stops the server: closes the listener and every connection, wakes held and delayed
    /// requests (which are then abandoned), fails pending waits with `.stopped`, and returns
    /// once every server thread has ended. Safe to call more than once.
    public func stop() {
        core.stop()
    }

    /// The URL of `path` on this server (a leading "/" is added when missing).
    public func url(for path: String) -> URL {
        URL(string: "http://127.0.0.1:\(core.port)\(Self.normalize(path))")!
    }

    // MARK: Routes

    /// Serves `data` at `path` with status 200, replacing any previous route for that path
    /// (and resetting its faults: status override, truncation, chunking, latency).
    ///
    /// - Parameters:
    ///   - path: the route's path; a leading "/" is added when missing.
    ///   - data: the response body.
    ///   - contentType: sent as `Content-Type`.
    ///   - headers: extra response headers, sent as given.
    ///   - etag: sent as `ETag`; a request whose `If-None-Match` matches it gets a 304.
    ///   - lastModified: an HTTP date sent as `Last-Modified`; a request without
    ///     `If-None-Match` whose `If-Modified-Since` is at or after it gets a 304.
    ///     `LoopbackServer.httpDate(_:)` formats one.
    ///   - cacheControl: sent as `Cache-Control` (also on 304s).
    public func serve(
        path: String,
        data: Data,
        contentType: String = "application/octet-stream",
        headers: [String: String] = [:],
        etag: String? = nil,
        lastModified: String? = nil,
        cacheControl: String? = nil
    ) {
        let route = Route(
            data: data, contentType: contentType, headers: headers,
            etag: etag, lastModified: lastModified, cacheControl: cacheControl
        )
        core.update { state in
            var route = route
            // Allowed methods outlive a change of content.
            route.extraMethods = state.routes[Self.normalize(path)]?.extraMethods ?? []
            state.routes[Self.normalize(path)] = route
        }
    }

    /// Removes the route at `path`: later requests get a 404.
    public func removeRoute(path: String) {
        core.update { $0.routes[Self.normalize(path)] = nil }
    }

    /// Answers requests to `path` with `status` (and a short text body) instead of its
    /// content, or restores the content when `status` is nil. Works on paths without content too.
    /// `headers` are sent with the status (a `Retry-After`, say).
    public func respond(path: String, status: Int?, headers: [String: String] = [:]) {
        core.updateRoute(path) {
            $0.statusOverride = status
            $0.statusOverrideHeaders = headers
        }
    }

    /// Answers requests to `path` with a `status` redirect (302 by default) to `location`,
    /// sent as given in `Location`; nil restores the content.
    public func redirect(path: String, to location: String?, status: Int = 302) {
        core.updateRoute(path) { $0.redirect = location.map { (status, $0) } }
    }

    /// Answers requests to `path` with `bytes` exactly as given, then closes the connection
    /// cleanly: no status line or header fields of the server's own. For responses no real
    /// route produces: a status line alone, a head that never ends (`"HTTP/1.1 200 OK\r\n"`),
    /// a malformed status line, or nothing at all (empty `bytes`). nil restores the content.
    public func respondRaw(path: String, bytes: Data?) {
        core.updateRoute(path) { $0.rawResponse = bytes }
    }

    /// Sends the full `Content-Length` for `path` but only the first `bytes` of the body, then
    /// closes the connection; nil restores full bodies.
    public func truncate(path: String, after bytes: Int?) {
        core.updateRoute(path) {
            $0.truncateAfter = bytes.map { max(0, $0) }
            $0.truncateTimes = nil
        }
    }

    /// Like `truncate(path:after:)`, for the next `times` responses to `path` only; later
    /// ones are whole. A range response (`setRangeSupport`) is cut after `bytes` of its own body.
    public func truncate(path: String, after bytes: Int, times: Int) {
        core.updateRoute(path) {
            $0.truncateAfter = max(0, bytes)
            $0.truncateTimes = max(0, times)
        }
    }

    /// How a route answers `Range: bytes=N-` requests.
    public enum RangeSupport: Sendable, Equatable {
        /// Ranges are ignored: always `200` with the whole body (the default).
        case ignored
        /// `206` with `Content-Range: bytes N-LAST/LENGTH` and the rest of the body when
        /// `If-Range` is absent or matches the route's strong `ETag` or its `Last-Modified`
        /// (else `200` with the whole body); `416` for a start past the end. Responses carry
        /// `Accept-Ranges: bytes`.
        case honoured
        /// Like `honoured`, but the `206` starts `offset` bytes later than asked, and says so
        /// in its `Content-Range`: a client that appends without reading it loses bytes.
        case misplaced(offset: Int)
    }

    /// Sets how `path` answers range requests (see ``RangeSupport``).
    public func setRangeSupport(_ support: RangeSupport, for path: String) {
        core.updateRoute(path) { $0.rangeSupport = support }
    }

    /// Sends `path`'s body with `Transfer-Encoding: chunked` and no `Content-Length`, in
    /// chunks of `chunkSize` bytes, when `enabled`.
    public func setChunked(_ enabled: Bool = true, for path: String, chunkSize: Int = 16 * 1024) {
        core.updateRoute(path) {
            $0.isChunked = enabled
            $0.chunkSize = max(1, chunkSize)
        }
    }

    /// Sends an interim response with `status` (a `1xx`: `103 Early Hints`, `100 Continue`)
    /// before each response to `path`, as servers and CDNs may (RFC 9110 §15.2: a client must
    /// accept one even unasked); nil stops it.
    public func sendInformational(_ status: Int?, for path: String) {
        if let status { precondition((100..<200).contains(status) && status != 101, "LoopbackServer: \(status) is no interim status") }
        core.updateRoute(path) { $0.informationalStatus = status }
    }

    /// Answers `methods` (say `POST`) at `path` as it answers `GET`; other methods than those,
    /// `GET` and `HEAD` get `405 Method Not Allowed`. `recordedRequests` keeps each request's
    /// body (at most 4 MiB; a larger one is answered with 413). The methods stay allowed when
    /// `serve` changes the content.
    public func allow(methods: Set<String>, for path: String) {
        core.updateRoute(path) { $0.extraMethods = methods }
    }

    /// Delays every response to `path` by `latency`, measured from the moment its request
    /// arrives (a real wait on the server's connection thread). `.zero` removes the delay.
    public func setLatency(_ latency: Duration, for path: String) {
        core.updateRoute(path) { $0.latency = latency }
    }

    /// Holds requests to `path`: they are counted when they arrive, then wait on the server
    /// until `release(_:)` (or `stop()`). A client that disconnects while held is noticed and
    /// counted in `clientDisconnects`.
    public func hold(_ path: String) {
        core.update { $0.heldPaths.insert(Self.normalize(path)) }
    }

    /// Holds responses to `path` mid-body: the head and the first `bytes` of the body are
    /// sent, then the rest waits until `release(_:)` (or `stop()`). Tests use it to keep a
    /// download in progress; `statistics.pausedBodies` counts the responses waiting, and a
    /// client that disconnects meanwhile is counted in `clientDisconnects`.
    public func holdBody(_ path: String, after bytes: Int) {
        let path = Self.normalize(path)
        core.update { state in
            var route = state.routes[path] ?? Route()
            route.bodyPauseAfter = max(0, bytes)
            state.routes[path] = route
            state.heldBodies.insert(path)
        }
    }

    /// Lets held requests and held bodies of `path` (and later ones) proceed.
    public func release(_ path: String) {
        let path = Self.normalize(path)
        core.update {
            $0.heldPaths.remove(path)
            $0.heldBodies.remove(path)
        }
    }

    /// Lets held requests to `path` (and later ones) proceed, keeping its body hold
    /// (`holdBody(_:after:)`): the responses then pause mid-body as usual. Tests use `hold`
    /// and this to make sure that every client has subscribed before a response starts.
    public func releaseRequests(_ path: String) {
        let path = Self.normalize(path)
        core.update { _ = $0.heldPaths.remove(path) }
    }

    /// Lets every held request and held body proceed.
    public func releaseAll() {
        core.update {
            $0.heldPaths.removeAll()
            $0.heldBodies.removeAll()
        }
    }

    // MARK: Counters and waiting

    /// A snapshot of the counters.
    public var statistics: Statistics { core.withState { $0.stats } }

    /// Requests that reached `path` so far.
    public func requestCount(for path: String) -> Int { statistics.requests(for: path) }

    /// A request as the server received it.
    public struct RecordedRequest: Sendable, Equatable {
        /// `GET`, `HEAD`, ...
        public var method: String
        /// The path without the query string.
        public var path: String
        /// The path with its query string, as sent.
        public var target: String
        /// Header fields by lowercased name; repeated fields are joined with ", ".
        public var headers: [String: String]
        /// The request body (empty when there was none).
        public var body: Data = Data()

        /// The value of the header `name` (any case).
        public func header(_ name: String) -> String? { headers[name.lowercased()] }
    }

    /// How many requests `recordedRequests` keeps; past it, the older half is dropped.
    public static let requestLogLimit = 10_000

    /// The requests received so far, oldest first (at most `requestLogLimit`, counted from
    /// the last `resetStatistics()`), for asserting what a client sent: conditional headers,
    /// credentials, query strings.
    public var recordedRequests: [RecordedRequest] { core.withState { $0.log } }

    /// The recorded requests to `path` (without the query string), oldest first.
    public func recordedRequests(for path: String) -> [RecordedRequest] {
        let path = Self.normalize(path)
        return recordedRequests.filter { $0.path == path }
    }

    /// Resets every counter to zero except the live values (open connections and
    /// in-flight and held requests), which are kept and become the new peaks.
    public func resetStatistics() {
        core.update {
            let old = $0.stats
            var fresh = Statistics()
            fresh.openConnections = old.openConnections
            fresh.peakConnections = old.openConnections
            fresh.inFlightRequests = old.inFlightRequests
            fresh.peakInFlightRequests = old.inFlightRequests
            fresh.heldRequests = old.heldRequests
            fresh.pausedBodies = old.pausedBodies
            $0.stats = fresh
            $0.log.removeAll()
        }
    }

    /// Suspends until at least `count` requests have reached `path` in total.
    /// - Throws: `CancellationError` if the waiting task is cancelled, `.stopped` if the
    ///   server stops first.
    public func waitForRequests(path: String, count: Int) async throws {
        let path = Self.normalize(path)
        try await waitUntil { $0.requests(for: path) >= count }
    }

    /// Suspends until `condition` holds for the counters. It is evaluated now and after every
    /// change, on the server's threads with its lock held: keep it short and never call the
    /// server from it.
    /// - Throws: `CancellationError` if the waiting task is cancelled, `.stopped` if the
    ///   server stops first.
    public func waitUntil(_ condition: @escaping @Sendable (Statistics) -> Bool) async throws {
        try await core.waitUntil(condition)
    }

    // MARK: Helpers

    /// Formats `date` as an HTTP date (IMF-fixdate), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    public static func httpDate(_ date: Date) -> String {
        HTTPDate.format(date)
    }

    static func normalize(_ path: String) -> String {
        path.hasPrefix("/") ? path : "/" + path
    }
}

extension LoopbackServer {
    /// One path's content and faults.
    struct Route: Sendable {
        var data: Data?
        var contentType = "application/octet-stream"
        var headers: [String: String] = [:]
        var etag: String?
        var lastModified: String?
        var cacheControl: String?
        var statusOverride: Int?
        /// Headers sent with ``statusOverride``.
        var statusOverrideHeaders: [String: String] = [:]
        /// A redirect answered instead of the content: (status, Location).
        var redirect: (status: Int, location: String)?
        var informationalStatus: Int?
        var truncateAfter: Int?
        /// Responses left to truncate; nil: every one.
        var truncateTimes: Int?
        var rangeSupport: RangeSupport = .ignored
        var isChunked = false
        var chunkSize = 16 * 1024
        var latency: Duration = .zero
        var bodyPauseAfter: Int?
        /// Sent instead of a response, then the connection closes (see `respondRaw(path:bytes:)`).
        var rawResponse: Data?
        /// Methods answered besides `GET` and `HEAD` (see `allow(methods:for:)`).
        var extraMethods: Set<String> = []

        init(
            data: Data? = nil, contentType: String = "application/octet-stream",
            headers: [String: String] = [:], etag: String? = nil,
            lastModified: String? = nil, cacheControl: String? = nil
        ) {
            self.data = data
            self.contentType = contentType
            self.headers = headers
            self.etag = etag
            self.lastModified = lastModified
            self.cacheControl = cacheControl
        }
    }
}
