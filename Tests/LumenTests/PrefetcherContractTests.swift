import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

/// `ImagePrefetcher` and the batch `prefetch` API against their contract (the feed issue and
/// DESIGN.md §2), written from the contract rather than from the implementation: an
/// independent second set beside `PrefetcherTests`.
@Suite(.timeLimit(.minutes(1)))
struct PrefetcherContractTests {
    // MARK: - Defaults

    @Test func defaultsAreTwoAtOnceAtLowPriority() {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        #expect(prefetcher.maxConcurrentRequestCount == 2)
        #expect(prefetcher.priority == .low)
        #expect(prefetcher.destination == .memoryCache)
        #expect(!prefetcher.isPaused)
        prefetcher.startPrefetching(with: (0..<5).map(PipelineURLs.numbered))
        // Only two have subscribed to the pipeline, both at low priority.
        #expect(queue.pendingPriorities == [.low, .low])
        prefetcher.stopPrefetching()
        #expect(queue.pendingCount == 0)
    }

    // MARK: - Pause and priority

    @Test func aPausedPrefetcherStartsNothingAndResumingStartsWhatFits() {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.isPaused = true
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(1)])
        #expect(queue.pendingCount == 0)
        #expect(!prefetcher.isIdle)
        prefetcher.isPaused = false
        #expect(queue.pendingCount == 2)
        prefetcher.stopPrefetching()
    }

    @Test func aPriorityChangedWhilePausedReachesPrefetchesStartedOnResume() {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.isPaused = true
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        prefetcher.priority = .high
        prefetcher.isPaused = false
        #expect(queue.pendingPriorities == [.high])
        prefetcher.stopPrefetching()
    }

    @Test func aPriorityChangeReachesRunningAndQueuedPrefetches() {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        #expect(queue.pendingPriorities == [.low])
        prefetcher.priority = .veryHigh
        #expect(queue.pendingPriorities == [.veryHigh])
        // b was waiting in the prefetcher: it starts at the new priority.
        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingPriorities == [.veryHigh])
        prefetcher.stopPrefetching()
    }

    @Test func aDiskPrefetchsPriorityChangeReachesItsDownload() {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingPriorities == [.low])
        prefetcher.priority = .high
        #expect(queue.pendingPriorities == [.high])
        prefetcher.stopPrefetching()
    }

    @Test func aVisibleRequestLeavingFallsBackToThePrefetchersCurrentPriority() {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .veryHigh))
        #expect(queue.pendingPriorities == [.veryHigh])
        prefetcher.priority = .veryLow // the visible request still holds the shared work up
        #expect(queue.pendingPriorities == [.veryHigh])
        visible.cancel()
        #expect(queue.pendingPriorities == [.veryLow])
        prefetcher.stopPrefetching()
    }

    // MARK: - Sharing with visible requests

    @Test func aVisibleRequestJoiningADiskPrefetchRaisesItAtOnceAndSharesTheDownload() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingPriorities == [.low])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .high))
        #expect(queue.pendingPriorities == [.high])
        queue.isSuspended = false
        _ = try await visible.response
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
    }

    @Test func stoppingADiskPrefetchKeepsTheDownloadAVisibleRequestShares() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        h.loader.resume()
        _ = try await visible.response
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
    }

    @Test func stoppingAPrefetchKeepsTheDownloadOfAVisibleRequestAtAnotherSize() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(16))])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(64)))
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(16))])
        h.loader.resume()
        let response = try await visible.response
        #expect(response.image.width == 64)
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
    }

    // MARK: - Start / stop edge cases

    @Test func startStopStartOfOneURLEndsWithTheImageCached() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        #expect(prefetcher.isIdle)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(!prefetcher.isIdle) // started again, not skipped
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 1)
        #expect(prefetcher.outcomes.failed == 0)
        #expect(h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineURLs.a)))
        await h.waitUntilIdle()
    }

    @Test func aRequestGivenTwiceIsOnePrefetchAndOneStopEndsIt() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.a])
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await h.loader.waitForLoads(1)
        #expect(h.pipeline.metrics.liveRequests == 1)
        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        #expect(prefetcher.isIdle)
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
    }

    @Test func stoppingAPendingPrefetchSkipsItInTheQueue() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let urls = [PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(1)]
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: urls)
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching(with: [PipelineURLs.b])
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(h.loader.requestedURLs == [PipelineURLs.a, PipelineURLs.numbered(1)])
        #expect(prefetcher.outcomes.succeeded == 2)
    }

    @Test func aFailedPrefetchIsNotRemembered() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 503)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.failed == 1)
        h.loader.removeFailure(for: PipelineURLs.a)
        // Held, so that the prefetch is still running when it is looked at.
        h.loader.isSuspended = true
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(!prefetcher.isIdle)
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 1)
        #expect(h.loader.loadCount(for: PipelineURLs.a) == 2)
        #expect(h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineURLs.a)))
    }

    @Test func aPrefetchWithProcessorsLeavesTheProcessedImageInMemory() async throws {
        let h = PipelineHarness()
        let applications = ProcessorApplications()
        let request = ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("p", applications: applications)])
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [request])
        await prefetcher.waitUntilIdle()
        #expect(applications.total == 1)
        #expect(h.pipeline.cache.containsCachedImage(for: request))
        prefetcher.startPrefetching(with: [request]) // cached: skipped
        #expect(prefetcher.isIdle)
        let response = try await h.pipeline.imageTask(with: request).response
        #expect(response.cacheType == .memory)
        #expect(applications.total == 1)
        #expect(h.loader.loadCount == 1)
    }

    @Test func aDiskPrefetchWithoutADiskCacheDownloadsButNeverDecodes() async throws {
        let h = PipelineHarness() // no disk cache configured
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 1)
        #expect(h.decoder.decodeCount == 0)
        #expect(h.pipeline.metrics.decode.started == 0)
    }

    // MARK: - Completion signal

    @Test func didCompleteFiresOncePerDrainedBatch() async throws {
        let h = PipelineHarness()
        let calls = CallCounter()
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.didComplete = {
            calls.increment()
            continuation.yield()
        }
        var iterator = stream.makeAsyncIterator()
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        _ = await iterator.next()
        #expect(calls.value == 1)
        prefetcher.startPrefetching(with: [PipelineURLs.numbered(1)])
        _ = await iterator.next()
        #expect(calls.value == 2)
        prefetcher.stopPrefetching() // idle already: no extra signal
        #expect(calls.value == 2)
    }

    @Test func didCompleteFiresWhenEverythingAskedForWasAlreadyCached() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a))
        let calls = CallCounter()
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.didComplete = {
            calls.increment()
            continuation.yield()
        }
        var iterator = stream.makeAsyncIterator()
        prefetcher.startPrefetching(with: [PipelineURLs.a]) // everything already cached: at once
        #expect(calls.value == 1, "an all-cached batch signals when it is given")
        prefetcher.startPrefetching(with: [PipelineURLs.b])
        _ = await iterator.next()
        _ = await iterator.next()
        #expect(calls.value == 2, "one signal per batch")
        // Nothing given, nothing to signal.
        prefetcher.startPrefetching(with: [URL]())
        #expect(calls.value == 2)
    }

    // MARK: - Batch API

    @Test func aBatchOfNothingReturnsAtOnce() async {
        let h = PipelineHarness()
        let outcome = await h.pipeline.prefetch([URL](), maxConcurrent: 2)
        #expect(outcome == .init(succeeded: 0, failed: 0, skipped: 0))
        #expect(h.loader.loadCount == 0)
    }

    @Test func aBatchOfCachedImagesSkipsThemAll() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a))
        let outcome = await h.pipeline.prefetch([PipelineURLs.a, PipelineURLs.a])
        #expect(outcome == .init(succeeded: 0, failed: 0, skipped: 2))
        #expect(h.loader.loadCount == 1)
    }

    @Test func aBatchWithDuplicatesDownloadsEachOnceAtMostTheLimitAtOnce() async {
        let h = PipelineHarness()
        let urls = [PipelineURLs.a, PipelineURLs.b, PipelineURLs.a, PipelineURLs.numbered(1), PipelineURLs.b]
        let outcome = await h.pipeline.prefetch(urls, maxConcurrent: 1)
        #expect(outcome == .init(succeeded: 3, failed: 0, skipped: 2))
        #expect(h.loader.loadCount == 3)
        #expect(h.pipeline.metrics.peakNetworkRequestsInFlight == 1)
        #expect(h.loader.requestedURLs == [PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(1)])
    }

    @Test func cancellingTheAwaitingTaskStopsRunningAndPendingPrefetches() async {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let urls = [PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(1)]
        let batch = Task { await h.pipeline.prefetch(urls, maxConcurrent: 1) }
        await h.loader.waitForLoads(1)
        batch.cancel()
        let outcome = await batch.value
        #expect(outcome == .init(succeeded: 0, failed: 0, skipped: 3))
        await h.loader.waitForCancellations(1)
        h.loader.resume()
        await h.waitUntilIdle()
        #expect(h.loader.requestedURLs == [PipelineURLs.a]) // the pending ones never started
    }

    @Test func cancellingABatchKeepsTheDownloadAVisibleRequestShares() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let batch = Task { await h.pipeline.prefetch([PipelineURLs.a]) }
        await h.loader.waitForLoads(1)
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        batch.cancel()
        _ = await batch.value
        h.loader.resume()
        _ = try await visible.response
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
    }

    @Test func aBatchCountsAFailureAndDoesNotRememberIt() async {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 500)
        let first = await h.pipeline.prefetch([PipelineURLs.a])
        #expect(first == .init(succeeded: 0, failed: 1, skipped: 0))
        h.loader.removeFailure(for: PipelineURLs.a)
        let second = await h.pipeline.prefetch([PipelineURLs.a])
        #expect(second == .init(succeeded: 1, failed: 0, skipped: 0))
    }
}

