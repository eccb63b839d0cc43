import Foundation
@_spi(Testing) import Lumen
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The work-graph benchmarks behind `lumen bench coalesce` and `lumen bench overhead`, built
/// on the public API with ``MockDataLoader`` and ``TrivialImageDecoder`` so that they measure
/// the pipeline, not the network or a codec. Run them from a release build.
public enum PipelineBenchmarks {
    /// One scenario's outcome.
    public struct Result: Sendable {
        /// Scenario name.
        public var name: String
        /// Requests issued.
        public var requests: Int
        /// Loads that reached the data loader.
        public var networkRequests: Int
        /// Decodes performed.
        public var decodes: Int
        /// The pipeline's whole cost per request, in microseconds (see each scenario).
        public var microsPerRequest: Double
        /// The same work without the pipeline (µs per request), when the scenario has a
        /// baseline.
        public var baselineMicrosPerRequest: Double?
        /// `microsPerRequest − baselineMicrosPerRequest`: what the pipeline adds per request.
        public var overheadMicrosPerRequest: Double? { baselineMicrosPerRequest.map { microsPerRequest - $0 } }
        /// `microsPerRequest ÷ baselineMicrosPerRequest` (above 1: the pipeline costs more).
        public var pipelineOverBaseline: Double? { baselineMicrosPerRequest.map { microsPerRequest / $0 } }
        /// Resident memory per in-flight request, in bytes, when measured.
        public var bytesPerInFlightRequest: Double?

        /// One JSON object (keys: `name`, `requests`, `networkRequests`, `decodes`,
        /// `microsPerRequest`, and the optional measurements when present, with the baseline's
        /// `overheadMicrosPerRequest` and `pipelineOverBaseline`).
        public var json: String {
            var fields = [
                "\"name\": \"\(name)\"", "\"requests\": \(requests)", "\"networkRequests\": \(networkRequests)",
                "\"decodes\": \(decodes)", "\"microsPerRequest\": \(rounded(microsPerRequest))",
            ]
            if let baselineMicrosPerRequest, let overheadMicrosPerRequest, let pipelineOverBaseline {
                fields.append("\"baselineMicrosPerRequest\": \(rounded(baselineMicrosPerRequest))")
                fields.append("\"overheadMicrosPerRequest\": \(rounded(overheadMicrosPerRequest))")
                fields.append("\"pipelineOverBaseline\": \(rounded(pipelineOverBaseline))")
            }
            if let bytesPerInFlightRequest { fields.append("\"bytesPerInFlightRequest\": \(Int(bytesPerInFlightRequest))") }
            return "{" + fields.joined(separator: ", ") + "}"
        }

        private func rounded(_ value: Double) -> String { String(format: "%.3f", value) }
    }

    /// `count` concurrent `image(for:)` calls for one URL, all joining one download held until
    /// every call has subscribed. `microsPerRequest` is wall time per joined subscriber, from
    /// the first call to the last response; memory is measured while all are in flight (in the
    /// first round, on fresh pages).
    ///
    /// `baselineMicrosPerRequest` is the same shape without the pipeline, in the same run:
    /// `count` tasks that each await one result shared by hand (one load, one decode, every
    /// task suspended until it is ready, then resumed). It is what the callers' own tasks
    /// cost — spawning, suspending, resuming, awaiting — so `microsPerRequest` minus it is
    /// the pipeline's share per joined subscriber. The two alternate for `rounds` rounds,
    /// each side keeping its fastest, so that a burst of load elsewhere skews neither.
    public static func coalesce(count: Int = 10_000, rounds: Int = 1) async throws -> Result {
        var best = Double.infinity, bestDirect = Double.infinity
        var bytesPerRequest: Double?
        var networkRequests = 0, decodes = 0
        for round in 0..<max(1, rounds) {
            let loader = MockDataLoader()
            let decoder = TrivialImageDecoder()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = decoder
            let pipeline = ImagePipeline(configuration: configuration)
            let url = URL(string: "https://bench.lumen/coalesce.jpg")!
            loader.isSuspended = true
            let memoryBefore = round == 0 ? residentBytes() : nil
            let clock = ContinuousClock()
            let start = clock.now
            let tasks = (0..<count).map { _ in Task { _ = try await pipeline.image(for: url) } }
            await pipeline.waitForMetrics { $0.decode.started + $0.decode.joined == count }
            if let before = memoryBefore, let after = residentBytes() {
                bytesPerRequest = Double(max(0, after - before)) / Double(count)
            }
            loader.resume()
            try await waitForAll(tasks)
            best = min(best, micros(start.duration(to: clock.now)) / Double(count))
            networkRequests = max(networkRequests, loader.loadCount)
            decodes = max(decodes, decoder.decodeCount)
            bestDirect = min(bestDirect, try await coalesceByHand(count: count))
        }
        return Result(
            name: "coalesce", requests: count, networkRequests: networkRequests, decodes: decodes,
            microsPerRequest: best, baselineMicrosPerRequest: bestDirect, bytesPerInFlightRequest: bytesPerRequest)
    }

