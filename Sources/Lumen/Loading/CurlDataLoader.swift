#if canImport(CCurl) && canImport(CLumenCurl)
import CCurl
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A `DataLoading` for Linux that drives libcurl's multi interface itself instead of going
/// through `URLSession`: for servers that load URLs they do not control.
///
/// `DataLoader`'s `URLSession` is, on Linux, FoundationNetworking over libcurl, and it has
/// faults Lumen cannot work around from outside. The worst: a server that sends a status line
/// (or a few header fields) and then closes the connection makes FoundationNetworking trap
/// ("Transfer completed, but there's no response"), so anyone who can make the process load a
/// URL can kill it. It also busy-polls a core while a transfer waits on a slow server. This
/// loader fails such a load with `URLError(.badServerResponse)` and sleeps in
/// `curl_multi_poll` while it waits.
///
/// On Linux, ``ImagePipeline/Configuration`` uses one by default; to tune it:
///
/// ```swift
/// let pipeline = ImagePipeline(configuration: .init(dataLoader: CurlDataLoader(requestTimeout: 10)))
/// ```
///
/// - Threads: one thread per loader runs every transfer (libcurl's multi handle, at most 6
///   connections per host, kept alive between loads); it starts with the first `http` or
///   `https` load and ends when the loader is deinitialised. Chunks are handed to
///   `didReceive` on the calling task, in order. (No back-pressure: chunks wait in memory
///   until `didReceive` takes them.)
/// - Cancellation: cancelling the Swift task that awaits `loadData(for:didReceive:)` stops
///   the transfer at once and the call throws `CancellationError`. If `didReceive` throws,
///   the transfer is stopped and that error is rethrown. Either way the call returns only
///   after the transfer's handle was removed: no transfer outlives the call.
/// - Validation: as ``DataLoader``'s: by default ``DataLoader/validate(_:_:)``, run once per
///   load on the loader's thread as soon as the final response head has arrived, before the
///   body. Interim `1xx` heads and followed redirects are not validated.
/// - Errors: those ``DataLoader`` throws for the same failures, so that
///   ``ImagePipeline/RetryPolicy`` treats both alike: `URLError` for transport failures
///   (`.cannotConnectToHost`, `.cannotFindHost`, `.timedOut`, `.networkConnectionLost`,
///   `.badServerResponse` for a server that closed without a byte or inside the response
///   head, `.secureConnectionFailed`, `.serverCertificateUntrusted`,
///   `.cannotDecodeContentData`, `.httpTooManyRedirects`; anything else `.unknown` with
///   libcurl's message as its description), ``DataLoader/Error/incompleteBody(expected:received:)``
///   for a body cut short of its `Content-Length`, ``DataLoader/Error/statusCode(_:_:)`` from
///   the default validator, ``DataLoader/Error/addressRefused(_:)`` for an address the
///   `connectionPolicy` refused.
/// - Connection policy: for a server that loads URLs strangers give it, pass a
///   ``ConnectionPolicy``: each address is checked after DNS and before any connection, for
///   redirects too, and proxies are turned off (see `init`).
/// - Timeouts: `requestTimeout` (or a request's own `timeoutInterval`, when it is not the
///   default 60 s) bounds each wait for bytes, fractions of a second included (the loader
///   keeps it itself, from the last byte received); `resourceTimeout` bounds the whole load,
///   redirects included. Both throw `URLError(.timedOut)`. Both count from the moment the
///   loader's thread takes the load, so a wait for a free connection (past the 6 per host)
///   counts too.
/// - Redirects: followed, at most `maximumRedirects` (default 20), within `http` and `https` only: a `Location` naming
///   `file:`, `data:`, `ftp:` or any other scheme fails with `URLError(.unsupportedURL)`
///   without a second request. libcurl resolves a relative `Location` as RFC 3986 says and
///   drops `Authorization` and `Cookie` on a redirect to another host.
/// - Content encoding: gzip, deflate and br are asked for and decoded; `didReceive` gets the
///   decoded bytes.
/// - Local URLs: `file:` (when `allowsLocalFiles`) and `data:` are read as ``DataLoader``
///   reads them, without the network. Other schemes fail with `URLError(.unsupportedURL)`.
///
/// - Methods and bodies: the request's method is sent as given, and `httpBody` with its
///   length (a GET's or HEAD's body is ignored; a POST without one sends an empty body). A
///   `301`, `302` or `303` turns a POST into a GET, as URLSession does; any other method is
///   sent again, with its body, to every location it is redirected to. `httpBodyStream` is
///   not read: such a request fails with `URLError(.unsupportedURL)`.
///
/// What it does not do: no `URLCache` (Lumen's `DataCache` caches original bytes and
/// revalidates them), no cookie storage and no credential store (a request carries its own
/// `Cookie` or `Authorization` header, sent as given; a user and password in the URL are sent
/// as Basic authentication, to that host only), and no proxy settings or client certificates:
/// libcurl's defaults apply (the `http_proxy`/`https_proxy` environment variables), except
/// with a `connectionPolicy`, which turns proxies off. Servers
/// are checked against the system's CA store, or the certificates given as
/// `trustedCertificates`. It is the default loader on Linux (see
/// ``ImagePipeline/Configuration/makeDefaultDataLoader()``).
public final class CurlDataLoader: DataLoading, Sendable {
    private let engine: Engine
    private let validator: DataLoader.Validator
    private let settings: Settings

