import Foundation
import Lumen
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
        /// The scenario's headline cost per request, in microseconds (see each scenario).
        public var microsPerRequest: Double
        /// The same work without the pipeline (µs per request), when the scenario has a
        /// baseline.
        public var baselineMicrosPerRequest: Double?
        /// Resident memory per in-flight request, in bytes, when measured.
        public var bytesPerInFlightRequest: Double?

        /// One JSON object (keys: `name`, `requests`, `networkRequests`, `decodes`,
        /// `microsPerRequest`, and the optional measurements when present).
        public var json: String {
            var fields = [
                "\"name\": \"\(name)\"", "\"requests\": \(requests)", "\"networkRequests\": \(networkRequests)",
                "\"decodes\": \(decodes)", "\"microsPerRequest\": \(rounded(microsPerRequest))",
            ]
            if let baselineMicrosPerRequest { fields.append("\"baselineMicrosPerRequest\": \(rounded(baselineMicrosPerRequest))") }
            if let bytesPerInFlightRequest { fields.append("\"bytesPerInFlightRequest\": \(Int(bytesPerInFlightRequest))") }
            return "{" + fields.joined(separator: ", ") + "}"
        }

        private func rounded(_ value: Double) -> String { String(format: "%.3f", value) }
    }

    /// `count` concurrent `image(for:)` calls for one URL, all joining one download held until
    /// every call has subscribed. `microsPerRequest` is wall time per joined subscriber, from
    /// the first call to the last response; memory is measured while all are in flight.
    public static func coalesce(count: Int = 10_000) async throws -> Result {
        let loader = MockDataLoader()
        let decoder = TrivialImageDecoder()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = decoder
        let pipeline = ImagePipeline(configuration: configuration)
        let url = URL(string: "https://bench.lumen/coalesce.jpg")!
        loader.isSuspended = true
        let memoryBefore = residentBytes()
        let clock = ContinuousClock()
        let start = clock.now
        var bytesPerRequest: Double?
        let tasks = (0..<count).map { _ in Task { _ = try await pipeline.image(for: url) } }
        await pipeline.waitForMetrics { $0.decode.started + $0.decode.joined == count }
        if let before = memoryBefore, let after = residentBytes() {
            bytesPerRequest = Double(max(0, after - before)) / Double(count)
        }
        loader.resume()
        try await waitForAll(tasks)
        let elapsed = start.duration(to: clock.now)
        return Result(
            name: "coalesce", requests: count, networkRequests: loader.loadCount, decodes: decoder.decodeCount,
            microsPerRequest: micros(elapsed) / Double(count), bytesPerInFlightRequest: bytesPerRequest)
    }

    /// `count` distinct requests through the pipeline against the same loads and decodes done
    /// directly, both as `count` concurrent tasks. `microsPerRequest` is the pipeline's
    /// overhead per request: (pipeline time − direct time) / count.
    public static func overhead(count: Int = 10_000) async throws -> Result {
        let urls = (0..<count).map { URL(string: "https://bench.lumen/overhead/\($0).jpg")! }
        // Baseline: the loader and the decoder called directly.
        let directLoader = MockDataLoader()
        let directDecoder = TrivialImageDecoder()
        let clock = ContinuousClock()
        var start = clock.now
        try await waitForAll(urls.map { url in
                Task {
                    let body = Accumulator()
                    let response = try await directLoader.loadData(for: URLRequest(url: url)) { chunk, _ in body.append(chunk) }
                    let context = ImageDecodingContext(request: ImageRequest(url: url), urlResponse: response, options: DecodeOptions())
                    _ = try directDecoder.decode(body.data, context: context)
                }
            })
        let direct = micros(start.duration(to: clock.now))

        let loader = MockDataLoader()
        let decoder = TrivialImageDecoder()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = decoder
        let pipeline = ImagePipeline(configuration: configuration)
        start = clock.now
        try await waitForAll(urls.map { url in Task { _ = try await pipeline.image(for: url) } })
        let piped = micros(start.duration(to: clock.now))
        return Result(
            name: "overhead", requests: count, networkRequests: loader.loadCount, decodes: decoder.decodeCount,
            microsPerRequest: (piped - direct) / Double(count), baselineMicrosPerRequest: direct / Double(count))
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