    /// µs per caller for `count` tasks awaiting one load + decode shared by hand.
    private static func coalesceByHand(count: Int) async throws -> Double {
        let loader = MockDataLoader()
        let decoder = TrivialImageDecoder()
        let url = URL(string: "https://bench.lumen/coalesce-by-hand.jpg")!
        let shared = SharedOutcome(expected: count)
        let clock = ContinuousClock()
        let start = clock.now
        let tasks = (0..<count).map { _ in Task { () async throws -> Void in _ = await shared.value() } }
        await shared.waitUntilAllWait()
        shared.resolve(try await loadAndDecode(url, loader: loader, decoder: decoder))
        try await waitForAll(tasks)
        return micros(start.duration(to: clock.now)) / Double(count)
    }

    /// One value awaited by many tasks, resolved once; tells when `expected` tasks wait.
    private final class SharedOutcome: @unchecked Sendable { // state guarded by `lock`
        private let lock = NSLock()
        private let expected: Int
        private var waiters: [UnsafeContinuation<ImageContainer, Never>] = []
        private var value: ImageContainer?
        private var allWaiting: UnsafeContinuation<Void, Never>?

        init(expected: Int) { self.expected = expected }

        func value() async -> ImageContainer {
            await withUnsafeContinuation { continuation in
                lock.lock()
                if let value {
                    lock.unlock()
                    continuation.resume(returning: value)
                    return
                }
                waiters.append(continuation)
                let ready = waiters.count == expected ? allWaiting : nil
                if ready != nil { allWaiting = nil }
                lock.unlock()
                ready?.resume()
            }
        }

        func waitUntilAllWait() async {
            await withUnsafeContinuation { continuation in
                lock.lock()
                if waiters.count == expected {
                    lock.unlock()
                    continuation.resume()
                    return
                }
                allWaiting = continuation
                lock.unlock()
            }
        }

        func resolve(_ container: ImageContainer) {
            lock.lock()
            value = container
            let current = waiters
            waiters = []
            lock.unlock()
            for waiter in current { waiter.resume(returning: container) }
        }
    }

    /// `count` distinct requests through the pipeline against the same loads and decodes done
    /// directly, both as `count` concurrent tasks. `microsPerRequest` is the pipeline's time per
    /// request, `baselineMicrosPerRequest` the direct time, each the fastest of `rounds`
    /// alternating rounds; ``Result/overheadMicrosPerRequest`` is what the pipeline adds.
    public static func overhead(count: Int = 10_000, rounds: Int = 1) async throws -> Result {
        let urls = (0..<count).map { URL(string: "https://bench.lumen/overhead/\($0).jpg")! }
        var bestDirect = Double.infinity, bestPiped = Double.infinity
        var networkRequests = 0, decodes = 0
        let clock = ContinuousClock()
        for _ in 0..<max(1, rounds) {
            // Baseline: the loader and the decoder called directly.
            let directLoader = MockDataLoader()
            let directDecoder = TrivialImageDecoder()
            var start = clock.now
            try await waitForAll(urls.map { url in
                    Task { _ = try await loadAndDecode(url, loader: directLoader, decoder: directDecoder) }
                })
            bestDirect = min(bestDirect, micros(start.duration(to: clock.now)))

            let loader = MockDataLoader()
            let decoder = TrivialImageDecoder()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = decoder
            let pipeline = ImagePipeline(configuration: configuration)
            start = clock.now
            try await waitForAll(urls.map { url in Task { _ = try await pipeline.image(for: url) } })
            bestPiped = min(bestPiped, micros(start.duration(to: clock.now)))
            networkRequests = max(networkRequests, loader.loadCount)
            decodes = max(decodes, decoder.decodeCount)
        }
        return Result(
            name: "overhead", requests: count, networkRequests: networkRequests, decodes: decodes,
            microsPerRequest: bestPiped / Double(count), baselineMicrosPerRequest: bestDirect / Double(count))
    }

    /// The baselines' work without the pipeline: the loader, then the decoder, called directly.
    private static func loadAndDecode(
        _ url: URL, loader: MockDataLoader, decoder: TrivialImageDecoder
    ) async throws -> ImageContainer {
        let body = Accumulator()
        let response = try await loader.loadData(for: URLRequest(url: url)) { chunk, _ in body.append(chunk) }
        let context = ImageDecodingContext(request: ImageRequest(url: url), urlResponse: response, options: DecodeOptions())
        return try decoder.decode(body.data, context: context)
    }

    /// Awaits unstructured tasks. Not a task group: the runtime removes finished children
    /// from a group in O(children), which with 10,000 children finishing out of order would
    /// dominate the measurement.
    private static func waitForAll(_ tasks: [Task<Void, any Error>]) async throws {
        for task in tasks { try await task.value }
    }

    private static func micros(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1e6 + Double(attoseconds) / 1e12
    }

    /// Resident set size from `/proc/self/statm`, `nil` where it doesn't exist.
    private static func residentBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * 4096
    }

    private final class Accumulator: @unchecked Sendable { // the loader calls didReceive serially
        var data = Data()
        func append(_ chunk: Data) { data.append(chunk) }
    }
}
