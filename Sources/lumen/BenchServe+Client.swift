import Foundation

/// A blocking HTTP/1.1 client on one keep-alive connection to 127.0.0.1 (reconnects when the
/// server closes). Reads bodies framed by `Content-Length`, chunked transfer encoding, or the
/// end of the connection, so any server can be measured with it.
struct KeepAliveClient {
    /// One exchange's outcome: the status (0 when the exchange failed) and the body's size.
    struct Response {
        var status = 0
        var bodyBytes = 0
        /// The body, only when asked for.
        var body: [UInt8]?
        /// `X-Lumen-Node` (the fleet's nginx says which node answered), when present.
        var node: String?
    }

    let port: Int
    /// Seconds a read may wait before the exchange counts as failed (0: forever).
    var receiveTimeout = 0
    private var fd: Int32 = -1
    private var buffer: [UInt8] = []
    private var chunk = [UInt8](repeating: 0, count: 16 * 1024)

    init(port: Int) { self.port = port }

    /// Connects now (a burst's clients connect before the start line); false when it failed.
    mutating func open() -> Bool {
        if fd < 0 { fd = Self.connect(port, receiveTimeout: receiveTimeout) }
        return fd >= 0
    }

    /// Exchanges that failed on a connection and went again on a new one (a kept-alive
    /// connection the server had closed, or a failure the retry then hid).
    private(set) var retries = 0

    /// GETs `path`; a connection the server closed is reopened once.
    mutating func get(_ path: String, keepingBody: Bool = false) -> Response {
        for attempt in 0..<2 {
            guard open() else { return Response() }
            let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            if sendAll(fd, request), let response = readResponse(keepingBody: keepingBody) { return response }
            close()
            if attempt == 0 { retries += 1 }
        }
        return Response()
    }

    mutating func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        buffer.removeAll()
    }


    /// Reads what the socket has into `buffer` (through one small buffer per connection: a
    /// burst's 200 clients share the process with the server they measure).
    private mutating func fill() -> Bool {
        let fd = self.fd
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return false }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    /// The index just past the next `separator` at or after `start`, reading more as needed.
    private mutating func find(_ separator: [UInt8], from start: Int) -> Range<Int>? {
        while true {
            if let range = buffer[start...].firstRange(of: separator) { return range }
            guard fill() else { return nil }
        }
    }

    private mutating func readResponse(keepingBody: Bool) -> Response? {
        let lineEnd = Array("\r\n".utf8)
        guard let headEnd = find(Array("\r\n\r\n".utf8), from: 0) else { return nil }
        let head = String(decoding: buffer[..<headEnd.lowerBound], as: UTF8.self)
        let lines = head.components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { return nil }
        var length: Int?
        var isChunked = false, closes = false
        var node: String?
        for line in lines.dropFirst() {
            if line.lowercased().hasPrefix("x-lumen-node:") {
                node = String(line.dropFirst("x-lumen-node:".count)).trimmingCharacters(in: .whitespaces)
            }
            let lower = line.lowercased()
            func value(_ name: String) -> String { String(lower.dropFirst(name.count)).trimmingCharacters(in: .whitespaces) }
            if lower.hasPrefix("content-length:") { length = Int(value("content-length:")) }
            if lower.hasPrefix("transfer-encoding:") { isChunked = value("transfer-encoding:").contains("chunked") }
            if lower.hasPrefix("connection:") { closes = value("connection:") == "close" }
        }
        var body: [UInt8] = []
        var bodyBytes = 0
        var consumed = headEnd.upperBound
        if isChunked {
            while true {
                guard let sizeEnd = find(lineEnd, from: consumed) else { return nil }
                let sizeText = String(decoding: buffer[consumed..<sizeEnd.lowerBound], as: UTF8.self)
                guard let size = Int(sizeText.split(separator: ";").first.map(String.init) ?? "", radix: 16) else { return nil }
                consumed = sizeEnd.upperBound
                if size == 0 {
                    guard let trailerEnd = find(lineEnd, from: consumed) else { return nil }
                    consumed = trailerEnd.upperBound
                    break
                }
                while buffer.count < consumed + size + 2 { guard fill() else { return nil } }
                if keepingBody { body += buffer[consumed..<consumed + size] }
                bodyBytes += size
                consumed += size + 2
            }
        } else if let length {
            while buffer.count - consumed < length { guard fill() else { return nil } }
            if keepingBody { body = Array(buffer[consumed..<consumed + length]) }
            bodyBytes = length
            consumed += length
        } else if status != 204 && status != 304 {
            while fill() {}
            closes = true
            bodyBytes = buffer.count - consumed
            if keepingBody { body = Array(buffer[consumed...]) }
            consumed = buffer.count
        }
        buffer.removeFirst(consumed)
        if closes { close() }
        return Response(status: status, bodyBytes: bodyBytes, body: keepingBody ? body : nil, node: node)
    }

    static func connect(_ port: Int, receiveTimeout: Int = 0) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { Glibc.close(fd); return -1 }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if receiveTimeout > 0 {
            var limit = timeval(tv_sec: receiveTimeout, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        }
        return fd
    }
}

