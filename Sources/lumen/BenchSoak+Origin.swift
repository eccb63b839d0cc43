import Foundation
import Synchronization

/// The soak's origin: an HTTP/1.1 server on 127.0.0.1 (a thread per connection, keep-alive)
/// whose every response is chosen by its path, `/s/{source}/{fault}/{nonce}`, so the client
/// that made the URL knows which fault it asked for and which status the contract then owes.
/// The client's choices come from the seed, so a run's faults are reproducible.
final class FaultyOrigin: @unchecked Sendable { // `listener` and `sources` never change after init; counters sit in a Mutex
    /// What the origin does with one request.
    enum Fault: String, CaseIterable, Codable, Sendable {
        /// 200, the whole body at once.
        case good
        /// 200, the body in 10 pieces 20 ms apart (well inside the source timeout).
        case trickle
        /// Half the body, then a TCP reset (SO_LINGER 0).
        case reset
        /// The head and a quarter of the body, then nothing for longer than the source timeout.
        case stall
        /// 500, 502 or 503 with a short text body.
        case error5xx = "5xx"
        /// `Content-Length` of the whole body, half of it sent, then the connection closed.
        case truncated
        /// `Content-Length` claiming 1000 bytes more than the body; the body, then closed.
        case lieLong = "lie-long"
        /// `Content-Length` of the body, then, 20 ms later, 700 bytes more than it claims on a
        /// connection kept open (a reused connection would read them as the next response).
        case lieShort = "lie-short"
        /// A response head that is not HTTP.
        case garbageHead = "garbage-head"

        /// The statuses the contract allows for a request whose source does this.
        var expected: Set<Int> {
            switch self {
            case .good, .trickle, .lieShort: return [200]
            case .reset, .error5xx, .truncated, .lieLong, .garbageHead: return [502]
            case .stall: return [504]
            }
        }
    }

    let port: Int
    let sources: [Data]
    private let listener: Int32
    private let stallSeconds: Double
    private let state = Mutex((injected: [String: Int](), requests: 0, stopped: false))

    init(sources: [Data], stallSeconds: Double) throws {
        self.sources = sources
        self.stallSeconds = stallSeconds
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw UsageError("origin: socket failed (errno \(errno))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 256) == 0 else { close(fd); throw UsageError("origin: bind/listen failed (errno \(errno))") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// The source URL the server is asked to fetch.
    func url(source: Int, fault: Fault, nonce: UInt64) -> String {
        "http://127.0.0.1:\(port)/s/\(source)/\(fault.rawValue)/\(nonce)"
    }

    /// Faults performed so far, by kind (a server that retries a failed fetch meets its fault again).
    var injected: [String: Int] { state.withLock { $0.injected } }
    var requests: Int { state.withLock { $0.requests } }

    func stop() {
        state.withLock { $0.stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if state.withLock({ $0.stopped }) { return }
                continue
            }
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    private func serve(_ fd: Int32) {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        defer { close(fd) }
        while true {
            // One request head (no body: GET).
            var headEnd = buffer.firstRange(of: Array("\r\n\r\n".utf8))
            while headEnd == nil {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0, buffer.count < 64 * 1024 else { return }
                buffer += chunk[0..<n]
                headEnd = buffer.firstRange(of: Array("\r\n\r\n".utf8))
            }
            guard let headEnd else { return }
            let head = String(decoding: buffer[..<headEnd.lowerBound], as: UTF8.self)
            buffer.removeFirst(headEnd.upperBound)
            let target = head.split(separator: " ").dropFirst().first.map(String.init) ?? ""
            let parts = target.split(separator: "/")
            guard parts.count == 4, parts[0] == "s", let index = Int(parts[1]), sources.indices.contains(index),
                  let fault = Fault(rawValue: String(parts[2])) else {
                _ = sendAll(fd, Array("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".utf8))
                continue
            }
            let isHead = head.hasPrefix("HEAD ")
            let nonce = UInt64(parts[3]) ?? 0
            state.withLock { $0.requests += 1; $0.injected[fault.rawValue, default: 0] += 1 }
            guard respond(fd, fault: fault, body: [UInt8](sources[index]), nonce: nonce, isHead: isHead) else { return }
        }
    }

    /// Performs `fault`; false when the connection is done.
    private func respond(_ fd: Int32, fault: Fault, body: [UInt8], nonce: UInt64, isHead: Bool) -> Bool {
        func head(_ length: Int, status: String = "200 OK", type: String = "image/octet-stream") -> [UInt8] {
            Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(length)\r\nCache-Control: max-age=3600\r\n\r\n".utf8)
        }
        let half = body.count / 2
        switch fault {
        case .good:
            return sendAll(fd, head(body.count) + (isHead ? [] : body))
        case .trickle:
            guard sendAll(fd, head(body.count)) else { return false }
            if isHead { return true }
            let piece = max(1, (body.count + 9) / 10)
            for start in stride(from: 0, to: body.count, by: piece) {
                guard sendAll(fd, Array(body[start..<min(body.count, start + piece)])) else { return false }
                usleep(20_000)
            }
            return true
        case .reset:
            _ = sendAll(fd, head(body.count) + body[..<half])
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            return false
        case .stall:
            _ = sendAll(fd, head(body.count) + body[..<(body.count / 4)])
            usleep(useconds_t(stallSeconds * 1_000_000))
            return false
        case .error5xx:
            let status = ["500 Internal Server Error", "502 Bad Gateway", "503 Service Unavailable"][Int(nonce % 3)]
            let text = Array("origin failure\n".utf8)
            return sendAll(fd, head(text.count, status: status, type: "text/plain") + text)
        case .truncated:
            _ = sendAll(fd, head(body.count) + body[..<half])
            return false
        case .lieLong:
            _ = sendAll(fd, head(body.count + 1000) + body)
            return false
        case .lieShort:
            // The extra bytes a moment later: a client that has read its Content-Length by
            // then finds them in the idle connection, not in the same read as the body.
            guard sendAll(fd, head(body.count) + (isHead ? [] : body)) else { return false }
            usleep(20_000)
            return sendAll(fd, [UInt8](repeating: 0x5A, count: 700))
        case .garbageHead:
            _ = sendAll(fd, Array("HTTP/1.1 banana\r\nContent-Length: x\r\n\u{01}\u{02}\r\n\r\n".utf8) + body[..<min(64, body.count)])
            return false
        }
    }
}
