import Foundation
import Lumen

/// One access-log line per request. The source URL is logged without its user part (which
/// may hold credentials), the signature segment is not logged at all, and nothing a client
/// sent reaches the line unescaped.
enum AccessLog {
    static func line(_ request: HTTPRequest, _ response: HTTPResponse, seconds: Double,
                     format: ImageServer.Configuration.LogFormat, maximumSide: Int) -> String {
        let (options, source) = describe(request.path, maximumSide: maximumSide)
        let millis = (seconds * 1000 * 10).rounded() / 10
        switch format {
        case .text:
            return "\(timestamp()) \(request.clientAddress) \(clean(request.method)) \(response.status) "
                + "\(response.body.count)B \(millis)ms options=\(options) source=\(source)"
        case .json:
            let object: [String: Any] = [
                "time": timestamp(), "client": request.clientAddress, "method": clean(request.method),
                "status": response.status, "bytes": response.body.count, "durationMillis": millis,
                "options": options, "source": source,
            ]
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
            return String(decoding: data, as: UTF8.self)
        }
    }

    /// A diagnostic message (Redis state, cache problems, a failed stage) as one JSON object,
    /// for `--log-format json`: `{"message": …, "time": …}`, secrets in URLs removed.
    static func diagnostic(_ message: String) -> String {
        let object: [String: Any] = ["time": timestamp(), "message": LogRedaction.scrub(message)]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// The options segment and the redacted source of an image path, or what the path is.
    static func describe(_ path: String, maximumSide: Int) -> (String, String) {
        if path == "/health" || path == "/metrics" { return ("-", path) }
        guard let parsed = try? ImagePath(path, maximumSide: maximumSide) else {
            return ("-", "<unparsed path of \(path.utf8.count) bytes>")
        }
        return (parsed.options.canonical, redacted(parsed.sourceText))
    }

    /// `scheme://user:password@host/…` → `scheme://host/…`; the query is dropped too (signed
    /// origin URLs carry tokens there).
    static func redacted(_ source: String) -> String {
        guard var components = URLComponents(string: source) else { return "<unparsable source>" }
        components.user = nil
        components.password = nil
        components.query = nil
        components.fragment = nil
        return clean(components.string ?? "<unparsable source>")
    }

    private static func clean(_ text: String) -> String {
        String(text.prefix(512).map { $0.isASCII && !$0.isNewline && $0 != "\0" && $0 != " " ? $0 : "?" })
    }

    private static func timestamp() -> String {
        Date().formatted(.iso8601)
    }
}
