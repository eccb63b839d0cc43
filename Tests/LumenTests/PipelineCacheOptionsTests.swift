import Foundation
import Testing
import Lumen
import LumenTestSupport

/// Request options against warm and cold caches.
@Suite(.timeLimit(.minutes(1)))
struct PipelineCacheOptionsTests {
    /// A harness whose caches hold `PipelineCacheURLs.a` in both layers (memory emptied when
    /// `memory` is false); counters are read relative to this state.
    private func warm(memory: Bool = true) async throws -> PipelineCacheHarness {
        let h = PipelineCacheHarness()
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        if !memory { h.pipeline.cache.removeAllFromMemory() }
        return h
    }

    @Test func reloadIgnoringCachedDataMakesOneNetworkRequestAndUpdatesTheCaches() async throws {
        let h = try await warm()
        defer { h.cleanUp() }
        let newBytes = Data((0..<64).map { UInt8(255 - $0) })
        h.loader.serve(newBytes, for: PipelineCacheURLs.a)
        let reload = ImageRequest(url: PipelineCacheURLs.a, options: .reloadIgnoringCachedData)
        let response = try await h.pipeline.image(for: reload)
        #expect(response.cacheType == nil)
        #expect(h.loader.loadCount == 2)
        #expect(h.pipeline.metrics.networkRequestsStarted == 2)
        // Both layers now hold the reloaded image.
        let fresh = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(fresh.cacheType == .memory && fresh.image == response.image)
        h.pipeline.cache.removeAllFromMemory()
        let fromDisk = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(fromDisk.cacheType == .disk && fromDisk.image == response.image)
        #expect(h.pipeline.cache.cachedData(for: ImageRequest(url: PipelineCacheURLs.a)) == newBytes)
        #expect(h.loader.loadCount == 2)
    }

    @Test func returnCacheDataDontLoadFailsOnAMissWithoutTheNetwork() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let request = ImageRequest(url: PipelineCacheURLs.a, options: .returnCacheDataDontLoad)
        let error = await errorThrown { try await h.pipeline.image(for: request) }
        #expect(ImagePipeline.Error.Code.of(error!) == .dataMissingInCache)
        let dataError = await errorThrown { try await h.pipeline.data(for: request) }
        #expect(ImagePipeline.Error.Code.of(dataError!) == .dataMissingInCache)
        #expect(h.loader.loadCount == 0)
        #expect(h.pipeline.metrics.networkRequestsStarted == 0)
    }

    @Test func returnCacheDataDontLoadServesStaleDiskEntries() async throws {
        let h = try await warm(memory: false)
        defer { h.cleanUp() }
        h.clock.advance(by: 30 * 24 * 3600) // far past the TTL, not yet swept
        let response = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, options: .returnCacheDataDontLoad))
        #expect(response.cacheType == .disk)
        #expect(h.loader.loadCount == 1)
    }

    @Test func disablingMemoryReadsGoesToDisk() async throws {
        let h = try await warm()
        defer { h.cleanUp() }
        let response = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, options: .disableMemoryCacheReads))
        #expect(response.cacheType == .disk)
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 2)
    }

    @Test func disablingMemoryWritesLeavesMemoryEmpty() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, options: .disableMemoryCacheWrites))
        #expect(!h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineCacheURLs.a)))
        #expect(h.pipeline.metrics.memoryCache.writes == 0)
        #expect(h.pipeline.cache.containsData(for: ImageRequest(url: PipelineCacheURLs.a)))
    }

    @Test func disablingDiskReadsGoesToTheNetwork() async throws {
        let h = try await warm(memory: false)
        defer { h.cleanUp() }
        let response = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, options: .disableDiskCacheReads))
        #expect(response.cacheType == nil)
        #expect(h.loader.loadCount == 2)
        #expect(h.pipeline.metrics.diskCache.lookups == 1) // only the first, cold, request looked
    }

    @Test func disablingDiskWritesLeavesTheDiskEmpty() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, options: .disableDiskCacheWrites))
        await h.flush()
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: PipelineCacheURLs.a)))
        #expect(h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineCacheURLs.a)))
        #expect(h.pipeline.metrics.diskCache.writes == 0)
    }

    @Test func aReloadNeverJoinsAFetchServedFromDisk() async throws {
        let h = try await warm(memory: false)
        defer { h.cleanUp() }
        h.loader.isSuspended = true
        let reload = h.pipeline.imageTask(with: ImageRequest(url: PipelineCacheURLs.a, options: .reloadIgnoringCachedData))
        let normal = h.pipeline.imageTask(with: ImageRequest(url: PipelineCacheURLs.a))
        #expect(try await normal.response.cacheType == .disk)
        await h.loader.waitForLoads(2)
        h.loader.resume()
        #expect(try await reload.response.cacheType == nil)
        #expect(h.loader.loadCount == 2)
    }
}
