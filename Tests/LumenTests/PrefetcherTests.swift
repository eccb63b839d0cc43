import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

@Suite(.timeLimit(.minutes(1)))
struct PrefetcherTests {
    // MARK: - Sharing with visible requests

    @Test func aVisibleRequestJoiningAPrefetchRaisesTheSharedDownloadAndDownloadsOnce() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingPriorities == [.low])

        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .high))
        #expect(queue.pendingPriorities == [.high])

        queue.isSuspended = false
        _ = try await visible.response
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.fetch.started == 1)
        #expect(prefetcher.outcomes.succeeded == 1)
    }

    @Test func stoppingAPrefetchWhileAVisibleRequestWaitsKeepsTheDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)

        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        #expect(h.pipeline.metrics.liveRequests == 1) // only the visible request is left
        #expect(prefetcher.isIdle)

        h.loader.resume()
        let response = try await visible.response
        #expect(response.image.width > 0)
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
    }

    @Test func stoppingAPrefetchAloneCancelsItBeforeItDownloads() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingCount == 1)

        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingCount == 0)
        await h.pipeline.waitForMetrics { $0.fetch.cancelled == 1 }
        queue.isSuspended = false
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 0)
        #expect(prefetcher.outcomes.succeeded == 0 && prefetcher.outcomes.failed == 0)
    }

    @Test func stoppingARunningPrefetchAloneCancelsTheDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching()
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
        #expect(h.pipeline.metrics.fetch.cancelled == 1)
        #expect(h.pipeline.metrics.decode.started == 1)
        #expect(h.pipeline.metrics.decodes == 0)
    }

    // MARK: - Destinations

    @Test func theDiskDestinationDownloadsWithoutDecoding() async throws {
        let h = PipelineHarness()
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        await prefetcher.waitUntilIdle()
        let metrics = h.pipeline.metrics
        #expect(metrics.networkRequestsStarted == 2)
        #expect(metrics.decode.started == 0)
        #expect(metrics.decodes == 0)
        #expect(h.decoder.decodeCount == 0)
        #expect(prefetcher.outcomes.succeeded == 2)
    }

    @Test func theMemoryDestinationDecodes() async throws {
        let h = PipelineHarness()
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(8))])
        await prefetcher.waitUntilIdle()
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
    }

    // MARK: - Bounded concurrency, order, pause

    @Test func noMoreThanTheLimitRunAtOnce() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let urls = (0..<6).map(PipelineURLs.numbered)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 2)
        prefetcher.startPrefetching(with: urls)
        // The first two subscribed synchronously; the rest wait in the prefetcher.
        #expect(h.pipeline.metrics.liveRequests == 2)
        await h.loader.waitForLoads(2)
        #expect(h.loader.loadCount == 2)
        #expect(Set(h.loader.requestedURLs) == Set(urls.prefix(2)))

        h.loader.resume()
        await prefetcher.waitUntilIdle()
        let metrics = h.pipeline.metrics
        #expect(h.loader.loadCount == 6)
        #expect(metrics.peakNetworkRequestsInFlight <= 2) // the data queue alone would allow 6
        #expect(metrics.peakNetworkRequestsInFlight >= 1)
        #expect(prefetcher.outcomes.succeeded == 6)
    }

    @Test func pendingPrefetchesStartInFIFOOrder() async throws {
        let h = PipelineHarness()
        let urls = (0..<5).map(PipelineURLs.numbered)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: urls)
        await prefetcher.waitUntilIdle()
        #expect(h.loader.requestedURLs == urls)
    }

    @Test func pausingHoldsNewPrefetchesAndResumingContinuesTheQueue() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: [PipelineURLs.numbered(0)])
        await h.loader.waitForLoads(1)
        prefetcher.isPaused = true
        prefetcher.startPrefetching(with: [1, 2].map(PipelineURLs.numbered))
        h.loader.resume() // the running one goes on while paused
        await h.pipeline.waitForMetrics { $0.liveRequests == 0 && $0.networkRequestsStarted == 1 }
        #expect(!prefetcher.isIdle)
        #expect(h.loader.loadCount == 1)

        prefetcher.isPaused = false
        await prefetcher.waitUntilIdle()
        #expect(h.loader.requestedURLs == [0, 1, 2].map(PipelineURLs.numbered))
    }

    // MARK: - Priority

    @Test func changingThePriorityReachesRunningAndPendingPrefetches() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let urls = (0..<3).map(PipelineURLs.numbered)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 2)
        #expect(prefetcher.priority == .low)
        prefetcher.startPrefetching(with: urls)
        #expect(queue.pendingPriorities == [.low, .low])

        prefetcher.priority = .high
        #expect(queue.pendingPriorities == [.high, .high])

        // Freeing a slot starts the pending third prefetch at the new priority.
        prefetcher.stopPrefetching(with: [urls[0]])
        #expect(queue.pendingPriorities == [.high, .high])
        prefetcher.priority = .veryLow
        #expect(queue.pendingPriorities == [.veryLow, .veryLow])

        queue.isSuspended = false
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 2)
        #expect(!h.loader.requestedURLs.contains(urls[0]))
    }

    // MARK: - Skipping

    @Test func aRequestAlreadyPrefetchingIsSkipped() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b, PipelineURLs.a])
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        #expect(h.pipeline.metrics.liveRequests == 1)
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 2)
        #expect(prefetcher.outcomes.succeeded == 2)
        #expect(h.pipeline.metrics.decode.joined == 0)
    }

    @Test func differentDecodeSizesAreDifferentPrefetches() async throws {
        let h = PipelineHarness()
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [
            ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(8)),
            ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(16)),
        ])
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 2)
        #expect(h.pipeline.metrics.decodes == 2)
    }

    @Test func anImageAlreadyInMemoryIsNotPrefetched() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: PipelineURLs.a)
        #expect(h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineURLs.a)))
        await h.waitUntilIdle() // the finished request's bookkeeping is done
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(prefetcher.isIdle)
        #expect(h.pipeline.metrics.liveRequests == 0)
        #expect(h.pipeline.metrics.fetch.started == 1)
    }

    @Test func bytesAlreadyOnDiskAreNotPrefetched() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-prefetch-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let h = PipelineHarness { $0.dataCache = DataCache(name: "prefetch", directory: directory) }
        _ = try await h.pipeline.data(for: ImageRequest(url: PipelineURLs.a))
        #expect(h.pipeline.cache.containsData(for: ImageRequest(url: PipelineURLs.a)))
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(prefetcher.isIdle)
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
    }

    // MARK: - Completion

    @Test func didCompleteIsCalledOnceWhenTheQueueDrains() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.b, statusCode: 500)
        let calls = CallCounter()
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        prefetcher.didComplete = {
            calls.increment()
            continuation.yield()
        }
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(3)])
        var iterator = stream.makeAsyncIterator()
        _ = await iterator.next()
        #expect(calls.value == 1)
        #expect(prefetcher.isIdle)
        #expect(prefetcher.outcomes.succeeded == 2)
        #expect(prefetcher.outcomes.failed == 1)
    }

    @Test func stoppingEverythingSignalsCompletion() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        async let idle: Void = prefetcher.waitUntilIdle()
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching()
        await idle
        await h.loader.waitForCancellations(1)
        #expect(h.loader.loadCount == 1)
    }

    @Test func releasingThePrefetcherStopsItsPrefetches() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        do {
            let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
            prefetcher.startPrefetching(with: [PipelineURLs.a])
            await h.loader.waitForLoads(1)
        }
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
    }

    // MARK: - Batch API

    @Test func batchPrefetchWaitsForEveryRequestAndCountsFailures() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.b, statusCode: 404)
        let urls = [PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(1), PipelineURLs.a]
        let outcome = await h.pipeline.prefetch(urls, maxConcurrent: 2)
        #expect(outcome == .init(succeeded: 2, failed: 1, skipped: 1))
        #expect(h.loader.loadCount == 3)
        #expect(h.pipeline.metrics.peakNetworkRequestsInFlight <= 2)
        #expect(h.pipeline.metrics.liveRequests == 0)
    }

    @Test func cancellingABatchPrefetchStopsIt() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let batch = Task { await h.pipeline.prefetch([PipelineURLs.a, PipelineURLs.b], maxConcurrent: 1) }
        await h.loader.waitForLoads(1)
        batch.cancel()
        let outcome = await batch.value
        #expect(outcome.succeeded == 0)
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
    }
}
