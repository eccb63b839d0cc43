import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
import Lumen
import LumenTestSupport

/// Stale disk entries revalidated against the loopback server.
@Suite(.timeLimit(.minutes(1)))
struct PipelineCacheRevalidationTests {
    private static let bodyV1 = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7) })
    private static let bodyV2 = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })

    private func harness(respectingHTTP: Bool = true) -> PipelineCacheHarness {
        PipelineCacheHarness { configuration in
            configuration.dataLoader = DataLoader()
            configuration.isHTTPCachingRespected = respectingHTTP
        }
    }

    @Test func aStaleEntryIsRevalidatedAndA304RenewsItWithoutResendingTheBytes() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/a.jpg", data: Self.bodyV1, etag: "\"v1\"", cacheControl: "max-age=60")
        let url = server.url(for: "/a.jpg")

        let first = try await h.pipeline.image(for: url)
        #expect(first.cacheType == nil)
        #expect(server.statistics.bodyBytesSent == Self.bodyV1.count)

        // Fresh: zero network requests.
        h.clock.advance(by: 30)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).cacheType == .disk)
        #expect(server.requestCount(for: "/a.jpg") == 1)

        // Past max-age: a conditional request, answered 304; the bytes are not sent again.
        h.clock.advance(by: 60)
        h.pipeline.cache.removeAllFromMemory()
        let revalidated = try await h.pipeline.image(for: url)
        #expect(revalidated.cacheType == .disk)
        #expect(revalidated.image == first.image)
        let stats = server.statistics
        #expect(stats.requests(for: "/a.jpg") == 2)
        #expect(stats.notModifiedResponses == 1)
        #expect(stats.bodyBytesSent == Self.bodyV1.count)
        #expect(server.recordedRequests(for: "/a.jpg").last?.header("If-None-Match") == "\"v1\"")
        #expect(server.recordedRequests(for: "/a.jpg").first?.header("If-None-Match") == nil)
        let metrics = h.pipeline.metrics
        #expect(metrics.revalidations == 1 && metrics.notModified == 1)

        // Renewed: fresh again for another max-age, no request.
        await h.flush()
        h.clock.advance(by: 30)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).cacheType == .disk)
        #expect(server.requestCount(for: "/a.jpg") == 2)
        #expect(h.dataCache?.metrics.renewals == 1)
    }

    @Test func lastModifiedIsSentAsIfModifiedSince() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        let modified = LoopbackServer.httpDate(Date(timeIntervalSince1970: 1_700_000_000))
        server.serve(path: "/lm.jpg", data: Self.bodyV1, lastModified: modified, cacheControl: "max-age=10")
        let url = server.url(for: "/lm.jpg")
        _ = try await h.pipeline.image(for: url)
        h.clock.advance(by: 20)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).cacheType == .disk)
        #expect(server.recordedRequests(for: "/lm.jpg").last?.header("If-Modified-Since") == modified)
        #expect(server.statistics.notModifiedResponses == 1)
    }

    @Test func a200ReplacesTheStaleEntry() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/a.jpg", data: Self.bodyV1, etag: "\"v1\"", cacheControl: "max-age=60")
        let url = server.url(for: "/a.jpg")
        let first = try await h.pipeline.image(for: url)

        server.serve(path: "/a.jpg", data: Self.bodyV2, etag: "\"v2\"", cacheControl: "max-age=60")
        h.clock.advance(by: 120)
        h.pipeline.cache.removeAllFromMemory()
        let second = try await h.pipeline.image(for: url)
        #expect(second.cacheType == nil)
        #expect(second.image != first.image)
        #expect(server.statistics.notModifiedResponses == 0)
        #expect(server.recordedRequests(for: "/a.jpg").last?.header("If-None-Match") == "\"v1\"")
        #expect(h.pipeline.cache.cachedData(for: ImageRequest(url: url)) == Self.bodyV2)
        #expect(h.pipeline.metrics.revalidations == 1 && h.pipeline.metrics.notModified == 0)

        // The replacement is fresh: served from disk with no request.
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).image == second.image)
        #expect(server.requestCount(for: "/a.jpg") == 2)
    }

    @Test func noStoreResponsesAreNeverWritten() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/private.jpg", data: Self.bodyV1, cacheControl: "no-store")
        let url = server.url(for: "/private.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
        #expect(h.dataCache?.metrics.writes == 0)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).cacheType == nil)
        #expect(server.requestCount(for: "/private.jpg") == 2)
    }

    /// max-age 10 s, 60 s later (well inside the 7-day TTL): with HTTP caching respected the
    /// entry is stale and revalidated; with TTL only, it is served with no request.
    @Test(arguments: [true, false])
    func ttlOnlyModeIgnoresMaxAge(respectingHTTP: Bool) async throws {
        let server = try LoopbackServer()
        let h = harness(respectingHTTP: respectingHTTP)
        defer { h.cleanUp() }
        server.serve(path: "/a.jpg", data: Self.bodyV1, etag: "\"v1\"", cacheControl: "max-age=10")
        let url = server.url(for: "/a.jpg")
        _ = try await h.pipeline.image(for: url)
        h.clock.advance(by: 60)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).cacheType == .disk)
        #expect(server.requestCount(for: "/a.jpg") == (respectingHTTP ? 2 : 1))
        #expect(server.statistics.notModifiedResponses == (respectingHTTP ? 1 : 0))

        // Past the TTL, TTL-only mode revalidates too.
        h.clock.advance(by: 8 * 24 * 3600)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: url).cacheType == .disk)
        #expect(server.statistics.notModifiedResponses == (respectingHTTP ? 2 : 1))
    }

    /// A server that answers a revalidation `304` with another ETag than the stored one (its
    /// content changed; it compared `If-Modified-Since`, say, and lied): the stored bytes are
    /// not renewed under that ETag but loaded again. They were renewed, so the old bytes were
    /// served, and every later revalidation with the new ETag confirmed them.
    @Test func a304NamingAnotherETagLoadsTheBytesAgain() async throws {
        let server = RevalidationLiar(v1: Self.bodyV1, v2: Self.bodyV2)
        let h = PipelineCacheHarness { $0.dataLoader = server }
        defer { h.cleanUp() }
        let url = URL(string: "https://images.example.com/changed.jpg")!
        let first = try await h.pipeline.image(for: url)

        server.publishV2()
        h.clock.advance(by: 120)
        h.pipeline.cache.removeAllFromMemory()
        let second = try await h.pipeline.image(for: url)
        #expect(second.cacheType == nil)
        #expect(second.image != first.image)
        #expect(server.requests.map { $0.value(forHTTPHeaderField: "If-None-Match") } == [nil, "\"v1\"", nil])

        // The entry now holds v2 under "v2": its next revalidation is an honest 304.
        await h.flush()
        h.clock.advance(by: 120)
        h.pipeline.cache.removeAllFromMemory()
        let third = try await h.pipeline.image(for: url)
        #expect(third.cacheType == .disk)
        #expect(third.image == second.image)
        #expect(server.requests.last?.value(forHTTPHeaderField: "If-None-Match") == "\"v2\"")
    }
}

