import Foundation
import Lumen
@testable import LumenServer
import Testing

/// `print(server.metrics)` reads as text: the server's counters named in lines, then the
/// pipeline's, indented (not Swift's one-line dump of nested structs and tuples).
@Suite(.timeLimit(.minutes(1)))
struct ServerMetricsDescriptionTests {
    @Test func serverMetricsNameTheirCountersAndIndentThePipelines() {
        var m = ImageServer.Metrics()
        m.record(status: 200, seconds: 0.004)
        m.record(status: 200, seconds: 0.002)
        m.record(status: 404, seconds: 0.003)
        (m.inFlight, m.queued, m.queueRejections) = (4, 5, 6)
        (m.resultMemoryHits, m.resultDiskHits, m.encodes, m.encodeJoins, m.encodeSeconds) = (7, 8, 9, 10, 0.25)
        (m.originLoads, m.decodes, m.decodeSeconds) = (11, 12, 0.5)
        m.redis.isUp = true
        m.redis.hits = ["original": 13, "result": 14]
        m.pipeline.networkRequestsStarted = 15
        let text = "\(m)"
        for part in [
            "responses: 3 (2 × 200, 1 × 404), 0.009 s in all, 3.000 ms mean",
            "requests:  4 in flight, 5 queued, 6 refused with 429 (queue full)",
            "results:   7 from memory, 8 from disk, 9 encodes (0.250 s), 10 joined a running encode",
            "sources:   11 origin fetches, 12 decodes (0.500 s)",
            "redis:     up, hits 13 original, 14 result, misses 0",
            "\n  ImagePipeline.Metrics\n    fetch:",
            "15 requests started",
        ] {
            #expect(text.contains(part), "\(part) missing from\n\(text)")
        }
        #expect(text.hasPrefix("ImageServer.Metrics\n"))
        #expect(!text.contains("latencyBuckets") && !text.contains("StageMetrics("), "\(text)")
    }
}
