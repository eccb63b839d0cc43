import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Synchronization

/// `lumen bench serve`: `ImageServer` and a loopback origin in this process, driven by an
/// HTTP/1.1 keep-alive client of its own over three workloads: distinct sources, a burst of
/// clients for one new source at three sizes, and hot (cached) results.
enum BenchServe {
    struct Workload: Codable {
        var name: String
        var requests = 0
        var failures = 0
        var requestsPerSecond = 0.0
        var p50Millis = 0.0
        var p99Millis = 0.0
        var originFetches = 0
        var decodes = 0
        var peakRSSBytes = 0
    }

    static func run(_ arguments: [String]) async -> Int32 {
        let json = arguments.contains("--json")
        if let unknown = arguments.first(where: { $0 != "--json" }) {
            printError("lumen bench serve: unknown argument '\(unknown)'\nusage: lumen bench serve [--json]")
            return 2
        }
        do {
            let results = try await measure()
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                writeOut(String(decoding: try encoder.encode(Dictionary(uniqueKeysWithValues: results.map { ($0.name, $0) })), as: UTF8.self) + "\n")
            } else {
                writeOut("lumen bench serve (in-process server, loopback origin, keep-alive client)\n")
                writeOut("workload   requests  failures   req/s     p50 ms   p99 ms  origin fetches  decodes  peak RSS MB\n")
                for r in results {
                    writeOut(String(format: "%-9@ %9d %9d %8.1f %9.2f %8.2f %15d %8d %12.1f\n",
                                    r.name as NSString, r.requests, r.failures, r.requestsPerSecond, r.p50Millis, r.p99Millis,
                                    r.originFetches, r.decodes, Double(r.peakRSSBytes) / 1e6))
                }
            }
            return results.allSatisfy { $0.failures == 0 } ? 0 : 1
        } catch {
            printError("lumen bench serve: \(error)")
            return 1
        }
    }

    static func measure() async throws -> [Workload] {
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let sourceCount = 24
        writeOut("making \(sourceCount + 1) photo-like 2048x1365 JPEG sources...\n")
        for i in 0...sourceCount {
            let photo = SyntheticPhotos.photo(width: 2048, height: 1365, seed: UInt64(i + 1))
            origin.serve(path: "/p\(i).jpg", data: try photo.encode(as: .jpeg(quality: 85)), contentType: "image/jpeg")
        }
        var configuration = ImageServer.Configuration()
        configuration.port = 0
        configuration.allowsUnsigned = true
        configuration.allowedSourceAddresses = [IPAddressRange("127.0.0.1/32")!]
        let server = try ImageServer(configuration: configuration)
        defer { server.stop() }
        func path(_ options: String, _ i: Int) -> String {
            URLSigner.unsignedPath(options: options, source: origin.url(for: "/p\(i).jpg").absoluteString)
        }
        var results: [Workload] = []
        // (1) distinct: each source once at 512x512 contain, 2 clients.
        let distinct = (1...sourceCount).map { path("w:512,h:512,fit:contain", $0) }
        results.append(try await drive("distinct", server: server, clients: 2, paths: distinct))
        // (2) burst: 200 clients at once for one new source at 3 sizes.
        let sizes = ["w:256", "w:512,h:512", "w:128,h:128,fit:cover"]
        let burst = (0..<200).map { path(sizes[$0 % 3], 0) }
        results.append(try await drive("burst", server: server, clients: 200, paths: burst))
        // (3) hot: a cached result, again and again.
        let hot = Array(repeating: path("w:512,h:512,fit:contain", 1), count: 4000)
        results.append(try await drive("hot", server: server, clients: 2, paths: hot))
        return results
    }

    /// Sends `paths` from `clients` keep-alive connections (each takes the next path).
    static func drive(_ name: String, server: ImageServer, clients: Int, paths: [String]) async throws -> Workload {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8) // resets VmHWM
        let before = server.metrics
        let tally = Tally()
        let port = server.port
        let started = monotonicSeconds()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                group.addTask {
                    await onThread {
                        var connection = KeepAliveClient(port: port)
                        while true {
                            let i = tally.next.add(1, ordering: .relaxed).oldValue
                            guard i < paths.count else { break }
                            let t0 = monotonicSeconds()
                            let status = connection.get(paths[i])
                            let seconds = monotonicSeconds() - t0
                            if status != 200 { tally.failures.add(1, ordering: .relaxed) }
                            tally.latencies.withLock { $0.append(seconds) }
                        }
                        connection.close()
                    }
                }
            }
        }
        let elapsed = monotonicSeconds() - started
        let after = server.metrics
        let sorted = tally.latencies.withLock { $0 }.sorted()
        func percentile(_ p: Double) -> Double { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000 }
        return Workload(
            name: name, requests: paths.count, failures: tally.failures.load(ordering: .relaxed),
            requestsPerSecond: Double(paths.count) / elapsed, p50Millis: percentile(0.5), p99Millis: percentile(0.99),
            originFetches: after.originFetches - before.originFetches, decodes: after.decodes - before.decodes,
            peakRSSBytes: peakResidentBytes())
    }

    final class Tally: Sendable {
        let next = Atomic<Int>(0)
        let failures = Atomic<Int>(0)
        let latencies = Mutex<[Double]>([])
    }

    static func onThread(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                body()
                continuation.resume()
            }
        }
    }
}

/// A blocking HTTP/1.1 client on one keep-alive connection to 127.0.0.1 (reconnects when the
/// server closes).
struct KeepAliveClient {
    let port: Int
    private var fd: Int32 = -1
    private var buffer: [UInt8] = []

    init(port: Int) { self.port = port }

    /// GETs `path`; the status, or 0 when the exchange failed.
    mutating func get(_ path: String) -> Int {
        for _ in 0..<2 {
            if fd < 0 { fd = Self.connect(port) }
            guard fd >= 0 else { return 0 }
            let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            if send(request), let status = readResponse() { return status }
            close()
        }
        return 0
    }

    mutating func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        buffer.removeAll()
    }

    private func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }

    private mutating func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = recv(fd, &chunk, chunk.count, 0)
        guard n > 0 else { return false }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    private mutating func readResponse() -> Int? {
        let separator = Array("\r\n\r\n".utf8)
        var headEnd = buffer.firstRange(of: separator)
        while headEnd == nil {
            guard fill() else { return nil }
            headEnd = buffer.firstRange(of: separator)
        }
        guard let end = headEnd else { return nil }
        let head = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
        let lines = head.components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { return nil }
        var length = 0
        for line in lines.dropFirst() where line.lowercased().hasPrefix("content-length:") {
            length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        while buffer.count - end.upperBound < length {
            guard fill() else { return nil }
        }
        buffer.removeFirst(end.upperBound + length)
        return status
    }

    private static func connect(_ port: Int) -> Int32 {
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
        return fd
    }
}
