import Dispatch
import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Synchronization

/// The soak's requests: what each client sends, what the contract owes it, and the reference
/// every 200 is compared with.
extension BenchSoak {
    /// One image the server is asked for: a source and the options of the URL.
    struct Variant: Hashable, Sendable {
        var source: Int
        var width: Int
        var height: Int?
        var isCover = false
        var format = "jpeg"

        var options: String {
            var parts = ["w:\(width)"]
            if let height { parts.append("h:\(height)") }
            if isCover { parts.append("fit:cover") }
            parts.append("f:\(format)")
            return parts.joined(separator: ",")
        }

        static let widths = [64, 100, 160, 256]
        static let heights: [Int?] = [nil, 64, 120, 200]
        static let formats = ["jpeg", "png", "webp"]

        static func random(sources: Int, _ rng: inout SplitMix64) -> Variant {
            let height = heights[Int(rng.next() % UInt64(heights.count))]
            return Variant(source: Int(rng.next() % UInt64(sources)), width: widths[Int(rng.next() % UInt64(widths.count))],
                           height: height, isCover: height != nil && rng.next() % 3 == 0,
                           format: formats[Int(rng.next() % UInt64(formats.count))])
        }
    }

    /// References: each variant made once by Lumen's own pipeline from the pristine source
    /// bytes (the server's decode size and processors for these options), encoded as the
    /// server encodes it and decoded again, so a right answer differs only by rounding.
    final class References: Sendable {
        let sources: [Data]
        private let pipeline = ImagePipeline(configuration: ImagePipeline.Configuration(dataLoader: MockDataLoader()))
        private let made = Mutex<[Variant: Bitmap]>([:])

        init(sources: [Data]) { self.sources = sources }

        func reference(_ variant: Variant) throws -> Bitmap {
            if let bitmap = made.withLock({ $0[variant] }) { return bitmap }
            let data = sources[variant.source]
            let mode: ContentMode = variant.isCover ? .aspectFill : .aspectFit
            let thumbnail: DecodeSize = variant.height.map { .size(width: variant.width, height: $0, contentMode: mode) }
                ?? .size(width: variant.width, height: 1 << 24, contentMode: .aspectFit)
            var processors: [any ImageProcessing] = []
            if variant.isCover, let height = variant.height {
                processors.append(ImageProcessors.Resize(size: (variant.width, height), contentMode: .aspectFill, crop: true, upscale: false))
            }
            let request = ImageRequest(id: "soak-source-\(variant.source)", data: { data }, processors: processors, thumbnail: thumbnail)
            let pipeline = self.pipeline
            let image = try blocking { try await pipeline.image(for: request).image }
            let encoded: Data
            switch variant.format {
            case "png": encoded = try image.encode(as: .png)
            case "webp": encoded = try image.encode(as: .webp(quality: 80))
            default: encoded = try (image.format.hasAlpha ? image.flattened(onto: (255, 255, 255)) : image).encode(as: .jpeg(quality: 85))
            }
            let bitmap = try ImageDecoder.decode(encoded).bitmap
            made.withLock { $0[variant] = bitmap }
            return bitmap
        }

