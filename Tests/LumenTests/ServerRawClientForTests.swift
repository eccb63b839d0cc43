import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A blocking HTTP/1.1 client over a raw socket, for looking at the server's bytes.
final class RawHTTPClient: @unchecked Sendable { // reason: used from one test at a time; the socket is its only state
    struct Response {
        var status: Int
        var headers: [(String, String)]
        var body = Data()
        var chunkCount = 0

        func header(_ name: String) -> String? {
            headers.first { $0.0 == name.lowercased() }?.1
        }
    }

    struct SocketError: Error { let call: String; let code: Int32 }

    private let fd: Int32
    private var buffer = [UInt8]()

    init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SocketError(call: "socket", code: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw SocketError(call: "connect", code: code)
        }
        // A hang guard: a read that gets nothing for 20 s fails instead of blocking forever.
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { Glibc.close(fd) }

    func close() { _ = shutdown(fd, Int32(SHUT_RDWR)) }

    func send(_ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }

    func request(_ text: String, isHead: Bool = false) -> Response? {
        send(text)
        return readResponse(isHead: isHead)
    }

    /// Reads one response; the body is delimited by Content-Length, chunked framing or the
    /// end of the stream, and is returned short if the stream ends early.
    func readResponse(isHead: Bool = false) -> Response? {
        guard let head = readHead(), let text = String(bytes: head, encoding: .utf8) else { return nil }
        var lines = text.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        var response = Response(status: status, headers: lines.compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        })
        if isHead || status == 304 { return response }
        if let length = response.header("content-length").flatMap(Int.init) {
            response.body = Data(take(length))
        } else if response.header("transfer-encoding") == "chunked" {
            while let sizeLine = readLine(), let size = Int(sizeLine, radix: 16) {
                if size == 0 {
                    _ = readLine()
                    break
                }
                response.body.append(contentsOf: take(size))
                response.chunkCount += 1
                _ = readLine()
            }
        } else {
            while fill() {}
            response.body = Data(buffer)
            buffer.removeAll()
        }
        return response
    }

    /// Reads whatever arrives next (at least one byte unless the stream ended).
    func readSome() -> Int {
        let before = buffer.count
        _ = fill()
        return buffer.count - before
    }

    /// Whether the server closed the connection: reads to the end of the stream, false if
    /// the read timed out instead.
    func isClosedByServer() -> Bool {
        while fill() {}
        return lastReadEnded
    }

    private var lastReadEnded = false

    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: chunk[..<n])
                return true
            }
            if n < 0 && errno == EINTR { continue }
            // End of stream or reset (closed), or a timeout (not closed).
            lastReadEnded = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)
            return false
        }
    }

    private func readHead() -> [UInt8]? {
        while true {
            if let end = find([13, 10, 13, 10]) {
                let head = Array(buffer[..<end])
                buffer.removeFirst(end + 4)
                return head
            }
            guard fill() else { return nil }
        }
    }

    private func readLine() -> String? {
        while true {
            if let end = find([13, 10]) {
                let line = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 2)
                return line
            }
            guard fill() else { return nil }
        }
    }

    private func take(_ count: Int) -> [UInt8] {
        while buffer.count < count, fill() {}
        let n = min(count, buffer.count)
        defer { buffer.removeFirst(n) }
        return Array(buffer[..<n])
    }

    private func find(_ pattern: [UInt8]) -> Int? {
        guard buffer.count >= pattern.count else { return nil }
        for i in 0...(buffer.count - pattern.count) where buffer[i..<(i + pattern.count)].elementsEqual(pattern) {
            return i
        }
        return nil
    }
}