/// Holds every client of a workload until all of them are connected, then lets them go at
/// once and notes when: a burst is then 200 clients at the same moment, not 200 thread starts.
final class StartLine: @unchecked Sendable { // every field is read and written under `condition`
    private let condition = NSCondition()
    private let count: Int
    private var arrived = 0
    private var time = 0.0

    init(count: Int) { self.count = count }

    /// Waits until `count` clients have arrived.
    func arrive() {
        condition.lock()
        arrived += 1
        if arrived == count {
            time = monotonicSeconds()
            condition.broadcast()
        }
        while arrived < count { condition.wait() }
        condition.unlock()
    }

    /// When the last client arrived.
    var startedAt: Double {
        condition.lock()
        defer { condition.unlock() }
        return time
    }
}

/// Peak resident memory of processes: this one, or another server's processes and their
/// children (nginx's workers, thumbor's forks), through `/proc/PID/status` `VmHWM`, which
/// writing `5` to `/proc/PID/clear_refs` resets.
enum PeakMemory {
    /// `pids` and every descendant of them alive now.
    static func tree(_ pids: [Int32]) -> [Int32] {
        var all: [Int32] = []
        var pending = pids
        while let pid = pending.popLast() {
            guard !all.contains(pid) else { continue }
            all.append(pid)
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            for task in tasks {
                let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/children", encoding: .utf8)) ?? ""
                pending += children.split(separator: " ").compactMap { Int32($0) }
            }
        }
        return all
    }

    /// Starts a new peak for each of `pids` (the current resident size becomes the peak).
    static func reset(_ pids: [Int32]) {
        for pid in pids { try? "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8) }
    }

    /// The sum of the peaks of `pids` since their reset, in bytes (pages shared between
    /// forked processes count once per process).
    static func sum(_ pids: [Int32]) -> Int {
        pids.reduce(0) { total, pid in
            let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
            let kilobytes = line?.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return total + kilobytes * 1024
        }
    }
}

/// `wrk` as a second opinion on a hot URL: its requests per second, nil when it cannot run.
enum Wrk {
    static let arguments = ["-t2", "-c16", "-d5s"]

    static func requestsPerSecond(_ url: String) -> Double? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["wrk"] + arguments + [url]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        // Responses other than 2xx/3xx make the figure meaningless.
        if text.contains("Non-2xx or 3xx responses") { return nil }
        let line = text.split(separator: "\n").first { $0.hasPrefix("Requests/sec:") }
        return line.flatMap { Double($0.dropFirst("Requests/sec:".count).trimmingCharacters(in: .whitespaces)) }
    }
}

/// Writes all of `bytes` to the socket `fd` (no SIGPIPE); `false` when a write fails first.
func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n > 0 else { return false }
        offset += n
    }
    return true
}
