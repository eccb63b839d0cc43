import Foundation
import Testing
import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The cache layers wired into the graph: which layer answers, in which order, with which keys.
@Suite(.timeLimit(.minutes(1)))
struct PipelineCacheLayerTests {
    @Test func layersAnswerInOrderMemoryThenDiskThenNetwork() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let request = ImageRequest(url: PipelineCacheURLs.a)

        let first = try await h.pipeline.image(for: request)
        #expect(first.cacheType == nil)
        #expect(h.loader.loadCount == 1 && h.decoder.decodeCount == 1)

        let second = try await h.pipeline.image(for: request)
        #expect(second.cacheType == .memory)
        #expect(second.image == first.image)
        #expect(h.loader.loadCount == 1 && h.decoder.decodeCount == 1) // no decode, no network

        h.pipeline.cache.removeAllFromMemory()
        let third = try await h.pipeline.image(for: request)
        #expect(third.cacheType == .disk)
        #expect(third.image == first.image)
        #expect(h.loader.loadCount == 1) // no network
        #expect(h.decoder.decodeCount == 2) // decoded again from the bytes on disk

        let metrics = h.pipeline.metrics
        #expect(metrics.memoryCache.lookups == 3 && metrics.memoryCache.hits == 1)
        #expect(metrics.memoryCache.writes == 2)
        #expect(metrics.diskCache.lookups == 2 && metrics.diskCache.hits == 1 && metrics.diskCache.writes == 1)
        #expect(metrics.diskCacheFreshHits == 1)
    }

    @Test func aDiskHitIsNotWrittenAgain() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        await h.flush()
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .disk)
        await h.flush()
        #expect(h.pipeline.metrics.diskCache.writes == 1)
        #expect(h.dataCache?.metrics.writes == 1)
    }

    @Test func changingTheDecodeSizeRedecodesFromCachedBytes() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, thumbnail: .maxPixelSize(160)))
        let larger = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, thumbnail: .maxPixelSize(640)))
        #expect(larger.image.width == 640)
        #expect(larger.cacheType == .disk)
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
        #expect(h.decoder.decodeCount == 2)
    }

    @Test func overlappingDecodeSizesShareTheDownloadWithoutADiskCache() async throws {
        let h = PipelineCacheHarness(disk: false)
        h.loader.isSuspended = true
        let small = h.pipeline.imageTask(with: ImageRequest(url: PipelineCacheURLs.a, thumbnail: .maxPixelSize(160)))
        let large = h.pipeline.imageTask(with: ImageRequest(url: PipelineCacheURLs.a, thumbnail: .maxPixelSize(640)))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        #expect(try await small.image.width == 160)
        #expect(try await large.image.width == 640)
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 2)
    }

    @Test func aNewPipelineOverTheSameDirectoryServesFromDisk() async throws {
        let first = PipelineCacheHarness()
        defer { first.cleanUp() }
        let original = try await first.pipeline.image(for: PipelineCacheURLs.a)
        await first.flush()

        let second = PipelineCacheHarness(directory: first.directory)
        let response = try await second.pipeline.image(for: PipelineCacheURLs.a)
        #expect(response.cacheType == .disk)
        #expect(response.image == original.image)
        #expect(second.loader.loadCount == 0)
        #expect(second.pipeline.metrics.networkRequestsStarted == 0)
    }

    @Test func httpFailuresAreNeverCached() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        h.loader.fail(PipelineCacheURLs.a, statusCode: 500)
        let error = await errorThrown { try await h.pipeline.image(for: PipelineCacheURLs.a) }
        #expect((error as? ImagePipeline.Error)?.statusCode == 500)
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: PipelineCacheURLs.a)))
        #expect(!h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineCacheURLs.a)))

        h.loader.removeFailure(for: PipelineCacheURLs.a)
        let response = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(response.cacheType == nil)
        #expect(h.loader.loadCount == 2)
        #expect(h.pipeline.metrics.diskCache.writes == 1)
    }

    @Test func aMemoryHitReturnsACompletedTaskWithoutTouchingTheLoader() async throws {
        let h = PipelineCacheHarness(disk: false)
        let request = ImageRequest(url: PipelineCacheURLs.a)
        _ = try await h.pipeline.image(for: request)
        #expect(h.pipeline.cache[request] != nil)
        #expect(h.pipeline.cache.containsCachedImage(for: request))

        h.loader.isSuspended = true // a load would hang: the hit must not make one
        let task = h.pipeline.imageTask(with: request)
        #expect(task.state == .completed) // already, synchronously
        #expect(h.pipeline.metrics.liveRequests == 0)
        let response = try await task.response
        #expect(response.cacheType == .memory)
        var events: [ImageTask.Event] = []
        for await event in task.events { events.append(event) }
        #expect(events.count == 1)
        #expect(try await h.pipeline.image(for: request).cacheType == .memory)
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.fetch.started == 1 && h.pipeline.metrics.decode.started == 1)
    }

    @Test func anInvalidatedPipelineDoesNotServeMemoryHits() async throws {
        let h = PipelineCacheHarness(disk: false)
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        h.pipeline.invalidate()
        let error = await errorThrown { try await h.pipeline.image(for: PipelineCacheURLs.a) }
        #expect(ImagePipeline.Error.Code.of(error!) == .pipelineInvalidated)
    }

    @Test func storingThroughTheSubscriptAnswersRequests() async throws {
        let h = PipelineCacheHarness(disk: false)
        let request = ImageRequest(url: PipelineCacheURLs.b, thumbnail: .maxPixelSize(10))
        let image = ImageContainer(image: Bitmap(width: 3, height: 2, format: .rgb8, pixels: [UInt8](repeating: 9, count: 18)))
        h.pipeline.cache[request] = image
        let response = try await h.pipeline.image(for: request)
        #expect(response.cacheType == .memory && response.image == image.image)
        #expect(h.loader.loadCount == 0)
        // The key includes the decode size: another size is a miss.
        #expect(h.pipeline.cache[ImageRequest(url: PipelineCacheURLs.b)] == nil)
        h.pipeline.cache[request] = nil
        #expect(!h.pipeline.cache.containsCachedImage(for: request))
    }

    @Test func credentialFingerprintSeparatesMemoryEntries() async throws {
        let h = PipelineCacheHarness(disk: false)
        let alice = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer alice")
        let bob = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer bob")
        _ = try await h.pipeline.image(for: alice)
        #expect(h.pipeline.cache[alice] != nil)
        #expect(h.pipeline.cache[bob] == nil)
        #expect(h.pipeline.cache[ImageRequest(url: PipelineCacheURLs.a)] == nil)
        let response = try await h.pipeline.image(for: bob)
        #expect(response.cacheType == nil)
        #expect(h.loader.loadCount == 2)
        #expect(try await h.pipeline.image(for: alice).cacheType == .memory)
        #expect(h.loader.loadCount == 2)
    }

    @Test func credentialFingerprintSeparatesDiskEntries() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let alice = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer alice")
        let bob = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer bob")
        _ = try await h.pipeline.image(for: alice)
        h.pipeline.cache.removeAllFromMemory()
        #expect(h.pipeline.cache.containsData(for: alice))
        #expect(!h.pipeline.cache.containsData(for: bob))
        #expect(try await h.pipeline.image(for: bob).cacheType == nil)
        #expect(h.loader.loadCount == 2)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: alice).cacheType == .disk)
        #expect(h.loader.loadCount == 2)
    }

    @Test func imageIDSharesEntriesButNeverADownloadAcrossCredentials() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        // Different credentials: two downloads, even while both are running.
        h.loader.isSuspended = true
        let one = h.pipeline.imageTask(with: pipelineCacheRequest(PipelineCacheURLs.signed("1"), authorization: "Bearer alice", imageID: "object"))
        let two = h.pipeline.imageTask(with: pipelineCacheRequest(PipelineCacheURLs.signed("2"), authorization: "Bearer bob", imageID: "object"))
        await h.loader.waitForLoads(2)
        h.loader.resume()
        _ = try await one.response
        #expect(try await two.response.cacheType == nil)
        #expect(h.loader.loadCount == 2)

        // The same imageID without credentials: one download; the other signed URL is served
        // from memory, then (memory emptied) from disk.
        let plain = PipelineCacheHarness()
        defer { plain.cleanUp() }
        let first = try await plain.pipeline.image(for: pipelineCacheRequest(PipelineCacheURLs.signed("1"), imageID: "object"))
        let second = try await plain.pipeline.image(for: pipelineCacheRequest(PipelineCacheURLs.signed("2"), imageID: "object"))
        #expect(second.cacheType == .memory && second.image == first.image)
        plain.pipeline.cache.removeAllFromMemory()
        #expect(try await plain.pipeline.image(for: pipelineCacheRequest(PipelineCacheURLs.signed("3"), imageID: "object")).cacheType == .disk)
        #expect(plain.loader.loadCount == 1)
        #expect(plain.loader.requestedURLs == [PipelineCacheURLs.signed("1")])
    }

    @Test func intermediatePrefixesAreStoredOnlyWhenRequested() async throws {
        let h = PipelineCacheHarness(disk: false)
        let applications = ProcessorApplications()
        let a = MockImageProcessor("a", applications: applications)
        let b = MockImageProcessor("b", applications: applications)
        let ab = ImageRequest(url: PipelineCacheURLs.a, processors: [a, b])
        let onlyA = ImageRequest(url: PipelineCacheURLs.a, processors: [a])
        _ = try await h.pipeline.image(for: ab)
        #expect(h.pipeline.cache[ab] != nil)
        #expect(h.pipeline.cache[onlyA] == nil) // computed on the way, never asked for
        #expect(h.pipeline.cache[ImageRequest(url: PipelineCacheURLs.a)] == nil)
        #expect(h.pipeline.metrics.memoryCache.writes == 1)

        // Now ask for [a] itself: it is stored.
        _ = try await h.pipeline.image(for: onlyA)
        #expect(h.pipeline.cache[onlyA] != nil)
        #expect(h.loader.loadCount == 2) // no disk cache: nothing else had the bytes

        // [a, b] gone from memory: the [a] prefix answers, only b runs.
        h.pipeline.cache[ab] = nil
        let before = (a: applications["mock.a"], b: applications["mock.b"], decodes: h.decoder.decodeCount)
        let response = try await h.pipeline.image(for: ab)
        #expect(response.cacheType == .memory)
        #expect(applications["mock.a"] == before.a)
        #expect(applications["mock.b"] == before.b + 1)
        #expect(h.decoder.decodeCount == before.decodes)
        #expect(h.loader.loadCount == 2)
    }

    /// With a disk cache too, the order between the two is: an intermediate prefix in memory
    /// answers before the original bytes on disk are looked up.
    @Test func aMemoryPrefixAnswersBeforeTheOriginalBytesOnDisk() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let applications = ProcessorApplications()
        let a = MockImageProcessor("a", applications: applications)
        let b = MockImageProcessor("b", applications: applications)
        let ab = ImageRequest(url: PipelineCacheURLs.a, processors: [a, b])
        let onlyA = ImageRequest(url: PipelineCacheURLs.a, processors: [a])
        _ = try await h.pipeline.image(for: onlyA)
        await h.flush()
        #expect(h.pipeline.cache.containsData(for: ImageRequest(url: PipelineCacheURLs.a)))

        let before = (lookups: h.pipeline.metrics.diskCache.lookups, decodes: h.decoder.decodeCount,
                      a: applications["mock.a"], b: applications["mock.b"])
        let response = try await h.pipeline.image(for: ab)
        #expect(response.cacheType == .memory)
        #expect(applications["mock.b"] == before.b + 1)
        #expect(applications["mock.a"] == before.a)
        #expect(h.decoder.decodeCount == before.decodes)
        // The disk was not consulted: the default policy stores no processed images, and the
        // original bytes are not needed once the prefix answers.
        #expect(h.pipeline.metrics.diskCache.lookups == before.lookups)
        #expect(h.pipeline.metrics.diskCache.hits == 0)
        #expect(h.loader.loadCount == 1)
    }

    @Test func anOversizeImageIsNotStoredAndIsCounted() async throws {
        // 64×1 RGB = 192 bytes, above 10% of a 1,000-byte limit.
        let h = PipelineCacheHarness(disk: false, imageCache: ImageCache(costLimit: 1_000))
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(h.pipeline.metrics.memoryCacheRejectedOversize == 1)
        #expect(h.pipeline.metrics.memoryCache.writes == 0)
        #expect(h.imageCache.metrics.rejectedOversizeCount == 1)
        #expect(!h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineCacheURLs.a)))
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(h.loader.loadCount == 2)
    }

    @Test func removeAllEmptiesBothLayersAndRemoveAllFromMemoryKeepsTheBytes() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let request = ImageRequest(url: PipelineCacheURLs.a)
        _ = try await h.pipeline.image(for: request)
        h.pipeline.cache.removeAllFromMemory()
        #expect(!h.pipeline.cache.containsCachedImage(for: request))
        #expect(h.pipeline.cache.containsData(for: request))
        #expect(try await h.pipeline.image(for: request).cacheType == .disk)

        h.pipeline.cache.removeAll()
        #expect(!h.pipeline.cache.containsCachedImage(for: request))
        #expect(!h.pipeline.cache.containsData(for: request))
        #expect(try await h.pipeline.image(for: request).cacheType == nil)
        #expect(h.loader.loadCount == 2)

        h.pipeline.cache.removeAll(for: request)
        #expect(!h.pipeline.cache.containsCachedImage(for: request))
        #expect(!h.pipeline.cache.containsData(for: request))
    }

    @Test func defaultConfigurationsHaveTheirOwnMemoryCacheAndNoDiskCache() {
        let one = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        let two = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        #expect(one.imageCache != nil && two.imageCache != nil)
        #expect(one.imageCache !== two.imageCache)
        #expect(one.dataCache == nil)
        #expect(one.dataCachePolicy == .storeOriginalData)
        #expect(one.isHTTPCachingRespected)
    }
}

