import Foundation
import Observation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenUI
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Adversarial checks of the public API's contracts (issue 3: the work graph; issue 5:
/// prefetching and the UI loading model) in cases the other suites do not cover.
@Suite(.timeLimit(.minutes(1)))
struct ContractEdgeCaseTests {
    /// A pipeline using the real `DataLoader` against a loopback server and the trivial decoder.
    struct ServerHarness {
        let server: LoopbackServer
        let decoder: TrivialImageDecoder
        let pipeline: ImagePipeline

        init(configure: (inout ImagePipeline.Configuration) -> Void = { _ in }) throws {
            server = try LoopbackServer()
            decoder = TrivialImageDecoder()
            var configuration = ImagePipeline.Configuration()
            configuration.decoder = decoder
            configuration.decodingQueue = WorkQueue(name: "audit.decode", maxConcurrentCount: 2, execution: .threads)
            configuration.processingQueue = WorkQueue(name: "audit.process", maxConcurrentCount: 2, execution: .threads)
            configure(&configuration)
            pipeline = ImagePipeline(configuration: configuration)
        }

        func serve(_ path: String, bytes: Int = 256) -> URL {
            server.serve(path: path, data: Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }))
            return server.url(for: path)
        }

        func waitUntilIdle() async {
            await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
        }
    }

    // MARK: - Prefetcher: priority

    @Test func changingThePriorityReachesQueuedDiskPrefetches() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache, maxConcurrentRequestCount: 3)
        prefetcher.startPrefetching(with: (0..<5).map(PipelineURLs.numbered))
        #expect(queue.pendingPriorities == [.low, .low, .low])
        prefetcher.priority = .veryHigh
        #expect(queue.pendingPriorities == [.veryHigh, .veryHigh, .veryHigh])
        prefetcher.stopPrefetching(with: [PipelineURLs.numbered(0)])
        #expect(queue.pendingPriorities == [.veryHigh, .veryHigh, .veryHigh])
        queue.isSuspended = false
        await prefetcher.waitUntilIdle()
        #expect(h.decoder.decodeCount == 0)
        #expect(prefetcher.outcomes.succeeded == 4)
    }

    /// A visible request joins a running prefetch at high; lowering the prefetcher's priority
    /// must not lower the shared work below the visible request.
    @Test func loweringThePrefetcherPriorityNeverLowersAVisibleRequestsWork() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .high))
        #expect(queue.pendingPriorities == [.high])
        prefetcher.priority = .veryLow
        #expect(queue.pendingPriorities == [.high])
        prefetcher.priority = .veryHigh
        #expect(queue.pendingPriorities == [.veryHigh])
        visible.priority = .veryLow
        #expect(queue.pendingPriorities == [.veryHigh])
        prefetcher.stopPrefetching()
        #expect(queue.pendingPriorities == [.veryLow])
        queue.isSuspended = false
        _ = try await visible.response
        #expect(h.loader.loadCount == 1)
    }

    // MARK: - Prefetcher: sharing with visible requests over HTTP

    @Test func stoppingAPrefetchNeverKillsADownloadAVisibleRequestShares() async throws {
        let h = try ServerHarness()
        let url = h.serve("/shared.jpg", bytes: 512 * 1024)
        h.server.holdBody("/shared.jpg", after: 1024)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [url])
        try await h.server.waitForRequests(path: "/shared.jpg", count: 1)
        let visible = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(32)))
        await h.pipeline.waitForMetrics { $0.fetch.joined == 1 }
        try await h.server.waitUntil { $0.pausedBodies == 1 }
        prefetcher.stopPrefetching(with: [url])
        #expect(prefetcher.isIdle)
        h.server.release("/shared.jpg")
        let response = try await visible.response
        #expect(response.image.width == 32)
        #expect(h.server.requestCount(for: "/shared.jpg") == 1)
        #expect(h.server.statistics.clientDisconnects == 0)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
        prefetcher.stopPrefetching()
    }

    @Test func maxConcurrentRequestCountIsHonouredAtTheServer() async throws {
        let h = try ServerHarness()
        let paths = (0..<7).map { "/p\($0).jpg" }
        let urls = paths.map { h.serve($0) }
        for path in paths { h.server.hold(path) }
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 3)
        prefetcher.startPrefetching(with: urls)
        try await h.server.waitUntil { $0.heldRequests == 3 }
        #expect(h.pipeline.metrics.liveRequests == 3)
        // Release one at a time: each finished prefetch lets exactly one more in.
        for path in paths.prefix(4) {
            h.server.release(path)
            let released = paths.firstIndex(of: path)! + 1
            let expected = min(3, paths.count - released)
            try await h.server.waitUntil { $0.requests(for: path) == 1 && $0.totalRequests == min(paths.count, released + 3) }
            try await h.server.waitUntil { $0.heldRequests == expected }
        }
        h.server.releaseAll()
        await prefetcher.waitUntilIdle()
        #expect(h.server.statistics.peakInFlightRequests == 3)
        #expect(h.server.statistics.totalRequests == 7)
        #expect(prefetcher.outcomes.succeeded == 7)
    }

    // MARK: - Prefetcher: pause, stop, restart, completion

    @Test func stoppingARunningPrefetchWhilePausedStartsNothing() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        let calls = CallCounter()
        prefetcher.didComplete = { calls.increment() }
        prefetcher.startPrefetching(with: [0, 1, 2].map(PipelineURLs.numbered))
        await h.loader.waitForLoads(1)
        prefetcher.isPaused = true
        prefetcher.stopPrefetching(with: [PipelineURLs.numbered(0)]) // frees the slot while paused
        await h.loader.waitForCancellations(1)
        #expect(h.pipeline.metrics.liveRequests == 0)
        #expect(!prefetcher.isIdle)
        #expect(calls.value == 0)
        h.loader.resume()
        prefetcher.isPaused = false
        await prefetcher.waitUntilIdle()
        #expect(h.loader.requestedURLs == [0, 1, 2].map(PipelineURLs.numbered))
        #expect(prefetcher.outcomes.succeeded == 2)
        await h.waitUntilIdle()
        #expect(calls.value == 1)
    }

    @Test func aStoppedPrefetchStartedAgainRunsAndCountsOnce() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await h.loader.waitForLoads(1)
        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        prefetcher.startPrefetching(with: [PipelineURLs.a]) // again, while the first one is ending
        #expect(!prefetcher.isIdle)
        await h.loader.waitForLoads(2)
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 1)
        #expect(prefetcher.outcomes.failed == 0)
        #expect(h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineURLs.a)))
    }

    @Test func stoppingThePendingOnesWhilePausedSignalsCompletionOnce() async throws {
        let h = PipelineHarness()
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        let calls = CallCounter()
        prefetcher.didComplete = { calls.increment() }
        prefetcher.isPaused = true
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        #expect(h.pipeline.metrics.liveRequests == 0)
        prefetcher.stopPrefetching(with: [PipelineURLs.a])
        #expect(calls.value == 0)
        prefetcher.stopPrefetching(with: [PipelineURLs.b])
        #expect(calls.value == 1)
        #expect(prefetcher.isIdle)
        prefetcher.stopPrefetching()
        prefetcher.isPaused = false
        #expect(calls.value == 1)
        #expect(h.loader.loadCount == 0)
    }

    @Test func alreadyCachedAtItsSizeOrAlreadyPrefetchingIsSkipped() async throws {
        let h = PipelineHarness()
        let small = ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(16))
        _ = try await h.pipeline.image(for: small)
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        // Cached at its size (another priority and user info make no difference).
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, priority: .high, thumbnail: .maxPixelSize(16))])
        #expect(prefetcher.isIdle)
        // Prefetching already: the same request at another priority is the same prefetch.
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.b)])
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.b, priority: .veryHigh)])
        #expect(h.pipeline.metrics.liveRequests == 1)
        await h.loader.waitForLoads(2)
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 2)
        #expect(prefetcher.outcomes.succeeded == 1)
    }

    @Test func theDiskDestinationNeverDecodesEvenWithADiskCache() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-audit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let h = PipelineHarness { $0.dataCache = DataCache(name: "audit", directory: directory) }
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache, maxConcurrentRequestCount: 4)
        let urls = (0..<6).map(PipelineURLs.numbered)
        prefetcher.startPrefetching(with: urls + [PipelineURLs.numbered(0)])
        await prefetcher.waitUntilIdle()
        await h.waitUntilIdle()
        #expect(h.decoder.decodeCount == 0)
        #expect(h.pipeline.metrics.decodes == 0)
        #expect(h.loader.loadCount == 6)
        #expect(urls.allSatisfy { h.pipeline.cache.containsData(for: ImageRequest(url: $0)) })
        // Now on disk: prefetching again starts nothing.
        prefetcher.startPrefetching(with: urls)
        #expect(prefetcher.isIdle)
    }

    @Test(arguments: [DataCachePolicy.storeOriginalData, .storeEncodedImages, .storeAll])
    func aVisibleLoadAfterADiskPrefetchReadsTheDisk(policy: DataCachePolicy) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-audit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let h = PipelineHarness {
            $0.dataCache = DataCache(name: "audit", directory: directory)
            $0.dataCachePolicy = policy
        }
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 1)
        #expect(h.decoder.decodeCount == 0)
        let response = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(8)))
        #expect(response.image.width == 8)
        #expect(h.loader.loadCount == 1)
        #expect(response.cacheType == .disk)
    }

    /// With a disk cache the fetch first waits for a disk read on the decoding queue: a visible
    /// request joining a disk prefetch there raises it at once, and leaving lowers it again.
    @Test func aVisibleRequestRaisesADiskPrefetchWaitingForItsDiskRead() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-audit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let h = PipelineHarness { $0.dataCache = DataCache(name: "audit", directory: directory) }
        let decoding = h.pipeline.configuration.decodingQueue
        decoding.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(decoding.pendingPriorities == [.low])
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .veryHigh))
        #expect(decoding.pendingPriorities == [.veryHigh])
        visible.cancel()
        #expect(decoding.pendingPriorities == [.low])
        prefetcher.priority = .high
        #expect(decoding.pendingPriorities == [.high])
        decoding.isSuspended = false
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 0)
    }

    @Test func releasingThePrefetcherKeepsAVisibleRequestsDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        var visible: ImageTask?
        do {
            let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
            prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
            await h.loader.waitForLoads(2)
            visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        }
        await h.loader.waitForCancellations(1) // b: nobody else needed it
        h.loader.resume()
        _ = try await visible!.response
        #expect(h.loader.loadCount == 2)
        #expect(h.loader.cancelledCount == 1)
    }

    // MARK: - Batch prefetch

    @Test func theBatchHonoursItsLimitAndReturnsOnlyWhenAllAreDone() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let urls = (0..<5).map(PipelineURLs.numbered)
        let finished = Atomic<Bool>(false)
        let batch = Task {
            let outcome = await h.pipeline.prefetch(urls, maxConcurrent: 3)
            finished.store(true, ordering: .sequentiallyConsistent)
            return outcome
        }
        await h.loader.waitForLoads(3)
        // The counters are published as the critical section that made the third request ends,
        // which may be just after its load started.
        await h.pipeline.waitForMetrics { $0.liveRequests == 3 }
        #expect(h.loader.loadCount == 3)
        let finishedEarly = finished.load(ordering: .sequentiallyConsistent)
        #expect(!finishedEarly)
        h.loader.resume()
        let outcome = await batch.value
        #expect(outcome == .init(succeeded: 5, failed: 0, skipped: 0))
        #expect(urls.allSatisfy { h.pipeline.cache.containsCachedImage(for: ImageRequest(url: $0)) })
        #expect(h.pipeline.metrics.peakNetworkRequestsInFlight == 3)
    }

    @Test func cancellingTheBatchKeepsAVisibleRequestsDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let batch = Task { await h.pipeline.prefetch([PipelineURLs.a, PipelineURLs.b, PipelineURLs.numbered(1)], maxConcurrent: 2) }
        await h.loader.waitForLoads(2)
        let visible = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        await h.pipeline.waitForMetrics { $0.decode.joined == 1 }
        batch.cancel()
        let outcome = await batch.value
        #expect(outcome.succeeded == 0)
        await h.loader.waitForCancellations(1) // b's download: nobody else needs it
        h.loader.resume()
        _ = try await visible.response
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 2) // the third never started
        #expect(h.loader.cancelledCount == 1)
    }

    // MARK: - Work graph: priorities

    /// Three subscribers (low, high, normal) of one queued download; they leave in every
    /// order: the queued item always has the highest remaining priority, and the last one
    /// leaving removes it.
    @Test(arguments: [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]])
    func theQueuedDownloadFollowsTheHighestLiveSubscriber(order: [Int]) async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let priorities: [ImageRequest.Priority] = [.low, .high, .normal]
        let tasks = priorities.map { h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: $0)) }
        #expect(queue.pendingPriorities == [.high])
        var live = Set(0..<3)
        for index in order {
            tasks[index].cancel()
            live.remove(index)
            if let top = live.map({ priorities[$0] }).max() {
                #expect(queue.pendingPriorities == [top], "after cancelling \(index) of order \(order)")
            } else {
                #expect(queue.pendingCount == 0)
            }
        }
        queue.isSuspended = false
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 0)
    }

    @Test func loweringTheTopSubscribersPriorityFallsBackToTheNextOne() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let low = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .low))
        let high = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .high, thumbnail: .maxPixelSize(8)))
        #expect(queue.pendingPriorities == [.high])
        high.priority = .veryLow
        #expect(queue.pendingPriorities == [.low])
        low.priority = .veryHigh
        #expect(queue.pendingPriorities == [.veryHigh])
        low.cancel()
        #expect(queue.pendingPriorities == [.veryLow])
        queue.isSuspended = false
        #expect(try await high.response.image.width == 8)
    }

    /// `[a]` at low and `[a, b]` at high share `a`; the shared download runs at high until
    /// `[a, b]` leaves.
    @Test func aProcessorChainsPriorityReachesTheSharedDownloadAndFallsBack() async throws {
        let h = PipelineHarness()
        let applications = ProcessorApplications()
        let a = MockImageProcessor("a", applications: applications)
        let b = MockImageProcessor("b", applications: applications)
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let first = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [a], priority: .low))
        let second = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [a, b], priority: .high))
        #expect(queue.pendingPriorities == [.high])
        second.cancel()
        #expect(queue.pendingPriorities == [.low])
        let third = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [a, b], priority: .veryHigh))
        #expect(queue.pendingPriorities == [.veryHigh])
        first.cancel() // [a] leaves: [a, b] still needs a
        #expect(queue.pendingPriorities == [.veryHigh])
        queue.isSuspended = false
        let response = try await third.response
        #expect(response.image.width == 64 + 2)
        #expect(applications["mock.a"] == 1 && applications["mock.b"] == 1)
        #expect(h.loader.loadCount == 1)
    }

    /// Raising a task's priority while its decode waits in a suspended decoding queue.
    @Test func raisingAJoinedSubscriberReachesTheQueuedDecode() async throws {
        let h = PipelineHarness()
        let decoding = h.pipeline.configuration.decodingQueue
        decoding.isSuspended = true
        let first = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .low))
        let second = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .veryLow))
        await h.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        #expect(decoding.pendingPriorities == [.low])
        second.priority = .veryHigh
        #expect(decoding.pendingPriorities == [.veryHigh])
        second.cancel()
        #expect(decoding.pendingPriorities == [.low])
        decoding.isSuspended = false
        _ = try await first.response
    }

    // MARK: - Work graph: cancellation under sharing

    @Test(arguments: [0, 1, 2])
    func cancellingOneOfThreeSubscribersMidDownloadKeepsTheDownload(cancelled: Int) async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let sizes: [DecodeSize?] = [nil, .maxPixelSize(8), nil]
        let tasks = sizes.map { h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, thumbnail: $0)) }
        await h.loader.waitForLoads(1)
        tasks[cancelled].cancel()
        h.loader.resume()
        for (index, task) in tasks.enumerated() {
            if index == cancelled {
                let error = await errorThrown { try await task.response }
                #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
            } else {
                _ = try await task.response
            }
        }
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
    }

    /// The last subscriber leaving a download paused mid-body: the client closes the
    /// connection (the server, still paused, sees it go) and the body is never sent.
    @Test(arguments: 0..<6)
    func theLastSubscriberLeavingDisconnectsFromTheServer(round: Int) async throws {
        let h = try ServerHarness()
        let size = 8 << 20
        let url = h.serve("/big.jpg", bytes: size)
        h.server.holdBody("/big.jpg", after: 4096)
        let one = h.pipeline.imageTask(with: ImageRequest(url: url))
        let two = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(16)))
        try await h.server.waitUntil { $0.pausedBodies == 1 }
        if round % 2 == 0 { await h.pipeline.waitForMetrics { $0.bytesDownloaded == 4096 } }
        (round % 3 == 0 ? two : one).cancel()
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
        #expect(h.server.statistics.clientDisconnects == 0)
        (round % 3 == 0 ? one : two).cancel()
        try await h.server.waitUntil { $0.clientDisconnects == 1 }
        h.server.release("/big.jpg")
        #expect(h.server.statistics.bodyBytesSent == 4096)
        await h.waitUntilIdle()
        #expect(h.pipeline.metrics.fetch.cancelled == 1)
    }

    @Test func aFailureIsNotCachedAndARetryDownloadsAgain() async throws {
        let h = try ServerHarness()
        let url = h.serve("/flaky.jpg")
        h.server.respond(path: "/flaky.jpg", status: 503)
        h.server.hold("/flaky.jpg")
        let one = h.pipeline.imageTask(with: ImageRequest(url: url))
        let two = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(8)))
        try await h.server.waitUntil { $0.heldRequests == 1 }
        h.server.release("/flaky.jpg")
        let e1 = await errorThrown { try await one.response }
        let e2 = await errorThrown { try await two.response }
        #expect(e1 != nil && e2 != nil)
        #expect(h.server.requestCount(for: "/flaky.jpg") == 1)
        // Immediately again: fails again with a fresh request.
        #expect(await errorThrown { try await h.pipeline.image(for: url) } != nil)
        #expect(h.server.requestCount(for: "/flaky.jpg") == 2)
        h.server.respond(path: "/flaky.jpg", status: nil)
        let image = try await h.pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(8))).image
        #expect(image.width == 8)
        #expect(h.server.requestCount(for: "/flaky.jpg") == 3)
        #expect(h.pipeline.metrics.fetch.failed == 2)
    }

    @Test func prefetchesInAnInvalidatedPipelineFailAndTheQueueDrains() async throws {
        let h = PipelineHarness()
        h.pipeline.invalidate()
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, maxConcurrentRequestCount: 1)
        prefetcher.startPrefetching(with: (0..<4).map(PipelineURLs.numbered))
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.failed == 4)
        #expect(h.loader.loadCount == 0)
        let outcome = await h.pipeline.prefetch([PipelineURLs.a, PipelineURLs.b], maxConcurrent: 1)
        #expect(outcome == .init(succeeded: 0, failed: 2, skipped: 0))
    }

    @Test func twoSizesOfOneURLShareOneHTTPDownload() async throws {
        let h = try ServerHarness()
        let url = h.serve("/two.jpg")
        h.server.hold("/two.jpg")
        let small = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(16)))
        let large = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(64)))
        try await h.server.waitUntil { $0.heldRequests == 1 }
        h.server.release("/two.jpg")
        #expect(try await small.response.image.width == 16)
        #expect(try await large.response.image.width == 64)
        #expect(h.server.requestCount(for: "/two.jpg") == 1)
        #expect(h.decoder.decodeCount == 2)
    }
}