/// A data loader playing a server whose image changed from v1 to v2 (`publishV2()`) and which
/// answers every conditional request `304` with the current ETag, whatever was asked.
private final class RevalidationLiar: DataLoading {
    private struct State {
        var isV2 = false
        var requests: [URLRequest] = []
    }

    private let v1: Data
    private let v2: Data
    private let state = Mutex(State())

    init(v1: Data, v2: Data) {
        self.v1 = v1
        self.v2 = v2
    }

    func publishV2() { state.withLock { $0.isV2 = true } }

    var requests: [URLRequest] { state.withLock { $0.requests } }

    func loadData(for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void) async throws -> URLResponse {
        let isV2 = state.withLock { state in
            state.requests.append(request)
            return state.isV2
        }
        let url = request.url!
        let etag = isV2 ? "\"v2\"" : "\"v1\""
        if DataLoader.isConditional(request) {
            return HTTPURLResponse(url: url, statusCode: 304, httpVersion: "HTTP/1.1",
                                   headerFields: ["ETag": etag, "Cache-Control": "max-age=60"])!
        }
        let body = isV2 ? v2 : v1
        let response = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1",
                                       headerFields: ["ETag": etag, "Cache-Control": "max-age=60", "Content-Length": String(body.count)])!
        try didReceive(body, response)
        return response
    }
}