        /// Mean absolute difference per channel byte; infinity when the geometry differs.
        static func meanDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
            guard a.width == b.width, a.height == b.height, a.pixels.count == b.pixels.count, !a.pixels.isEmpty else { return .infinity }
            return Double(zip(a.pixels, b.pixels).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }) / Double(a.pixels.count)
        }
    }

    /// Runs `body` on the cooperative pool and waits for it (client threads are plain threads).
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let outcome: Result<T, any Error>
            do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// Every outcome of the run, by kind of request and by cache phase.
    final class Tally: Sendable {
        struct State {
            var byKind: [String: [String: Int]] = [:]
            var byStatus: [String: Int] = [:]
            var byPhase: [String: [String: Int]] = [:]
            var requests = 0
            var checkedImages = 0
            var wrongImages = 0
            var maximumMeanDifference = 0.0
            var unexpected = 0
            var samples: [String] = []
            /// Exchanges the clients sent again on a new connection (see `KeepAliveClient.retries`).
            var clientRetries = 0
        }

        let state = Mutex(State())
        let phase = Mutex("normal")

        /// One response (`status` 0: no response at all); `detail` names it in the samples.
        func record(_ kind: String, status: Int, expected: Set<Int>, detail: @autoclosure () -> String) {
            let statusKey = status == 0 ? "none" : status == BenchSoak.closedWithoutResponse ? "closed" : String(status)
            let phase = self.phase.withLock { $0 }
            state.withLock { s in
                s.requests += 1
                s.byKind[kind, default: [:]][statusKey, default: 0] += 1
                s.byStatus[statusKey, default: 0] += 1
                s.byPhase[phase, default: [:]][statusKey, default: 0] += 1
                if !expected.contains(status) {
                    s.unexpected += 1
                    if s.samples.count < 20 { s.samples.append("\(kind) → \(statusKey) (allowed: \(Self.describe(expected))): \(detail())") }
                }
            }
        }

        static func describe(_ statuses: Set<Int>) -> String {
            var names = statuses.isSuperset(of: 400...499) ? ["4xx"] : []
            names += statuses.filter { !(400...499).contains($0) || names.isEmpty }.sorted()
                .map { $0 == BenchSoak.closedWithoutResponse ? "closed" : String($0) }
            return names.joined(separator: ",")
        }

        /// A 200's image against its reference.
        func check(_ body: [UInt8]?, _ variant: Variant, references: References, detail: String) {
            var difference = Double.infinity
            var problem = "not decodable"
            if let body, let decoded = try? ImageDecoder.decode(Data(body)), !decoded.isPartial {
                do {
                    let reference = try references.reference(variant)
                    difference = References.meanDifference(decoded.bitmap, reference)
                    problem = "\(decoded.bitmap.width)x\(decoded.bitmap.height) against \(reference.width)x\(reference.height), mean difference \(difference)"
                } catch {
                    problem = "no reference: \(error)"
                }
            }
            state.withLock { s in
                s.checkedImages += 1
                if difference < BenchSoak.tolerance {
                    s.maximumMeanDifference = max(s.maximumMeanDifference, difference)
                } else {
                    s.wrongImages += 1
                    if s.samples.count < 20 { s.samples.append("wrong image: \(detail): \(problem)") }
                }
            }
        }
    }

    /// The malformed requests, sent as raw bytes on a new connection each; every one must get
    /// a 4xx (or 501/505) and the server must live.
    static let malformed: [(name: String, bytes: [UInt8])] = [
        ("bare-lf", Array("GET /_/w:10/plain/x HTTP/1.1\nHost: a\n\n".utf8)),
        ("huge-header", Array(("GET /_/w:10/plain/x HTTP/1.1\r\nHost: a\r\nX-Big: " + String(repeating: "a", count: 100_000) + "\r\n\r\n").utf8)),
        ("long-path", Array(("GET /" + String(repeating: "p", count: 9000) + " HTTP/1.1\r\nHost: a\r\n\r\n").utf8)),
        ("unknown-method", Array("BREW /_/_/plain/x HTTP/1.1\r\nHost: a\r\n\r\n".utf8)),
        ("post-body", Array("POST /_/_/plain/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello".utf8)),
        ("transfer-encoding-get", Array("GET /_/_/plain/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".utf8)),
        ("duplicate-content-length", Array("GET /_/_/plain/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n".utf8)),
        ("bad-version", Array("GET /_/_/plain/x HTTP/9.9\r\nHost: a\r\n\r\n".utf8)),
        ("garbage", (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 151 &+ 7) } + Array("\r\n\r\n".utf8)),
        ("no-path", Array("GET  HTTP/1.1\r\nHost: a\r\n\r\n".utf8)),
    ]

    static let malformedStatuses: Set<Int> = Set(400...499).union([501, 505])

    /// What ``raw(_:port:)`` returns when the server closed the connection (FIN) without a
    /// response; 0 is a reset, a timeout or an unreadable response.
    static let closedWithoutResponse = -1

    /// The statuses a malformed request may get: a 4xx (501 and 505 too); for bytes that are
    /// not HTTP at all, also a close without a response (libmicrohttpd closes on a request line
    /// it cannot parse; a reset still counts as unexpected).
    static func malformedStatuses(_ name: String) -> Set<Int> {
        name == "garbage" ? malformedStatuses.union([closedWithoutResponse]) : malformedStatuses
    }

    /// Sends `bytes` on a new connection and returns the response's status (see ``closedWithoutResponse``).
    static func raw(_ bytes: [UInt8], port: Int) -> Int {
        let fd = KeepAliveClient.connect(port, receiveTimeout: 15)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        // A server may answer and close before reading everything (a huge header): read on.
        _ = sendAll(fd, bytes)
        var head: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while head.count < 64 * 1024, head.firstRange(of: Array("\r\n".utf8)) == nil {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 && head.isEmpty { return closedWithoutResponse }
            guard n > 0 else { break }
            head += chunk[0..<n]
        }
        let line = String(decoding: head.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self).split(separator: " ")
        guard line.count >= 2, line[0].hasPrefix("HTTP/"), let status = Int(line[1]) else { return 0 }
        return status
    }

    /// Options that are a 400 even when signed.
    static let badOptions = ["w:0", "w:abc", "fit:banana", "w:10,w:20", "nope:1", "q:101", "w:100000"]
}
