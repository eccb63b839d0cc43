import Foundation
import Lumen
import Synchronization

extension ImageServer {
    /// What a server has done so far: a consistent snapshot of its own counters, beside its
    /// pipeline's (``pipeline``). `/metrics` renders it as Prometheus text.
    public struct Metrics: Sendable {
        /// Responses sent, by status.
        public var responses: [Int: Int] = [:]
        /// Upper bounds (seconds) of the latency histogram's buckets, and the count of
        /// responses at or under each; `+Inf` is ``latencyCount``.
        public var latencyBuckets: [(le: Double, count: Int)] = Metrics.bucketBounds.map { ($0, 0) }
        public var latencySum: Double = 0
        public var latencyCount = 0
        /// Results answered from encoded bytes in memory, and from disk.
        public var resultMemoryHits = 0
        public var resultDiskHits = 0
        /// Encodes run, requests that joined a running encode, and their CPU time.
        public var encodes = 0
        public var encodeJoins = 0
        public var encodeSeconds: Double = 0
        /// Results encoded as animated WebP from every frame of an animated GIF or WebP source.
        public var animatedResults = 0
        /// Decodes run and their time (the pipeline's decoder, timed).
        public var decodes = 0
        public var decodeSeconds: Double = 0
        /// Requests refused with 429 because ``Configuration/maximumQueue`` were waiting.
        public var queueRejections = 0
        /// Requests being answered, and those of them waiting for work.
        public var inFlight = 0
        public var queued = 0
        /// The pipeline's own metrics: fetches, joins per stage, cache layers.
        public var pipeline = ImagePipeline.Metrics()

        /// Loads that reached an origin (network and local files); with Redis, bytes another
        /// node fetched are not counted here.
        public var originFetches: Int { originLoads }
        var originLoads = 0
        /// The fleet's shared second level, with ``Configuration/redis``.
        public var redis = Redis()

        /// What the node did with Redis.
        public struct Redis: Sendable {
            /// Whether Redis is configured and reachable now.
            public var isUp = false
            /// Intact values read, by kind (`original`, `result`), and lookups that found none.
            public var hits: [String: Int] = [:]
            public var misses: [String: Int] = [:]
            /// Values that came back damaged or cut: ignored (a miss) and removed.
            public var damaged = 0
            /// Values stored.
            public var stores = 0
            /// Commands Redis answered with an error (full, read-only…).
            public var errors = 0
            /// Times this node found another node fetching a source and waited for its bytes.
            public var lockWaits = 0
            /// Changes between up and down.
            public var stateChanges = 0
        }

        static let bucketBounds: [Double] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

        mutating func record(status: Int, seconds: Double) {
            responses[status, default: 0] += 1
            latencySum += seconds
            latencyCount += 1
            for i in latencyBuckets.indices where seconds <= latencyBuckets[i].le { latencyBuckets[i].count += 1 }
        }