/// Other public API named in DESIGN.md §2, checked by behaviour.
@Suite(.timeLimit(.minutes(1)))
struct PublicAPIContractTests {
    @Test func errorCodesNameWhatHappened() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 404)
        let notFound = await errorThrown { try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a)) }
        #expect((notFound as? ImagePipeline.Error)?.code == .dataLoadingFailed)
        #expect((notFound as? ImagePipeline.Error)?.statusCode == 404)

        h.loader.serve(Data(), for: PipelineURLs.b)
        let empty = await errorThrown { try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.b)) }
        #expect((empty as? ImagePipeline.Error)?.code == .dataIsEmpty)

        let missing = await errorThrown {
            try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.numbered(1), options: .returnCacheDataDontLoad))
        }
        #expect((missing as? ImagePipeline.Error)?.code == .dataMissingInCache)
        #expect(h.loader.loadCount(for: PipelineURLs.numbered(1)) == 0)

        let failing = ImageRequest(url: PipelineURLs.numbered(2), processors: [MockImageProcessor("x", fails: true)])
        let processing = await errorThrown { try await h.pipeline.image(for: failing) }
        #expect((processing as? ImagePipeline.Error)?.code == .processingFailed)
        #expect((processing as? ImagePipeline.Error)?.processorIdentifier == "mock.x.fails")
    }

    @Test func aTooLargeResponseIsDataTooLarge() async throws {
        let h = PipelineHarness { $0.maximumResponseDataSize = 16 }
        let error = await errorThrown { try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a)) }
        #expect((error as? ImagePipeline.Error)?.code == .dataTooLarge)
        #expect((error as? ImagePipeline.Error)?.limit == 16)
    }

    @Test func cancellingTheSwiftTaskAwaitingAnImageCancelsItsWork() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let task = Task { try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a)) }
        await h.loader.waitForLoads(1)
        task.cancel()
        let error = await errorThrown { try await task.value }
        #expect(error != nil)
        #expect(error is CancellationError || (error as? ImagePipeline.Error)?.code == .cancelled)
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
        #expect(h.pipeline.metrics.fetch.cancelled == 1)
    }

    @Test func anInvalidatedPipelineFailsNewRequests() async throws {
        let h = PipelineHarness()
        h.pipeline.invalidate()
        #expect(h.pipeline.isInvalidated)
        let error = await errorThrown { try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a)) }
        #expect((error as? ImagePipeline.Error)?.code == .pipelineInvalidated)
        #expect(h.loader.loadCount == 0)
    }

    @Test func cacheTypeSaysWhereTheImageCameFrom() async throws {
        let h = PipelineHarness()
        let first = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a))
        #expect(first.cacheType == nil)
        let second = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a))
        #expect(second.cacheType == .memory)
        h.pipeline.cache.removeAll()
        #expect(!h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineURLs.a)))
    }
}
