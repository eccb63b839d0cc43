import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A response as a test reads it.
struct RawResponse: Sendable {
    var status: Int
    var headers: [(String, String)]
    var body: Data

    func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }
}

/// A blocking HTTP/1.1 client over a loopback socket: it sends exactly the bytes it is given
/// (so tests can send malformed requests) and reads until the server closes.
enum RawHTTP {
    struct Failure: Error, CustomStringConvertible { let description: String }

    /// Connects to 127.0.0.1:`port` (or ::1 with `v6`).
    static func connect(port: Int, v6: Bool = false) throws -> Int32 {
        let fd = socket(v6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(errno)") }
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var result: Int32
        if v6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            address.sin6_addr = in6addr_loopback
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard result == 0 else { close(fd); throw Failure(description: "connect: \(errno)") }
        return fd
    }

    static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }

    /// Reads until the server closes (or the 60 s receive timeout).
    static func readAll(_ fd: Int32) -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { break }
            data.append(contentsOf: buffer[0..<n])
        }
        return data
    }

    /// Sends `raw` and parses the one response the server sends before closing (the request
    /// should ask for `Connection: close`, or be one the server refuses).
    static func exchange(port: Int, raw: String, v6: Bool = false) throws -> RawResponse {
        let fd = try connect(port: port, v6: v6)
        defer { close(fd) }
        // No half-close: a server may take the client's end of input for a disconnect.
        _ = write(fd, Array(raw.utf8))
        return try parse(readAll(fd))
    }

    /// A well-formed request with `Connection: close`.
    static func get(port: Int, _ path: String, method: String = "GET", headers: [String: String] = [:]) throws -> RawResponse {
        var raw = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { raw += "\(name): \(value)\r\n" }
        return try exchange(port: port, raw: raw + "\r\n")
    }

    /// Runs `get` off the calling task's thread (it blocks).
    static func fetch(port: Int, _ path: String, method: String = "GET", headers: [String: String] = [:]) async throws -> RawResponse {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try get(port: port, path, method: method, headers: headers) })
            }
        }
    }

    static func parse(_ data: Data) throws -> RawResponse {
        let bytes = Array(data)
        guard let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else {
            throw Failure(description: "no complete response head in \(bytes.count) bytes")
        }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = head[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw Failure(description: "bad status line \(head[0])") }
        let headers = head.dropFirst().compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        var body = Data(bytes[end.upperBound...])
        if let length = headers.first(where: { $0.0.lowercased() == "content-length" }).flatMap({ Int($0.1) }), body.count > length {
            body = body.prefix(length)
        }
        return RawResponse(status: status, headers: headers, body: body)
    }
}
