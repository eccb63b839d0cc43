import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The default `DataLoading`: loads over `URLSession` (`FoundationNetworking` on Linux),
/// streaming the body chunk by chunk as it arrives, and reads `file:` and `data:` URLs
/// without the network.
///
/// One `URLSession` serves every load; its delegate routes each task's callbacks to the load
/// that started it. Chunks are handed to `didReceive` on the calling task, in order, as
/// `URLSession` delivers them, so progress is real. (`URLSession` has no back-pressure: if
/// `didReceive` is slower than the network, chunks wait in memory until it takes them.)
///
/// - Cancellation: cancelling the Swift task that awaits `loadData(for:didReceive:)` cancels
///   the `URLSessionTask` at once and the call throws `CancellationError`. If `didReceive`
///   throws (a size limit, say), the transfer is cancelled and that error is rethrown. Either
///   way the call returns only after the session has reported the task finished, so no
///   transfer outlives it (FoundationNetworking stops a cancelled transfer asynchronously;
///   a caller that returned at once could still have its body streaming in).
/// - Validation: by default a non-2xx status throws `DataLoader.Error.statusCode` as soon
///   as the response head arrives (the body is not downloaded), except a `304 Not Modified`
///   answering a conditional request (`If-None-Match` or `If-Modified-Since`), which is
///   returned normally so that a cache can renew its entry; so does a `206 Partial Content`
///   answering a request that sent no `Range` (a part of an image is not the image). Pass
///   `validate:` to change this. Interim `1xx` responses (`103 Early Hints`) are skipped.
/// - Errors: transport failures are rethrown as `URLError`; a body cut short of its
///   `Content-Length` (the connection closed early) throws `.incompleteBody`, and a body of
///   unknown length (chunked) cut short `URLError(.networkConnectionLost)`; a failed TLS
///   handshake, which FoundationNetworking reports as an unknown error, throws
///   `URLError(.serverCertificateUntrusted)` for the server's certificate and
///   `URLError(.secureConnectionFailed)` otherwise; local URLs throw `.fileNotFound`,
///   `.fileUnreadable` or `.invalidDataURL`.
/// - Timeouts: `timeoutIntervalForRequest` (or a request's own `timeoutInterval`, when it is
///   not the default 60 s) bounds each wait for bytes; `timeoutIntervalForResource` bounds the
///   whole load. Both throw `URLError(.timedOut)`. On Linux the loader enforces the resource
///   timeout itself, since FoundationNetworking ignores it (a server trickling a byte now and
///   then held a load for ever), and a request timeout with a fraction of a second, since
///   FoundationNetworking keeps only its whole seconds (0.5 s timed every load out at once,
///   1.5 s after 1 s).
/// - Redirects: followed within `http` and `https`; a `Location` naming any other scheme
///   (`file:`, `data:`, `ftp:`) is refused with `URLError(.unsupportedURL)`, and a relative
///   one is resolved against the URL that answered, in its directory (FoundationNetworking
///   resolves it against the server's root).
/// - Linux: FoundationNetworking has faults no caller can work around. A server that sends a
///   status line and a header field, then closes the connection, makes it trap ("Transfer
///   completed, but there's no response"), killing the process; it busy-polls a core while a
///   transfer waits on a slow server; it refuses IPv6 literal hosts as bad URLs. A pipeline
///   that loads URLs it does not control should use ``CurlDataLoader``, which drives libcurl
///   directly.
/// - Caching: `defaultConfiguration` has no `URLCache`: Lumen caches original bytes in its
///   own `DataCache` (with HTTP revalidation), so bytes are never cached twice and 304s
///   reach the cache layer. Set `urlCache` on your configuration to use URLSession's cache
///   in a pipeline without a disk cache; a pipeline with one sends its requests with
///   `.reloadIgnoringLocalCacheData`, and for those the `URLCache` neither answers nor stores.
public final class DataLoader: DataLoading, Sendable {
    /// Why a load failed, other than a transport error (`URLError`) or cancellation.
    public enum Error: Swift.Error, Sendable, CustomStringConvertible {
        /// The response's status was rejected by the validator (by default: not 2xx, and not
        /// a 304 answering a conditional request). Carries the status and the response.
        case statusCode(Int, URLResponse?)
        /// The body ended before the length the response announced.
        case incompleteBody(expected: Int64, received: Int64)
        /// A `file:` URL names no file.
        case fileNotFound(URL)
        /// A `file:` URL names something that cannot be read as a file (a directory; a FIFO,
        /// socket or device, refused before any read; no permission; an I/O error); `reason`
        /// says what happened.
        case fileUnreadable(URL, reason: String)
        /// A `data:` URL is malformed (no comma, bad base64, bad percent-escape).
        case invalidDataURL
        /// A `file:` URL was refused because the loader was created with
        /// `allowsLocalFiles: false`.
        case localFileAccessDenied(URL)
        /// A connection to this address (its canonical text, `"127.0.0.2"` or `"::1"`) was
        /// refused by the loader's ``ConnectionPolicy`` before it was attempted. Carries the
        /// address only, never the URL, which may hold credentials.
        case addressRefused(String)

