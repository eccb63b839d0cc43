import Foundation

/// One HTTP request as the server's handler sees it: what the HTTP library parsed, before
/// anything of Lumen's looked at it.
struct HTTPRequest: Sendable {
    /// `GET`, `HEAD`, or whatever else the client sent.
    var method: String
    /// The request target's path, exactly as sent (not percent-decoded), without the query.
    var path: String
    /// The headers, names as sent.
    var headers: [(name: String, value: String)]
    /// The client's address as text, for the access log.
    var clientAddress: String

    /// The first value of header `name` (case-insensitive).
    func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// How many headers named `name` the request carries.
    func headerCount(_ name: String) -> Int {
        headers.count { $0.name.caseInsensitiveCompare(name) == .orderedSame }
    }
}

/// One HTTP response: status, headers (`Content-Length` and `Date` are the HTTP layer's), body.
struct HTTPResponse: Sendable {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: Data

    init(status: Int, headers: [(name: String, value: String)] = [], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// An error response: the status with a one-line reason as `text/plain`.
    static func error(_ status: Int, _ reason: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(
            status: status,
            headers: [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")] + headers,
            body: Data((reason + "\n").utf8))
    }
}

/// A handler's answer: at once (a cached result, a refusal), or later, from work the HTTP
/// layer runs while the connection is suspended, so that no HTTP thread waits on a download.
enum HTTPReply: Sendable {
    case now(HTTPResponse)
    case later(@Sendable () async -> HTTPResponse)
}

/// What answers requests.
protocol HTTPHandling: Sendable {
    func respond(to request: HTTPRequest) -> HTTPReply
    /// Called once a response has been handed to the HTTP layer (for the access log).
    func didRespond(to request: HTTPRequest, with response: HTTPResponse, seconds: Double)
}

/// The HTTP layer: a listener that turns connections into ``HTTPRequest``s for a handler.
/// libmicrohttpd's (``MicroHTTPServer``) is the one Lumen ships; the protocol keeps the
/// library out of the rest of the server, so that it could be swapped.
protocol HTTPServing: AnyObject, Sendable {
    /// The port it listens on.
    var port: Int { get }
    /// Stops accepting new connections; open ones are served on.
    func stopAccepting()
    /// Requests being answered right now.
    var inFlightCount: Int { get }
    /// Closes every connection and stops. Requests still running are answered as cancelled.
    func stop()
}

/// Settings of the HTTP layer.
struct HTTPSettings: Sendable {
    var host: String
    var port: Int
    var threads: Int
    var maximumConnections: Int
    var clientTimeout: Int
    /// Bytes per connection for the request line and headers.
    var headerMemory: Int
}