    /// Whether `file:` URLs are read. A server that loads URLs its clients supply should turn
    /// this off, so that a request can never read the server's own files.
    public let allowsLocalFiles: Bool

    /// The longest wait for the next byte of a load, in seconds (a request's own
    /// `timeoutInterval` wins when it is not the default 60 s).
    public var requestTimeout: TimeInterval { settings.requestTimeout }

    /// The longest a whole load may take, redirects included, in seconds.
    public var resourceTimeout: TimeInterval { settings.resourceTimeout }

    /// The most connections open to one host at a time; further loads wait for one.
    public let maximumConnectionsPerHost: Int

    /// The default of ``maximumConnectionsPerHost``: 6, as `URLSession`'s.
    public static let defaultMaximumConnectionsPerHost = 6

    /// The default of the most redirects one load follows (see `init`'s `maximumRedirects`).
    public static let maximumRedirects = 20

    /// Which addresses loads may connect to; nil when every address is.
    public var connectionPolicy: ConnectionPolicy? { settings.connectionPolicy }

    /// The `User-Agent` sent with a request that has none of its own.
    public var userAgent: String? { settings.userAgent }

    /// A PEM file of the certificate authorities `https` servers are checked against, in place
    /// of the system's store; nil for the system's.
    public var trustedCertificates: URL? { settings.trustedCertificates }

    /// The default of ``userAgent``: the program's name, then `Lumen` and libcurl's version
    /// (`"thumbnailer Lumen libcurl/7.88.1"`), as `URLSession` names the program and libcurl.
    /// Some servers refuse a request without a `User-Agent`.
    public static let defaultUserAgent: String = {
        // A product token: no spaces, separators or control characters.
        let name = String(ProcessInfo.processInfo.processName.unicodeScalars.map { scalar -> Character in
            scalar.isASCII && scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "-._".unicodeScalars.contains(scalar)
                ? Character(scalar) : "_"
        })
        let version = curl_version_info(CURLVERSION_FIRST).map { String(cString: $0.pointee.version) } ?? "unknown"
        return (name.isEmpty ? "" : name + " ") + "Lumen libcurl/" + version
    }()

