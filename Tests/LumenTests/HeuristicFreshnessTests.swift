import Foundation
import Testing
import Lumen
import LumenTestSupport

/// RFC 9111 §4.2.2: a response with no stated freshness but a `Last-Modified` is fresh for a
/// fraction of its age, not for the disk cache's whole TTL.
@Suite(.timeLimit(.minutes(1)))
struct HeuristicFreshnessTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let week: TimeInterval = 7 * 24 * 3600

    func metadata(modifiedBefore seconds: TimeInterval, extra: [String: String] = [:]) -> CacheMetadata {
        var headers = extra
        headers["Last-Modified"] = LoopbackServer.httpDate(t0.addingTimeInterval(-seconds))
        return CacheMetadata(headers: headers, now: t0)
    }

    static let heuristicCases: [(modifiedBefore: TimeInterval, age: TimeInterval, fresh: Bool)] = [
        (1000, 99, true), (1000, 100, false),                   // 10% of 1000 s
        (864_000, 86_399, true), (864_000, 86_400, false),      // 10% of 10 days = 1 day
        (8_640_000, 86_399, true), (8_640_000, 86_400, false),  // 10% of 100 days, capped at one day
    ]

    @Test(arguments: heuristicCases)
    func aLastModifiedAloneIsFreshForTheHeuristic(modifiedBefore: TimeInterval, age: TimeInterval, fresh: Bool) {
        #expect(metadata(modifiedBefore: modifiedBefore).isFresh(now: t0 + age, ttl: week) == fresh)
    }

    @Test func theFractionAndTheCapAreTheCallers() {
        let m = metadata(modifiedBefore: 10_000)
        #expect(m.isFresh(now: t0 + 4999, ttl: week, heuristicFraction: 0.5))
        #expect(!m.isFresh(now: t0 + 5000, ttl: week, heuristicFraction: 0.5))
        #expect(!m.isFresh(now: t0 + 60, ttl: week, heuristicFraction: 0.5, maximumHeuristicLifetime: 60))
        #expect(!m.isFresh(now: t0, ttl: week, heuristicFraction: 0))
        #expect(!m.isFresh(now: t0 + 500, ttl: 500)) // never past the TTL
    }

    @Test func statedFreshnessAndMissingValidatorsAreNotHeuristic() {
        // max-age and Expires win over the heuristic.
        #expect(metadata(modifiedBefore: 1000, extra: ["Cache-Control": "max-age=3600"]).isFresh(now: t0 + 3000, ttl: week))
        let expires = LoopbackServer.httpDate(t0.addingTimeInterval(3600))
        #expect(metadata(modifiedBefore: 1000, extra: ["Expires": expires, "Date": LoopbackServer.httpDate(t0)]).isFresh(now: t0 + 3000, ttl: week))
        // No Last-Modified (or an unparsable one): the TTL alone, as before.
        #expect(CacheMetadata(headers: [:], now: t0).isFresh(now: t0 + 3000, ttl: week))
        #expect(CacheMetadata(headers: ["Last-Modified": "yesterday"], now: t0).isFresh(now: t0 + 3000, ttl: week))
        // Without HTTP caching respected, the TTL alone.
        #expect(metadata(modifiedBefore: 1000).isFresh(now: t0 + 3000, ttl: week, respectsHTTPCaching: false))
    }

    /// Through the pipeline: the entry is served from disk within the heuristic lifetime and
    /// revalidated (a 304 from the server) after it, long before the disk cache's TTL.
    @Test func thePipelineRevalidatesAfterTheHeuristicLifetime() async throws {
        let server = try LoopbackServer()
        let clock = CacheTestClock()
        let h = PipelineCacheHarness(clock: clock) {
            $0.dataLoader = ImagePipeline.Configuration.makeDefaultDataLoader()
            $0.heuristicFreshnessFraction = 0.2
        }
        defer { h.cleanUp() }
        let modified = LoopbackServer.httpDate(clock.now.addingTimeInterval(-1000)) // lifetime 200 s
        server.serve(path: "/lm.jpg", data: Data(repeating: 3, count: 64), lastModified: modified)
        let request = ImageRequest(url: server.url(for: "/lm.jpg"))

        _ = try await h.pipeline.data(for: request)
        await h.flush()
        clock.advance(by: 199)
        _ = try await h.pipeline.data(for: request)
        #expect(server.statistics.requests(for: "/lm.jpg") == 1)
        #expect(h.pipeline.metrics.diskCacheFreshHits == 1)

        clock.advance(by: 2)
        let (data, _) = try await h.pipeline.data(for: request)
        #expect(data == Data(repeating: 3, count: 64))
        #expect(server.statistics.requests(for: "/lm.jpg") == 2)
        #expect(server.statistics.notModifiedResponses == 1)
        #expect(h.pipeline.metrics.revalidations == 1)
    }
}