// MARK: - FetchImage

@MainActor
@Suite(.timeLimit(.minutes(1)))
struct FetchImageEdgeCaseTests {
    @Test func hidingAndShowingAgainMidDownloadRejoinsTheSharedDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let other = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 50, height: 50)
        await h.loader.waitForLoads(1)
        model.onDisappear()
        #expect(!model.isLoading)
        model.onAppear()
        #expect(model.isLoading)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        _ = try await other.response
        #expect(model.phase.image?.width == 64)
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
    }

    @Test func sizeChangesDuringTheDownloadNeverCancelItAndDecodeOnce() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        model.displaySize(width: 10, height: 10)
        model.displaySize(width: 300, height: 10)
        model.displaySize(width: 100, height: 90, scale: 2) // 200 px → 256
        #expect(model.isLoading)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        #expect(model.phase.image?.width == 256)
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
    }

    /// A size change after success whose decode is still running, then another: the bytes
    /// are held, nothing downloads again, the last size wins.
    @Test func aSizeChangeDuringAReDecodeEndsAtTheLastSizeWithoutDownloading() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 60, height: 60)
        await waitUntil(model) { $0.phase.image != nil }
        let decoding = h.pipeline.configuration.decodingQueue
        decoding.isSuspended = true
        model.displaySize(width: 500, height: 10) // 512
        #expect(model.isLoading)
        model.displaySize(width: 130, height: 10) // 192
        decoding.isSuspended = false
        await waitUntil(model) { $0.phase.image?.width == 192 && !$0.isLoading }
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
    }

    @Test(arguments: [
        (63.0, 1.0, 64), (64.0, 1.0, 64), (64.01, 1.0, 128), (21.3333333, 3.0, 64), (100.0, 1.5, 192), (199.0, 1.0, 256), (201.0, 1.0, 256),
    ])
    func displaySizesAreBucketedTo64Pixels(points: Double, scale: Double, expected: Int) async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: points, height: 1, scale: scale)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == expected)
        #expect(model.response?.request.thumbnail == .maxPixelSize(expected))
    }

    /// One model hides while the decode it shares with another is queued: the decode goes on.
    @Test func hidingDuringASharedDecodeKeepsItForTheOtherModel() async throws {
        let h = PipelineHarness()
        let decoding = h.pipeline.configuration.decodingQueue
        decoding.isSuspended = true
        let one = FetchImage(pipeline: h.pipeline), two = FetchImage(pipeline: h.pipeline)
        // The download is held until both models joined it (else the first could finish before
        // the second asks, which then downloads again).
        h.loader.isSuspended = true
        for model in [one, two] {
            model.load(ImageRequest(url: PipelineURLs.a))
            model.displaySize(width: 100, height: 100)
        }
        await h.loader.waitForLoads(1)
        h.loader.resume()
        await h.recorder.wait { $0.subscriptions(.decode) == 2 }
        one.onDisappear()
        decoding.isSuspended = false
        await waitUntil(two) { $0.phase.image != nil }
        #expect(two.phase.image?.width == 128)
        #expect(one.phase.image == nil)
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.pipeline.metrics.decode.cancelled == 0)
        #expect(h.loader.loadCount == 1)
        one.onAppear()
        await waitUntil(one) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 1)
    }

    /// Hidden while the bytes arrive, the size set while hidden: showing it again decodes
    /// without another download when another request kept the download alive.
    @Test func bytesThatArriveWhileHiddenAreNotRefetchedWhenSomeoneElseHadThem() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        let keeper = h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.a))
        model.onDisappear()
        h.loader.resume()
        _ = try await keeper.response
        model.displaySize(width: 40, height: 40)
        #expect(model.phase.image == nil)
        model.onAppear()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 64)
        // The bytes were not in the model and the pipeline has no disk cache: a second
        // download is the documented cost; it must at least be one, not more.
        #expect(h.loader.loadCount <= 2)
    }

    @Test func releasingTheModelCancelsADownloadNobodyElseNeeds() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        do {
            let model = FetchImage(pipeline: h.pipeline)
            model.load(ImageRequest(url: PipelineURLs.a))
            model.displaySize(width: 10, height: 10)
            await h.loader.waitForLoads(1)
        }
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
        #expect(h.pipeline.metrics.fetch.cancelled == 1)
    }
}
