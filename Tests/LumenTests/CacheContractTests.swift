import Foundation
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Contract tests for the cache layers' HTTP semantics, written by an independent review from
// the contract (the cache-layers issue, DESIGN.md §3, Lumen.docc/CacheLayers.md), not from
// the implementation.
@Suite(.timeLimit(.minutes(1)))
struct CacheContractTests {
    static let v1 = Data((0..<2048).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
    static let v2 = Data((0..<2048).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 5) })

    private func harness(respectingHTTP: Bool = true, memory: Bool = true) -> PipelineCacheHarness {
        PipelineCacheHarness(imageCache: ImageCache()) { configuration in
            configuration.dataLoader = DataLoader()
            configuration.isHTTPCachingRespected = respectingHTTP
            configuration.retryPolicy = .none
            if !memory { configuration.imageCache = nil }
        }
    }

    private func originalKey(_ url: URL) -> String { DataCache.key(imageID: url.absoluteString) }

    /// Loads `url` with the memory layer emptied first, so the disk layer must answer.
    private func loadFromDisk(_ h: PipelineCacheHarness, _ url: URL) async throws -> ImageResponse {
        h.pipeline.cache.removeAllFromMemory()
        return try await h.pipeline.image(for: url)
    }

    // MARK: Cache-Control directives

    @Test func noCacheIsRevalidatedOnEveryUse() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/nc.jpg", data: Self.v1, etag: "\"v1\"", cacheControl: "no-cache")
        let url = server.url(for: "/nc.jpg")
        #expect(try await h.pipeline.image(for: url).cacheType == nil)
        await h.flush()
        for round in 1...3 {
            let response = try await loadFromDisk(h, url)
            #expect(response.cacheType == .disk)
            #expect(server.requestCount(for: "/nc.jpg") == 1 + round)
        }
        let requests = server.recordedRequests(for: "/nc.jpg")
        #expect(requests.dropFirst().allSatisfy { $0.header("If-None-Match") == "\"v1\"" })
        #expect(server.statistics.notModifiedResponses == 3)
        #expect(server.statistics.bodyBytesSent == Self.v1.count)
    }

    @Test func maxAgeZeroIsStaleAtOnce() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/z.jpg", data: Self.v1, etag: "\"z\"", cacheControl: "max-age=0")
        let url = server.url(for: "/z.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/z.jpg") == 2)
        #expect(server.recordedRequests(for: "/z.jpg").last?.header("If-None-Match") == "\"z\"")
        #expect(h.pipeline.metrics.diskCacheFreshHits == 0)
    }

    @Test(arguments: ["max-age=abc", "max-age=-5", "max-age=", "max-age=10, max-age=20"])
    func garbageMaxAgeCountsAsStale(header: String) async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/g.jpg", data: Self.v1, etag: "\"g\"", cacheControl: header)
        let url = server.url(for: "/g.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 1)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/g.jpg") == 2)
    }

    @Test func immutableIsFreshPastMaxAgeUntilTheTTL() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/i.jpg", data: Self.v1, etag: "\"i\"", cacheControl: "max-age=10, immutable")
        let url = server.url(for: "/i.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 3600)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/i.jpg") == 1)
        // Past the disk TTL (7 days): asked again.
        h.clock.advance(by: 7 * 24 * 3600)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/i.jpg") == 2)
    }

    @Test func noStoreWithAnETagIsNeverWrittenNorRevalidated() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/ns.jpg", data: Self.v1, etag: "\"ns\"", cacheControl: "no-store")
        let url = server.url(for: "/ns.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
        #expect(h.dataCache?.metrics.writes == 0)
        #expect(try await loadFromDisk(h, url).cacheType == nil)
        #expect(server.requestCount(for: "/ns.jpg") == 2)
        #expect(server.recordedRequests(for: "/ns.jpg").last?.header("If-None-Match") == nil)
    }

    @Test func noStoreStillHonouredWhenHTTPCachingIsOff() async throws {
        let server = try LoopbackServer()
        let h = harness(respectingHTTP: false)
        defer { h.cleanUp() }
        server.serve(path: "/ns.jpg", data: Self.v1, etag: "\"ns\"", cacheControl: "no-store")
        let url = server.url(for: "/ns.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
    }

    @Test func withHTTPCachingOffTheTTLAloneDecides() async throws {
        let server = try LoopbackServer()
        let h = harness(respectingHTTP: false)
        defer { h.cleanUp() }
        server.serve(path: "/off.jpg", data: Self.v1, etag: "\"o\"", cacheControl: "no-cache, max-age=0")
        let url = server.url(for: "/off.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 3600)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/off.jpg") == 1)
        // Past the TTL: revalidated (the validator is still used).
        h.clock.advance(by: 7 * 24 * 3600)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/off.jpg") == 2)
        #expect(server.statistics.notModifiedResponses == 1)
    }

    // MARK: 304s

    @Test func a304CarryingANewMaxAgeIsStored() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/m.jpg", data: Self.v1, etag: "\"m\"", cacheControl: "max-age=10")
        let url = server.url(for: "/m.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 20)
        server.serve(path: "/m.jpg", data: Self.v1, etag: "\"m\"", cacheControl: "max-age=1000")
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.statistics.notModifiedResponses == 1)
        await h.flush()
        #expect(h.dataCache?.cachedData(for: originalKey(url))?.metadata.maxAge == 1000)
        h.clock.advance(by: 500)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/m.jpg") == 2)
    }

    @Test func a304CarryingANewETagIsStoredAndUsedNextTime() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        let modified = LoopbackServer.httpDate(Date(timeIntervalSince1970: 1_700_000_000))
        server.serve(path: "/e.jpg", data: Self.v1, lastModified: modified, cacheControl: "max-age=10")
        let url = server.url(for: "/e.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        // The server now also sends an ETag; the conditional request (If-Modified-Since) gets
        // a 304 carrying it.
        server.serve(path: "/e.jpg", data: Self.v1, etag: "\"e2\"", lastModified: modified, cacheControl: "max-age=10")
        h.clock.advance(by: 20)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.statistics.notModifiedResponses == 1)
        await h.flush()
        #expect(h.dataCache?.cachedData(for: originalKey(url))?.metadata.etag == "\"e2\"")
        h.clock.advance(by: 20)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.recordedRequests(for: "/e.jpg").last?.header("If-None-Match") == "\"e2\"")
        #expect(server.statistics.notModifiedResponses == 2)
    }

    @Test func weakETagIsSentBackVerbatim() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/w.jpg", data: Self.v1, etag: "W/\"x\"", cacheControl: "max-age=10")
        let url = server.url(for: "/w.jpg")
        let first = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 20)
        let second = try await loadFromDisk(h, url)
        #expect(second.cacheType == .disk)
        #expect(second.image == first.image)
        #expect(server.recordedRequests(for: "/w.jpg").last?.header("If-None-Match") == "W/\"x\"")
        #expect(server.statistics.notModifiedResponses == 1)
    }

    @Test func a304ForAnEntryRemovedMeanwhileStillAnswers() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/r.jpg", data: Self.v1, etag: "\"r\"", cacheControl: "max-age=10")
        let url = server.url(for: "/r.jpg")
        let first = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 20)
        h.pipeline.cache.removeAllFromMemory()
        server.hold("/r.jpg")
        let task = Task { try await h.pipeline.image(for: url) }
        try await server.waitForRequests(path: "/r.jpg", count: 2)
        h.dataCache?.removeAll()
        await h.flush()
        server.release("/r.jpg")
        let result = await contractOutcome { try await task.value }
        print("304 for a removed entry:", result.map(\.cacheType), "requests:", server.requestCount(for: "/r.jpg"))
        // A 304 for bytes no longer on disk must not fail the request nor serve wrong bytes:
        // either the bytes read before the revalidation are used or the image is fetched again.
        switch result {
        case .success(let response): #expect(response.image == first.image)
        case .failure(let error):
            Issue.record("a 304 after the entry was removed failed the request: \(error)")
        }
    }

    @Test func a304ToAnUnconditionalRequestFailsAndIsNotCached() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/lie.jpg", data: Self.v1)
        server.respond(path: "/lie.jpg", status: 304)
        let url = server.url(for: "/lie.jpg")
        await #expect(throws: ImagePipeline.Error.self) { try await h.pipeline.image(for: url) }
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
        server.respond(path: "/lie.jpg", status: nil)
        #expect(try await h.pipeline.image(for: url).cacheType == nil)
    }

    @Test func aLyingServer304ForAStaleEntryWithoutValidators() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/nv.jpg", data: Self.v1, cacheControl: "max-age=10")
        let url = server.url(for: "/nv.jpg")
        let first = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 20)
        server.respond(path: "/nv.jpg", status: 304)
        let result = await contractOutcome { try await loadFromDisk(h, url) }
        // No validator: the request is unconditional. A 304 to it is a server error; it must not
        // turn into an empty or wrong image.
        #expect(server.recordedRequests(for: "/nv.jpg").last?.header("If-None-Match") == nil)
        #expect(server.recordedRequests(for: "/nv.jpg").last?.header("If-Modified-Since") == nil)
        print("lying-server 304 for a stale entry without validators:", result)
        if case .success(let response) = result { #expect(response.image == first.image) }
    }

    @Test func a200WithANewBodyDuringRevalidationReplacesTheEntry() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/n.jpg", data: Self.v1, etag: "\"a\"", cacheControl: "max-age=10")
        let url = server.url(for: "/n.jpg")
        let first = try await h.pipeline.image(for: url)
        await h.flush()
        server.serve(path: "/n.jpg", data: Self.v2, etag: "\"b\"", cacheControl: "max-age=10")
        h.clock.advance(by: 20)
        let second = try await loadFromDisk(h, url)
        #expect(second.cacheType == nil)
        #expect(second.image != first.image)
        await h.flush()
        let stored = h.dataCache?.cachedData(for: originalKey(url))
        #expect(stored?.data == Self.v2)
        #expect(stored?.metadata.etag == "\"b\"")
        // And the memory layer shows the new image too.
        #expect(h.pipeline.cache[ImageRequest(url: url)]?.image == second.image)
    }

    // MARK: Status codes that are not a full 200

    @Test(arguments: [204, 206, 203])
    func nonFullResponsesAreNotStoredAsTheImage(status: Int) async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/s.jpg", data: Self.v1)
        server.respond(path: "/s.jpg", status: status)
        let url = server.url(for: "/s.jpg")
        _ = await contractOutcome { try await h.pipeline.image(for: url) }
        await h.flush()
        let stored = h.dataCache?.cachedData(for: originalKey(url))
        if status == 203 {
            // 203 (non-authoritative) is a full response: storing it is allowed.
            return
        }
        #expect(stored == nil)
    }

    @Test func httpFailuresAreNeverCached() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/f.jpg", data: Self.v1, etag: "\"f\"")
        server.respond(path: "/f.jpg", status: 500)
        let url = server.url(for: "/f.jpg")
        await #expect(throws: ImagePipeline.Error.self) { try await h.pipeline.image(for: url) }
        server.respond(path: "/f.jpg", status: nil)
        server.truncate(path: "/f.jpg", after: 100)
        _ = await contractOutcome { try await h.pipeline.image(for: url) }
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
        #expect(h.pipeline.cache[ImageRequest(url: url)] == nil)
        server.truncate(path: "/f.jpg", after: nil)
        let good = try await h.pipeline.image(for: url)
        #expect(good.cacheType == nil)
        #expect(server.recordedRequests(for: "/f.jpg").last?.header("If-None-Match") == nil)
    }

    // MARK: Freshness boundary

    @Test func maxAgeBoundaryIsStaleExactlyAtMaxAge() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/b.jpg", data: Self.v1, etag: "\"b\"", cacheControl: "max-age=100")
        let url = server.url(for: "/b.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 99.5)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/b.jpg") == 1)
        h.clock.advance(by: 0.5)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/b.jpg") == 2)
    }

    @Test func theClockGoingBackwardsKeepsAnEntryFreshAndServed() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/cb.jpg", data: Self.v1, etag: "\"cb\"", cacheControl: "max-age=100")
        let url = server.url(for: "/cb.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: -86_400)
        h.dataCache?.sweep()
        await h.flush()
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/cb.jpg") == 1)
        // Back to the present and past max-age: revalidated.
        h.clock.advance(by: 86_400 + 200)
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.requestCount(for: "/cb.jpg") == 2)
    }

    // MARK: Options

    @Test func reloadIgnoringCachedDataMakesOneRequestAndUpdatesBothLayers() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/rl.jpg", data: Self.v1, etag: "\"1\"", cacheControl: "max-age=1000")
        let url = server.url(for: "/rl.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        server.serve(path: "/rl.jpg", data: Self.v2, etag: "\"2\"", cacheControl: "max-age=1000")
        let reloaded = try await h.pipeline.image(for: ImageRequest(url: url, options: [.reloadIgnoringCachedData]))
        #expect(reloaded.cacheType == nil)
        #expect(server.requestCount(for: "/rl.jpg") == 2)
        // Unconditional: the cache was ignored, the bytes must come back.
        #expect(server.recordedRequests(for: "/rl.jpg").last?.header("If-None-Match") == nil)
        await h.flush()
        #expect(h.dataCache?.cachedData(for: originalKey(url))?.data == Self.v2)
        let after = try await h.pipeline.image(for: url)
        #expect(after.cacheType == .memory)
        #expect(after.image == reloaded.image)
    }

    @Test func returnCacheDataDontLoadServesAStaleEntryAndFailsTypedOnAMiss() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/o.jpg", data: Self.v1, etag: "\"o\"", cacheControl: "max-age=10")
        let url = server.url(for: "/o.jpg")
        let missing = server.url(for: "/missing.jpg")
        let error = await errorThrown { try await h.pipeline.image(for: ImageRequest(url: missing, options: [.returnCacheDataDontLoad])) }
        #expect(ImagePipeline.Error.Code.of(error!) == .dataMissingInCache)
        #expect(server.statistics.totalRequests == 0)
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 3600)
        h.pipeline.cache.removeAllFromMemory()
        let offline = try await h.pipeline.image(for: ImageRequest(url: url, options: [.returnCacheDataDontLoad]))
        #expect(offline.cacheType == .disk)
        #expect(server.statistics.totalRequests == 1)
    }

    // MARK: More revalidation paths

    @Test func encodedProcessedEntriesAreNotServedPastTheirFreshness() async throws {
        let server = try LoopbackServer()
        let h = PipelineCacheHarness { configuration in
            configuration.dataLoader = DataLoader()
            configuration.retryPolicy = .none
            configuration.dataCachePolicy = .storeEncodedImages
        }
        defer { h.cleanUp() }
        server.serve(path: "/pe.jpg", data: Self.v1, etag: "\"1\"", cacheControl: "max-age=10")
        let request = ImageRequest(url: server.url(for: "/pe.jpg"), processors: [MockImageProcessor("p")], thumbnail: .maxPixelSize(8))
        _ = try await h.pipeline.image(for: request)
        await h.pipeline.waitForMetrics { $0.diskCache.writes >= 1 } // encoded off the response's path
        await h.flush()
        h.clock.advance(by: 5)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: request).cacheType == .disk)
        #expect(server.requestCount(for: "/pe.jpg") == 1)
        // Past max-age, and the image changed on the server.
        server.serve(path: "/pe.jpg", data: Self.v2, etag: "\"2\"", cacheControl: "max-age=10")
        h.clock.advance(by: 3600)
        h.pipeline.cache.removeAllFromMemory()
        _ = try await h.pipeline.image(for: request)
        #expect(server.requestCount(for: "/pe.jpg") == 2)
    }

    @Test(arguments: [DataCachePolicy.storeEncodedImages, .storeAll])
    func aNoStoreResponseIsNotWrittenAsAnEncodedImageEither(policy: DataCachePolicy) async throws {
        let server = try LoopbackServer()
        let h = PipelineCacheHarness { configuration in
            configuration.dataLoader = DataLoader()
            configuration.retryPolicy = .none
            configuration.dataCachePolicy = policy
        }
        defer { h.cleanUp() }
        server.serve(path: "/nse.jpg", data: Self.v1, etag: "\"1\"", cacheControl: "no-store")
        let request = ImageRequest(url: server.url(for: "/nse.jpg"), processors: [MockImageProcessor("p")], thumbnail: .maxPixelSize(8))
        _ = try await h.pipeline.image(for: request)
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: request))
        #expect(h.dataCache?.metrics.writes == 0)
        h.pipeline.cache.removeAllFromMemory()
        _ = try await h.pipeline.image(for: request)
        #expect(server.requestCount(for: "/nse.jpg") == 2)
    }

    @Test func a304CarryingNoStoreDoesNotKeepTheEntryFresh() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/ns304.jpg", data: Self.v1, etag: "\"x\"", cacheControl: "max-age=10")
        let url = server.url(for: "/ns304.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 20)
        server.serve(path: "/ns304.jpg", data: Self.v1, etag: "\"x\"", cacheControl: "no-store")
        #expect(try await loadFromDisk(h, url).cacheType == .disk)
        #expect(server.statistics.notModifiedResponses == 1)
        await h.flush()
        h.clock.advance(by: 1)
        _ = try await loadFromDisk(h, url)
        #expect(server.requestCount(for: "/ns304.jpg") == 3)
    }

    @Test func urlSessionsOwnCacheIsOffWithTheDiskCacheOn() async throws {
        let server = try LoopbackServer()
        let h = harness(memory: false)
        defer { h.cleanUp() }
        server.serve(path: "/u.jpg", data: Self.v1, etag: "\"u\"", cacheControl: "max-age=1000")
        let url = server.url(for: "/u.jpg")
        for _ in 0..<3 { _ = try await h.pipeline.image(for: ImageRequest(url: url, options: [.disableDiskCacheReads])) }
        #expect(server.requestCount(for: "/u.jpg") == 3)
        #expect(server.recordedRequests(for: "/u.jpg").allSatisfy { $0.header("If-None-Match") == nil })
    }

    @Test func dataForRequestRevalidatesAStaleEntry() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/d.jpg", data: Self.v1, etag: "\"d\"", cacheControl: "max-age=10")
        let request = ImageRequest(url: server.url(for: "/d.jpg"))
        #expect(try await h.pipeline.data(for: request).0 == Self.v1)
        await h.flush()
        #expect(try await h.pipeline.data(for: request).0 == Self.v1)
        #expect(server.requestCount(for: "/d.jpg") == 1)
        h.clock.advance(by: 20)
        #expect(try await h.pipeline.data(for: request).0 == Self.v1)
        #expect(server.requestCount(for: "/d.jpg") == 2)
        #expect(server.statistics.notModifiedResponses == 1)
    }

    @Test func bytesThatFailToDecodeDoNotPoisonTheCache() async throws {
        let server = try LoopbackServer()
        let h = PipelineCacheHarness { configuration in
            configuration.dataLoader = DataLoader()
            configuration.retryPolicy = .none
            configuration.decoder = ImagePipeline.Configuration().decoder
        }
        defer { h.cleanUp() }
        server.serve(path: "/bad.png", data: Data("<html>not an image</html>".utf8), contentType: "text/html")
        let url = server.url(for: "/bad.png")
        let error = await errorThrown { try await h.pipeline.image(for: url) }
        #expect(error.flatMap(ImagePipeline.Error.Code.of) == .decodingFailed)
        await h.flush()
        server.serve(path: "/bad.png", data: try pipelineCachePNG(), contentType: "image/png")
        let recovered = await contractOutcome { try await h.pipeline.image(for: url) }
        // Failures are never cached: the undecodable bytes were removed, so the fixed server
        // is asked again.
        if case .failure(let error) = recovered { Issue.record("served the cached undecodable bytes again: \(error)") }
        #expect(server.requestCount(for: "/bad.png") == 2)
    }

    /// An image refused for being over the pixel limit is not damaged: its bytes stay on disk,
    /// and the next request is refused from them without the network.
    @Test func bytesOverThePixelLimitStayOnDisk() async throws {
        let server = try LoopbackServer()
        let h = PipelineCacheHarness { configuration in
            configuration.dataLoader = DataLoader()
            configuration.retryPolicy = .none
            configuration.decoder = ImagePipeline.Configuration().decoder
            configuration.maximumDecodedPixelCount = 4
        }
        defer { h.cleanUp() }
        server.serve(path: "/big.png", data: try pipelineCachePNG(), contentType: "image/png")
        let url = server.url(for: "/big.png")
        for _ in 0..<2 {
            let error = await errorThrown { try await h.pipeline.image(for: url) }
            #expect(error.flatMap(ImagePipeline.Error.Code.of) == .decodingFailed)
            await h.flush()
        }
        #expect(server.requestCount(for: "/big.png") == 1)
        #expect(h.pipeline.cache.containsData(for: ImageRequest(url: url)))
    }

    @Test func storedCachedDataAnswersWithoutNetwork() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let request = ImageRequest(url: PipelineCacheURLs.b)
        h.pipeline.cache.storeCachedData(Data(repeating: 9, count: 100), for: request)
        #expect(h.pipeline.cache.cachedData(for: request) == Data(repeating: 9, count: 100))
        #expect(try await h.pipeline.image(for: request).cacheType == .disk)
        #expect(h.loader.loadCount == 0)
    }

    @Test func cookiesAndMarkedHeadersAreCredentials() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        func request(cookie: String?, token: String?) -> ImageRequest {
            var urlRequest = URLRequest(url: PipelineCacheURLs.a)
            if let cookie { urlRequest.setValue(cookie, forHTTPHeaderField: "Cookie") }
            if let token { urlRequest.setValue(token, forHTTPHeaderField: "X-Token") }
            var r = ImageRequest(urlRequest: urlRequest)
            r.credentialHeaders = ["X-Token"]
            return r
        }
        _ = try await h.pipeline.image(for: request(cookie: "s=1", token: nil))
        _ = try await h.pipeline.image(for: request(cookie: "s=2", token: nil))
        _ = try await h.pipeline.image(for: request(cookie: nil, token: "t1"))
        _ = try await h.pipeline.image(for: request(cookie: nil, token: "t2"))
        #expect(h.loader.loadCount == 4)
        #expect(try await h.pipeline.image(for: request(cookie: nil, token: "t2")).cacheType == .memory)
    }

    @Test func memoryTTLInThePipelineSendsTheRequestToTheLayersBelow() async throws {
        let clock = CacheTestClock()
        let h = PipelineCacheHarness(clock: clock, imageCache: ImageCache(ttl: 60, clock: clock.cacheClock))
        defer { h.cleanUp() }
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        await h.flush()
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .memory)
        clock.advance(by: 60)
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .disk)
        #expect(h.loader.loadCount == 1)
    }

    @Test func concurrentRequestsForAStaleEntrySendOneConditionalRequest() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/cc.jpg", data: Self.v1, etag: "\"c\"", cacheControl: "max-age=10")
        let url = server.url(for: "/cc.jpg")
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        h.clock.advance(by: 20)
        h.pipeline.cache.removeAllFromMemory()
        server.hold("/cc.jpg")
        async let a = h.pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(4)))
        async let b = h.pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(8)))
        try await server.waitForRequests(path: "/cc.jpg", count: 2)
        await h.recorder.wait { $0.subscriptions(.fetch) >= 3 }
        server.release("/cc.jpg")
        let (ra, rb) = try await (a, b)
        #expect(ra.cacheType == .disk && rb.cacheType == .disk)
        #expect(server.requestCount(for: "/cc.jpg") == 2)
    }

    @Test func processedDiskEntriesCarryTheCredentialsAndGoWithRemoveAllForRequest() async throws {
        let h = PipelineCacheHarness { $0.dataCachePolicy = .storeEncodedImages }
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.a
        let p = MockImageProcessor("p")
        let alice = pipelineCacheRequest(url, authorization: "Bearer alice", processors: [p], thumbnail: .maxPixelSize(8))
        let bob = pipelineCacheRequest(url, authorization: "Bearer bob", processors: [p], thumbnail: .maxPixelSize(8))
        _ = try await h.pipeline.image(for: alice)
        await h.pipeline.waitForMetrics { $0.diskCache.writes >= 1 } // encoded off the response's path
        await h.flush()
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: bob).cacheType == nil)
        #expect(h.loader.loadCount == 2)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: alice).cacheType == .disk)
        h.pipeline.cache.removeAll(for: alice)
        #expect(try await h.pipeline.image(for: alice).cacheType == nil)
        #expect(h.loader.loadCount == 3)
    }

    // MARK: Credentials

    @Test func credentialsSeparateEntriesInBothLayersAndAcrossRestarts() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/p.jpg", data: Self.v1, cacheControl: "max-age=1000")
        let url = server.url(for: "/p.jpg")
        let alice = pipelineCacheRequest(url, authorization: "Bearer alice")
        let bob = pipelineCacheRequest(url, authorization: "Bearer bob")
        let anonymous = ImageRequest(url: url)
        #expect(try await h.pipeline.image(for: alice).cacheType == nil)
        #expect(try await h.pipeline.image(for: anonymous).cacheType == nil)
        #expect(try await h.pipeline.image(for: bob).cacheType == nil)
        #expect(server.requestCount(for: "/p.jpg") == 3)
        #expect(server.recordedRequests(for: "/p.jpg").map { $0.header("Authorization") } == ["Bearer alice", nil, "Bearer bob"])
        #expect(try await h.pipeline.image(for: alice).cacheType == .memory)
        await h.flush()
        // A new pipeline over the same directory: Alice's bytes on disk answer Alice only.
        var configuration = ImagePipeline.Configuration(dataLoader: DataLoader())
        configuration.decoder = TrivialImageDecoder()
        configuration.dataCache = DataCache(name: "test", directory: h.directory, clock: h.clock.cacheClock)
        let restarted = ImagePipeline(configuration: configuration)
        #expect(try await restarted.image(for: alice).cacheType == .disk)
        #expect(server.requestCount(for: "/p.jpg") == 3)
        let carol = pipelineCacheRequest(url, authorization: "Bearer carol")
        #expect(try await restarted.image(for: carol).cacheType == nil)
        #expect(server.requestCount(for: "/p.jpg") == 4)
    }

    @Test func sameImageIDWithDifferentCredentialsNeverSharesADownloadOrEntry() async throws {
        let server = try LoopbackServer()
        let h = harness()
        defer { h.cleanUp() }
        server.serve(path: "/obj.jpg", data: Self.v1, cacheControl: "max-age=1000")
        server.hold("/obj.jpg")
        let one = pipelineCacheRequest(server.url(for: "/obj.jpg?sig=1"), authorization: "Bearer a", imageID: "obj")
        let two = pipelineCacheRequest(server.url(for: "/obj.jpg?sig=2"), authorization: "Bearer b", imageID: "obj")
        async let first = h.pipeline.image(for: one)
        async let second = h.pipeline.image(for: two)
        try await server.waitForRequests(path: "/obj.jpg", count: 2)
        server.release("/obj.jpg")
        _ = try await (first, second)
        #expect(server.requestCount(for: "/obj.jpg") == 2)
        // Same imageID, same credentials, another signature: shares the entry.
        let three = pipelineCacheRequest(server.url(for: "/obj.jpg?sig=3"), authorization: "Bearer a", imageID: "obj")
        #expect(try await h.pipeline.image(for: three).cacheType == .memory)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: three).cacheType == .disk)
        #expect(server.requestCount(for: "/obj.jpg") == 2)
    }
}

/// What `body` returned or threw.
func contractOutcome<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do { return .success(try await body()) } catch { return .failure(error) }
}