        /// The HTTP status, for `.statusCode`.
        public var statusCode: Int? {
            if case .statusCode(let status, _) = self { return status }
            return nil
        }

        /// The response's `Retry-After` header value, for `.statusCode` with an HTTP response
        /// that carried one.
        public var retryAfter: String? {
            guard case .statusCode(_, let response?) = self else { return nil }
            return (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Retry-After")
        }

        /// A one-line explanation, e.g. `HTTP status 404 for https://example.com/a.jpg`.
        public var description: String {
            switch self {
            case .statusCode(let status, let response):
                "HTTP status \(status) for \(response?.url?.absoluteString ?? "unknown URL")"
            case .incompleteBody(let expected, let received):
                "Body ended after \(received) of \(expected) bytes"
            case .localFileAccessDenied(let url):
                "Local file access is turned off: \(url.path)"
            case .fileNotFound(let url):
                "No file at \(url.path)"
            case .fileUnreadable(let url, let reason):
                "Cannot read \(url.path): \(reason)"
            case .invalidDataURL:
                "Malformed data: URL"
            case .addressRefused(let address):
                "Connection to \(address) refused by the connection policy"
            }
        }
    }

    /// Decides whether a response is acceptable before its body is downloaded; throws to
    /// reject it (the transfer is then cancelled and the error is what `loadData` throws).
    /// Receives the response and the request that was sent; called on the session's
    /// delegate queue, once per load, for every scheme handled by `URLSession`.
    public typealias Validator = @Sendable (_ response: URLResponse, _ request: URLRequest) throws -> Void

    /// The session all network loads go through.
    public let session: URLSession
    private let delegate: SessionDelegate
    private let validator: Validator
    /// The session's `URLCache`, read once (`session.configuration` is a fresh copy per call).
    private let urlCache: URLCache?
    /// The session's `timeoutIntervalForResource`, read once: the loader enforces it on Linux.
    private let resourceTimeout: TimeInterval
    /// The session's `timeoutIntervalForRequest`, read once: on Linux the loader enforces a
    /// fractional one itself (see ``idleTimeout(for:)``).
    private let requestTimeout: TimeInterval

    /// How many body bytes a `file:` read hands to `didReceive` at a time.
    static let fileChunkSize = 128 * 1024

    /// A fresh copy of the default configuration: at most 6 connections per host, a 60 s
    /// idle timeout per request, 10 minutes per resource, no `URLCache` (see the type's
    /// documentation; set `urlCache` to opt back in), and no cookie jar or credential store.
    ///
    /// Without a jar, a `Set-Cookie` in one response is never sent with a later request: a
    /// server loading images for many users must never send one user's cookie on another's
    /// request (the shared jar is process-wide, and FoundationNetworking even saves it to disk).
    /// A request's own `Cookie` or `Authorization` header is sent as given (and keys the
    /// request; see ``ImageRequest``). An app whose image URLs need the cookies its other
    /// sessions collected sets `httpCookieStorage` (and `httpShouldSetCookies`) on a
    /// configuration and passes it to ``init(configuration:allowsLocalFiles:validate:)``.
    public static var defaultConfiguration: URLSessionConfiguration {
        let configuration = URLSessionConfiguration.default
        configuration.httpMaximumConnectionsPerHost = 6
        configuration.timeoutIntervalForRequest = 60
        configuration.timeoutIntervalForResource = 600
        configuration.urlCache = nil
        configuration.requestCachePolicy = .useProtocolCachePolicy
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCredentialStorage = nil
        return configuration
    }

    /// Whether `file:` URLs are read. A server that loads URLs its clients supply should turn
    /// this off, so that a request can never read the server's own files.
    public let allowsLocalFiles: Bool