        /// Prometheus text exposition format (0.0.4).
        public var prometheusText: String {
            var out = ""
            func family(_ name: String, _ type: String, _ help: String) {
                out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            }
            func sample(_ name: String, _ labels: String = "", _ value: some CustomStringConvertible) {
                out += name + (labels.isEmpty ? "" : "{\(labels)}") + " \(value)\n"
            }
            family("lumen_http_responses_total", "counter", "HTTP responses sent, by status.")
            for (status, count) in responses.sorted(by: { $0.key < $1.key }) {
                sample("lumen_http_responses_total", "status=\"\(status)\"", count)
            }
            family("lumen_http_request_duration_seconds", "histogram", "Time from request to response.")
            for bucket in latencyBuckets {
                sample("lumen_http_request_duration_seconds_bucket", "le=\"\(bucket.le)\"", bucket.count)
            }
            sample("lumen_http_request_duration_seconds_bucket", "le=\"+Inf\"", latencyCount)
            sample("lumen_http_request_duration_seconds_sum", "", latencySum)
            sample("lumen_http_request_duration_seconds_count", "", latencyCount)
            family("lumen_origin_fetches_total", "counter", "Loads started from origins (network and local files).")
            sample("lumen_origin_fetches_total", "", originFetches)
            family("lumen_origin_bytes_total", "counter", "Bytes received from origins.")
            sample("lumen_origin_bytes_total", "", pipeline.bytesDownloaded)
            family("lumen_joins_total", "counter", "Requests that joined running work instead of starting it, per stage.")
            sample("lumen_joins_total", "stage=\"fetch\"", pipeline.fetch.joined)
            sample("lumen_joins_total", "stage=\"decode\"", pipeline.decode.joined)
            sample("lumen_joins_total", "stage=\"process\"", pipeline.process.joined)
            sample("lumen_joins_total", "stage=\"encode\"", encodeJoins)
            family("lumen_cache_hits_total", "counter", "Hits per cache layer.")
            sample("lumen_cache_hits_total", "layer=\"result_memory\"", resultMemoryHits)
            sample("lumen_cache_hits_total", "layer=\"result_disk\"", resultDiskHits)
            sample("lumen_cache_hits_total", "layer=\"image_memory\"", pipeline.memoryCache.hits)
            sample("lumen_cache_hits_total", "layer=\"original_disk\"", pipeline.diskCache.hits)
            family("lumen_requests_in_flight", "gauge", "Requests being answered.")
            sample("lumen_requests_in_flight", "", inFlight)
            family("lumen_requests_queued", "gauge", "Requests waiting for work (not answered from a cache).")
            sample("lumen_requests_queued", "", queued)
            family("lumen_queue_rejections_total", "counter", "Requests refused with 429: the queue was full.")
            sample("lumen_queue_rejections_total", "", queueRejections)
            family("lumen_decodes_total", "counter", "Images decoded.")
            sample("lumen_decodes_total", "", decodes)
            family("lumen_animated_results_total", "counter", "Results encoded as animated WebP from every frame of an animated source.")
            sample("lumen_animated_results_total", "", animatedResults)
            family("lumen_decode_seconds_total", "counter", "Time spent decoding.")
            sample("lumen_decode_seconds_total", "", decodeSeconds)
            family("lumen_encodes_total", "counter", "Results encoded.")
            sample("lumen_encodes_total", "", encodes)
            family("lumen_encode_seconds_total", "counter", "Time spent encoding.")
            sample("lumen_encode_seconds_total", "", encodeSeconds)
            family("lumen_redis_up", "gauge", "Whether the shared Redis is reachable (0 without --redis).")
            sample("lumen_redis_up", "", redis.isUp ? 1 : 0)
            family("lumen_redis_hits_total", "counter", "Intact values read from Redis, by kind.")
            family("lumen_redis_misses_total", "counter", "Redis lookups that found no value, by kind.")
            for kind in ["original", "result"] {
                sample("lumen_redis_hits_total", "kind=\"\(kind)\"", redis.hits[kind, default: 0])
                sample("lumen_redis_misses_total", "kind=\"\(kind)\"", redis.misses[kind, default: 0])
            }
            family("lumen_redis_damaged_total", "counter", "Values from Redis that failed their checksum or were cut: treated as misses.")
            sample("lumen_redis_damaged_total", "", redis.damaged)
            family("lumen_redis_stores_total", "counter", "Values stored in Redis.")
            sample("lumen_redis_stores_total", "", redis.stores)
            family("lumen_redis_errors_total", "counter", "Redis commands answered with an error (full, read-only).")
            sample("lumen_redis_errors_total", "", redis.errors)
            family("lumen_redis_lock_waits_total", "counter", "Origin fetches waited for because another node held the source's lock.")
            sample("lumen_redis_lock_waits_total", "", redis.lockWaits)
            family("lumen_redis_state_changes_total", "counter", "Changes between Redis reachable and unreachable.")
            sample("lumen_redis_state_changes_total", "", redis.stateChanges)
            family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
            sample("process_resident_memory_bytes", "", Self.residentBytes())
            return out
        }

        /// This process's resident set, from `/proc/self/statm`.
        static func residentBytes() -> Int {
            guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
            let fields = text.split(separator: " ")
            guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
            return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
        }
    }
}

extension ImageServer.Metrics: CustomStringConvertible {
    /// The counters grouped in lines, every counter named, then the pipeline's
    /// (``ImagePipeline/Metrics/description``) indented below (`print(server.metrics)`).
    /// `/metrics` serves ``prometheusText`` instead.
    public var description: String {
        func line(_ name: String, _ text: String) -> String {
            "\n  " + (name + ":").padding(toLength: 11, withPad: " ", startingAt: 0) + text
        }
        let statuses = responses.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }
        let mean = latencyCount == 0 ? 0 : latencySum / Double(latencyCount)
        func kinds(_ counts: [String: Int]) -> String {
            counts.isEmpty ? "0" : counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }
        return "ImageServer.Metrics"
            + line("responses", "\(latencyCount) (\(statuses.isEmpty ? "none" : statuses.joined(separator: ", "))), "
                   + String(format: "%.3f s in all, %.3f ms mean", latencySum, mean * 1000))
            + line("requests", "\(inFlight) in flight, \(queued) queued, \(queueRejections) refused with 429 (queue full)")
            + line("results", "\(resultMemoryHits) from memory, \(resultDiskHits) from disk, \(encodes) encodes "
                   + String(format: "(%.3f s), ", encodeSeconds) + "\(encodeJoins) joined a running encode, "
                   + "\(animatedResults) animated")
            + line("sources", "\(originFetches) origin fetches, \(decodes) decodes" + String(format: " (%.3f s)", decodeSeconds))
            + line("redis", "\(redis.isUp ? "up" : "down or off"), hits \(kinds(redis.hits)), misses \(kinds(redis.misses)), "
                   + "\(redis.damaged) damaged, \(redis.stores) stores, \(redis.errors) errors, \(redis.lockWaits) lock waits, "
                   + "\(redis.stateChanges) state changes")
            + "\n  " + pipeline.description.replacingOccurrences(of: "\n", with: "\n  ")
    }
}

/// The pipeline's decoder, timed for ``ImageServer/Metrics/decodeSeconds``.
struct TimedDecoder: ImageDecoding {
    let base: any ImageDecoding
    let counters: MetricsStore

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        let start = monotonicNow()
        defer {
            let seconds = monotonicNow() - start
            counters.state.withLock { $0.decodes += 1; $0.decodeSeconds += seconds }
        }
        return try base.decode(data, context: context)
    }

    func decodePreview(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer? {
        try base.decodePreview(data, context: context)
    }
}

/// The server's counters under one lock.
final class MetricsStore: Sendable {
    let state = Mutex(ImageServer.Metrics())
}