extension PipelineCacheLayerTests {
    @Test func dataClosureResultsAreCachedOnDiskByTheirID() async throws {
        let first = PipelineCacheHarness()
        defer { first.cleanUp() }
        let calls = CallCounter()
        let bytes = Data((0..<32).map { UInt8($0) })
        let request = ImageRequest(id: "generated-1", data: { calls.increment(); return bytes })
        _ = try await first.pipeline.image(for: request)
        await first.flush()
        let second = PipelineCacheHarness(directory: first.directory)
        #expect(try await second.pipeline.image(for: request).cacheType == .disk)
        #expect(calls.value == 1)
    }

    @Test func localFileURLsBypassTheDiskCache() async throws {
        let h = PipelineCacheHarness { $0.dataLoader = DataLoader() }
        defer { h.cleanUp() }
        let file = h.directory.deletingLastPathComponent().appendingPathComponent("lumen-local-\(UUID().uuidString).bin")
        try Data((0..<32).map { UInt8($0) }).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try await h.pipeline.image(for: file)
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: file)))
        #expect(h.pipeline.metrics.diskCache.lookups == 0)
    }
}

extension PipelineCacheLayerTests {
    @Test func onlyGETResponsesAreWrittenToDisk() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        var post = URLRequest(url: PipelineCacheURLs.a)
        post.httpMethod = "POST"
        post.httpBody = Data("q=1".utf8)
        _ = try await h.pipeline.image(for: ImageRequest(urlRequest: post))
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: PipelineCacheURLs.a)))
        #expect(h.pipeline.metrics.diskCache.writes == 0)
    }
}