    /// Creates a loader with its own `URLSession`.
    /// - Parameters:
    ///   - configuration: the session's configuration (copied by `URLSession`).
    ///   - allowsLocalFiles: whether `file:` URLs are read (default `true`); with `false` they
    ///     fail with ``Error/localFileAccessDenied(_:)``. `data:` URLs carry their bytes and are
    ///     always decoded.
    ///   - validate: called with each HTTP response head; the default is `DataLoader.validate`.
    public init(
        configuration: URLSessionConfiguration = DataLoader.defaultConfiguration,
        allowsLocalFiles: Bool = true,
        validate: @escaping Validator = DataLoader.validate
    ) {
        self.allowsLocalFiles = allowsLocalFiles
        let delegate = SessionDelegate()
        self.delegate = delegate
        self.validator = validate
        self.urlCache = configuration.urlCache
        self.resourceTimeout = configuration.timeoutIntervalForResource
        self.requestTimeout = configuration.timeoutIntervalForRequest
        self.session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    deinit {
        // The session retains its delegate until invalidated. Loads keep `self` alive, so
        // none are running here.
        session.finishTasksAndInvalidate()
    }

    /// The default validator: accepts 2xx (206 only when `request` asked for a `Range`), and
    /// 304 when `request` was conditional (`If-None-Match` or `If-Modified-Since`); throws
    /// `.statusCode` otherwise. Non-HTTP responses are accepted.
    @Sendable public static func validate(_ response: URLResponse, _ request: URLRequest) throws {
        guard let http = response as? HTTPURLResponse else { return }
        let status = http.statusCode
        if status == 206, request.value(forHTTPHeaderField: "Range") == nil {
            // Part of the image, unasked: decoding it would fail as truncated at best, and
            // some formats decode a part without noticing.
            throw Error.statusCode(status, response)
        }
        if (200..<300).contains(status) { return }
        if status == 304, isConditional(request) { return }
        throw Error.statusCode(status, response)
    }

    /// Whether `request` asks the server to answer 304 when the resource is unchanged.
    public static func isConditional(_ request: URLRequest) -> Bool {
        request.value(forHTTPHeaderField: "If-None-Match") != nil
            || request.value(forHTTPHeaderField: "If-Modified-Since") != nil
    }

    /// Throws `URLError(.badURL)` for an `http(s)` URL without a host as `URL` reads it —
    /// `http:/host/a.jpg`, `http:///host/…` — though libcurl would find one, and credentials,
    /// in the path (nor does the pipeline key it by that host). Both loaders' check before
    /// anything is sent.
    static func requireHost(_ url: URL?) throws {
        guard let url, ["http", "https"].contains(url.scheme?.lowercased()) else { return }
        guard let host = url.host, !host.isEmpty else {
            throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "the URL has no host (http://host/path)"])
        }
    }

    /// Loads `request`: `file:` and `data:` URLs locally, anything else through the session.
    /// See the type's documentation for cancellation, validation and errors.
    public func loadData(
        for request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        if let url = request.url, let response = try await Self.loadLocally(url, allowsFiles: allowsLocalFiles, didReceive: didReceive) {
            return response
        }
        return try await loadFromNetwork(request, didReceive: didReceive)
    }