    /// Creates a loader; its thread starts with the first `http` or `https` load.
    /// - Parameters:
    ///   - requestTimeout: the longest wait for the next byte, in seconds (fractions are
    ///     kept); 0 or infinity for none. Default 60.
    ///   - resourceTimeout: the longest a whole load may take, in seconds; 0 or infinity for
    ///     none. Default 600 (10 minutes).
    ///   - maximumConnectionsPerHost: the most connections open to one host at a time
    ///     (default 6); loads beyond it wait for a connection.
    ///   - allowsLocalFiles: whether `file:` URLs are read (default `true`); with `false` they
    ///     fail with ``DataLoader/Error/localFileAccessDenied(_:)``.
    ///   - userAgent: the `User-Agent` sent with a request that has none of its own (default
    ///     ``defaultUserAgent``); nil sends none.
    ///   - trustedCertificates: a PEM file of the certificate authorities to check `https`
    ///     servers against in place of the system's store (a private CA, say); nil (the
    ///     default) for the system's. A server whose certificate they do not vouch for fails
    ///     with `URLError(.serverCertificateUntrusted)`.
    ///   - connectionPolicy: when given, every address libcurl is about to connect to (after
    ///     DNS, for the first request and for every redirect; each address of a host that has
    ///     several) is checked with ``ConnectionPolicy/allows(_:)`` before any connection to
    ///     it: a refused one fails the load with ``DataLoader/Error/addressRefused(_:)``
    ///     unless libcurl reaches another address of the host. Numeric hosts however spelled
    ///     (`http://2130706434/`, `http://0x7f.2/`, `http://[::ffff:127.0.0.2]/`) are checked
    ///     as the address they name. With a policy the proxy environment variables
    ///     (`http_proxy`, `https_proxy`, `all_proxy`) are ignored, so that the address checked
    ///     is the real destination's, not a proxy's. Nil (the default): no check, proxies as
    ///     libcurl's defaults say. A connection kept alive from an earlier load is reused
    ///     without a second check (it was checked when it was opened).
    ///   - maximumRedirects: the most redirects one load follows (default
    ///     ``maximumRedirects``, 20); one more fails with `URLError(.httpTooManyRedirects)`.
    ///     0 follows none: a redirect is then the response.
    ///   - validate: called with each final HTTP response head; the default is
    ///     ``DataLoader/validate(_:_:)``.
    public init(
        requestTimeout: TimeInterval = 60,
        resourceTimeout: TimeInterval = 600,
        maximumConnectionsPerHost: Int = CurlDataLoader.defaultMaximumConnectionsPerHost,
        allowsLocalFiles: Bool = true,
        userAgent: String? = CurlDataLoader.defaultUserAgent,
        trustedCertificates: URL? = nil,
        connectionPolicy: ConnectionPolicy? = nil,
        maximumRedirects: Int = CurlDataLoader.maximumRedirects,
        validate: @escaping DataLoader.Validator = DataLoader.validate
    ) {
        self.settings = Settings(
            requestTimeout: requestTimeout, resourceTimeout: resourceTimeout, maximumRedirects: maximumRedirects,
            userAgent: userAgent, trustedCertificates: trustedCertificates, connectionPolicy: connectionPolicy
        )
        precondition(maximumRedirects >= 0, "CurlDataLoader: maximumRedirects must not be negative")
        self.allowsLocalFiles = allowsLocalFiles
        self.validator = validate
        precondition(maximumConnectionsPerHost > 0, "CurlDataLoader: maximumConnectionsPerHost must be positive")
        precondition(!(userAgent ?? "").contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }), "CurlDataLoader: the user agent must be one line")
        self.maximumConnectionsPerHost = maximumConnectionsPerHost
        self.engine = Engine(maximumConnectionsPerHost: maximumConnectionsPerHost)
    }

    deinit {
        // Loads keep `self` alive, so none is running: the thread just ends.
        engine.shutDown()
    }

    /// Loads `request`: `http` and `https` through libcurl, `file:` and `data:` locally.
    /// See the type's documentation for cancellation, validation and errors.
    public func loadData(
        for request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        guard let url = request.url else { throw URLError(.badURL) }
        if let response = try await DataLoader.loadLocally(url, allowsFiles: allowsLocalFiles, didReceive: didReceive) {
            return response
        }
        switch url.scheme?.lowercased() {
        case "http", "https":
            return try await loadOverHTTP(request, didReceive: didReceive)
        default:
            throw URLError(.unsupportedURL, userInfo: [
                NSLocalizedDescriptionKey: "CurlDataLoader loads http, https, file and data URLs, not \(url.scheme ?? "scheme-less") ones",
                NSURLErrorFailingURLErrorKey: url,
            ])
        }
    }

    private func loadOverHTTP(
        _ request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        try Task.checkCancellation()
        let (events, continuation) = AsyncThrowingStream.makeStream(of: TransferEvent.self)
        let identifier = engine.makeIdentifier()
        let transfer = try Transfer(
            identifier: identifier, request: request, settings: settings, validator: validator, continuation: continuation
        )
        engine.add(transfer)
        // Runs when this task is cancelled while waiting for an event, when `didReceive`
        // threw (the explicit finish below), and when the loop ends the stream (then the
        // cancel finds no transfer). Set after `add`, so that the cancel never comes first.
        continuation.onTermination = { [engine] _ in engine.cancel(identifier) }
        let outcome: Result<URLResponse, any Error>
        var progress = TransferEvent.Progress()
        do {
            outcome = .success(try await TransferEvent.deliver(events, progress: &progress, didReceive: didReceive))
        } catch {
            outcome = .failure(error)
        }
        continuation.finish()
        await transfer.completion.wait()
        return try outcome.get()
    }
}
#endif
