import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The server's HTTP/1.1 vocabulary: request heads, status reasons, dates.

/// A parsed request line and headers.
struct HTTPRequestHead: Sendable {
    var method: String
    /// The path without the query string, always starting with "/".
    var path: String
    /// The request target in origin form: the path with its query string.
    var target: String
    var version: String
    var headers: [(name: String, value: String)]
    var arrival: Date
    /// The body, once read.
    var body = Data()

    /// Parses a request head (without the final blank line); nil when it is malformed.
    init?(parsing bytes: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        var lines = text.components(separatedBy: "\r\n")
        guard !lines.isEmpty else { return nil }
        let requestLine = lines.removeFirst().split(separator: " ", omittingEmptySubsequences: false)
        guard requestLine.count == 3 else { return nil }
        let method = String(requestLine[0])
        var target = String(requestLine[1])
        let version = String(requestLine[2])
        guard !method.isEmpty, method.allSatisfy({ $0.isLetter && $0.isUppercase }),
              version == "HTTP/1.1" || version == "HTTP/1.0" else { return nil }
        if target.hasPrefix("http://") {
            // Absolute form: drop the scheme and authority.
            let rest = target.dropFirst("http://".count)
            target = rest.firstIndex(of: "/").map { String(rest[$0...]) } ?? "/"
        }
        guard target.hasPrefix("/") else { return nil }
        self.target = target
        if let query = target.firstIndex(where: { $0 == "?" || $0 == "#" }) { target = String(target[..<query]) }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = line[..<colon]
            guard !name.isEmpty, !name.contains(" "), !name.contains("\t") else { return nil }
            headers.append((String(name).lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        self.method = method
        self.path = target
        self.version = version
        self.headers = headers
        self.arrival = Date()
    }

    var recorded: LoopbackServer.RecordedRequest {
        var fields: [String: String] = [:]
        for (name, value) in headers {
            fields[name] = fields[name].map { $0 + ", " + value } ?? value
        }
        return LoopbackServer.RecordedRequest(method: method, path: path, target: target, headers: fields, body: body)
    }

    /// The value of the first header named `name` (lowercase), if any.
    func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }

    /// HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 only on
    /// `Connection: keep-alive`.
    var wantsKeepAlive: Bool {
        let connection = header("connection")?.lowercased() ?? ""
        if version == "HTTP/1.0" { return connection.contains("keep-alive") }
        return !connection.contains("close")
    }
}

enum HTTPStatus {
    static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 103: "Early Hints"
        case 200: "OK"
        case 206: "Partial Content"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 413: "Content Too Large"
        case 416: "Range Not Satisfiable"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

/// IMF-fixdate formatting and parsing (`Sun, 06 Nov 1994 08:49:37 GMT`), in UTC.
enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// Seconds since 1970 for an IMF-fixdate, or nil if `text` is not one.
    static func parse(_ text: String) -> Int? {
        let fields = text.split(separator: " ")
        guard fields.count == 6, fields[5] == "GMT",
              let day = Int(fields[1]), let month = months.firstIndex(of: String(fields[2])),
              let year = Int(fields[3]) else { return nil }
        let time = fields[4].split(separator: ":")
        guard time.count == 3, let h = Int(time[0]), let m = Int(time[1]), let s = Int(time[2]),
              (1...31).contains(day), (0..<24).contains(h), (0..<60).contains(m), (0...60).contains(s) else { return nil }
        return daysFromCivil(year: year, month: month + 1, day: day) * 86_400 + h * 3600 + m * 60 + s
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