    private func loadFromNetwork(
        _ request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        try Task.checkCancellation()
        try Self.requireHost(request.url)
        #if canImport(FoundationNetworking)
        // FoundationNetworking answers from the session's `URLCache` whatever the request's
        // cache policy says; a request that ignores the local cache (what a pipeline with a
        // disk cache sends) has any entry there removed first, so the network answers.
        if request.cachePolicy == .reloadIgnoringLocalCacheData, let urlCache {
            urlCache.removeCachedResponse(for: request)
        }
        #endif
        let (events, continuation) = AsyncThrowingStream.makeStream(of: TransferEvent.self)
        #if canImport(FoundationNetworking)
        // A fractional request timeout is kept by the loader: the session gets one it cannot
        // reach first.
        var sent = request
        var idle: SessionDelegate.IdleTimeout?
        let wait = idleTimeout(for: request)
        if wait > 0, wait.isFinite, wait.rounded(.down) != wait {
            let keeper = SessionDelegate.IdleTimeout(limit: wait)
            sent.timeoutInterval = keeper.sessionTimeout
            idle = keeper
        }
        let task = session.dataTask(with: sent)
        #else
        let idle: SessionDelegate.IdleTimeout? = nil
        let task = session.dataTask(with: request)
        #endif
        let identifier = task.taskIdentifier
        let finished = TransferCompletion()
        delegate.register(identifier, SessionDelegate.Handler(
            request: request, validate: validator, continuation: continuation, idle: idle
        ), completion: finished)
        // Runs when the consumer's task is cancelled while waiting for an event, when the
        // stream finishes, and on the explicit finish below; the wait after it makes sure the
        // URLSessionTask never outlives this call.
        continuation.onTermination = { [delegate] _ in
            delegate.unregister(identifier)
            delegate.cancel(task)
        }
        task.resume()
        #if canImport(FoundationNetworking)
        let deadline = scheduleResourceTimeout(identifier, url: request.url)
        defer { deadline?.cancel() }
        if let idle {
            idle.start { [delegate, url = request.url] in
                var info: [String: Any] = [NSLocalizedDescriptionKey: "no bytes came for \(wait) s (the request timeout)"]
                if let url { info[NSURLErrorFailingURLErrorKey] = url }
                delegate.fail(identifier, with: URLError(.timedOut, userInfo: info))
            }
        }
        defer { idle?.stop() }
        #endif
        let outcome: Result<URLResponse, any Swift.Error>
        do { outcome = .success(try await receive(events, request: request, didReceive: didReceive)) } catch { outcome = .failure(error) }
        continuation.finish()
        // After an error the cancel above is asynchronous in FoundationNetworking: wait for
        // the session to report the task done (bounded, should it ever fail to). After
        // success it already has.
        await finished.wait(atMost: .seconds(10))
        return try outcome.get()
    }

    #if canImport(FoundationNetworking)
    /// The request timeout FoundationNetworking applies to `request`: the request's own
    /// `timeoutInterval` when it is not the default (60 s), else the session's
    /// `timeoutIntervalForRequest`. (FoundationNetworking knows whether the request's value was
    /// set; a request set to exactly 60 s on a session with another value is taken as unset.)
    func idleTimeout(for request: URLRequest) -> TimeInterval {
        request.timeoutInterval != 60 ? request.timeoutInterval : requestTimeout
    }

    /// Ends transfer `identifier` with `URLError(.timedOut)` once `timeoutIntervalForResource`
    /// has passed; FoundationNetworking never does (its request timeout restarts with every
    /// byte, so a trickling server kept a load alive for ever). `nil` when there is no finite
    /// limit. Cancel the answer when the load ends first.
    private func scheduleResourceTimeout(_ identifier: Int, url: URL?) -> DispatchWorkItem? {
        let limit = resourceTimeout
        guard limit > 0, limit.isFinite else { return nil }
        let item = DispatchWorkItem { [delegate] in
            var info: [String: Any] = [NSLocalizedDescriptionKey: "the load took longer than the resource timeout (\(limit) s)"]
            if let url { info[NSURLErrorFailingURLErrorKey] = url }
            delegate.fail(identifier, with: URLError(.timedOut, userInfo: info))
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + limit, execute: item)
        return item
    }
    #endif

    /// The events of one transfer, up to its response (or the error that ends it).
    private func receive(
        _ events: AsyncThrowingStream<TransferEvent, any Swift.Error>, request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        var progress = TransferEvent.Progress()
        do {
            let response = try await TransferEvent.deliver(events, progress: &progress, didReceive: didReceive)
            try Self.checkComplete(response, received: progress.received, request: request)
            return response
        } catch let error as URLError where error.code == .cancelled && Task.isCancelled {
            throw CancellationError()
        } catch let error as URLError where error.code == .unknown || error.code == .networkConnectionLost {
            // libcurl reports a connection closed before `Content-Length` bytes as an
            // unknown error: name it. (Not for a content-encoded body: its length is not
            // comparable, and the same error then means the encoding could not be undone,
            // which libcurl's message says.)
            let (response, received) = (progress.response, progress.received)
            let declared = response.map(Self.declaredLength) ?? -1
            if let response, declared > received, !Self.isContentEncoded(response) {
                throw Error.incompleteBody(expected: declared, received: received)
            }
            // A body of unknown length (chunked) that the server's close cut short is the same
            // unknown error: the connection was lost, as FoundationNetworking says when the
            // close is a reset. So is a content-encoded body cut short, which libcurl tells
            // apart from an encoding it cannot undo only in its message ("transfer closed
            // with 1234 bytes remaining to read", "… with outstanding read data remaining").
            if error.code == .unknown, let response,
               declared < 0 && !Self.isContentEncoded(response) || Self.isContentEncoded(response) && Self.saysTransferClosed(error) {
                throw URLError(.networkConnectionLost, userInfo: error.userInfo)
            }
            // A failed TLS handshake is an unknown error from FoundationNetworking, named only
            // in libcurl's message: a certificate the trusted authorities do not vouch for, or
            // another failure (a server that does not speak TLS, say).
            if error.code == .unknown, response == nil, let code = Self.tlsFailure(error) {
                throw URLError(code, userInfo: error.userInfo)
            }
            throw error
        }
    }

    /// Throws when the body is shorter than the length the response announced (see
    /// ``shortfall(of:received:request:)``).
    private static func checkComplete(_ response: URLResponse, received: Int64, request: URLRequest) throws {
        if let expected = shortfall(of: response, received: received, request: request) {
            throw Error.incompleteBody(expected: expected, received: received)
        }
    }

    /// The announced length when the body that came is shorter than it and the two are
    /// comparable — not for `HEAD`, a 204 or a 304, a content-encoded body, or a body framed
    /// by a `Transfer-Encoding` (see ``declaredLength(_:)``); nil when the body is whole.
    /// Both loaders' completeness check.
    static func shortfall(of response: URLResponse, received: Int64, request: URLRequest) -> Int64? {
        let expected = declaredLength(response)
        guard expected > 0, received < expected, request.httpMethod?.uppercased() != "HEAD" else { return nil }
        if let http = response as? HTTPURLResponse, http.statusCode == 304 || http.statusCode == 204 { return nil }
        return isContentEncoded(response) ? nil : expected
    }

    /// The body's length as the response declares it, -1 when unknown: its `Content-Length`,
    /// unless a `Transfer-Encoding` frames the body, which then overrides it (RFC 9112,
    /// section 6.3: libcurl reads the chunks and ignores the length, and so must the check).
    static func declaredLength(_ response: URLResponse) -> Int64 {
        if let encoding = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Transfer-Encoding"),
           encoding.lowercased() != "identity" {
            return -1
        }
        return response.expectedContentLength
    }

    /// Whether libcurl's message in `error` says the connection closed before the body ended.
    private static func saysTransferClosed(_ error: URLError) -> Bool {
        message(of: error).contains("transfer closed with")
    }

    /// libcurl's message, which FoundationNetworking passes on as the error's description.
    private static func message(of error: URLError) -> String {
        (error.userInfo[NSLocalizedDescriptionKey] as? String) ?? ""
    }

    /// What libcurl's message in `error` says of a failed TLS handshake (libcurl over OpenSSL,
    /// as FoundationNetworking links it): `.serverCertificateUntrusted` for the server's
    /// certificate ("SSL certificate problem: self-signed certificate", "… certificate has
    /// expired", "SSL: no alternative certificate subject name matches target host name"),
    /// `.secureConnectionFailed` for another handshake failure ("OpenSSL/3.0.2:
    /// error:0A00010B:SSL routines::wrong version number", "OpenSSL SSL_connect: …", "SSL
    /// connect error"); nil otherwise — a connection lost after the handshake ("OpenSSL
    /// SSL_read: …", "… SSL_write: …") is not a handshake failure.
    static func tlsFailure(_ error: URLError) -> URLError.Code? {
        let message = message(of: error)
        if message.hasPrefix("SSL certificate problem") || message.hasPrefix("SSL: ") && message.contains("certificate subject name") {
            return .serverCertificateUntrusted
        }
        if message.contains("SSL_read") || message.contains("SSL_write") { return nil }
        let handshake = ["OpenSSL/", "OpenSSL SSL_connect", "SSL connect error", "SSL: "]
        return handshake.contains(where: message.hasPrefix) ? .secureConnectionFailed : nil
    }

    /// Whether the body was sent content-encoded (gzip, …), so that its length on the wire is
    /// not the length of the bytes delivered.
    static func isContentEncoded(_ response: URLResponse) -> Bool {
        guard let encoding = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Encoding") else { return false }
        return encoding.lowercased() != "identity"
    }
}

extension DataLoader.Error: HTTPStatusCodeProviding {}
