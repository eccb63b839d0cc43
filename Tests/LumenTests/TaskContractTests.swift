import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Contract review of `ImageTask` (DESIGN §2, issue 3, ImageTask docs): priority, cancel,
/// progress, the events stream, `response` / `image` from several awaiters, `State`.
@Suite(.timeLimit(.minutes(1)))
struct TaskContractTests {
    static let url = URL(string: "https://example.com/task-contract.jpg")!

    static func body(_ count: Int) -> Data { Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }) }

    static func collect(_ stream: AsyncStream<ImageTask.Event>) async -> [ImageTask.Event] {
        var events: [ImageTask.Event] = []
        for await event in stream { events.append(event) }
        return events
    }

    static func progressValues(_ events: [ImageTask.Event]) -> [ImageTask.Progress] {
        events.compactMap { if case .progress(let p) = $0 { p } else { nil } }
    }

    static func finishedCount(_ events: [ImageTask.Event]) -> Int {
        events.filter { if case .finished = $0 { true } else { false } }.count
    }

    static func isFinished(_ event: ImageTask.Event?) -> Bool {
        if case .finished? = event { true } else { false }
    }

    // MARK: - Events

    @Test func eventsAreProgressInOrderThenExactlyOneFinishedLast() async throws {
        let harness = PipelineHarness()
        harness.loader.serve(Self.body(100), for: Self.url, splitAt: [25, 50, 75])
        harness.loader.isSuspended = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let stream = task.events
        harness.loader.resume()
        let events = await Self.collect(stream)
        let progress = Self.progressValues(events)
        #expect(progress.map(\.completed) == [25, 50, 75, 100])
        #expect(progress.allSatisfy { $0.total == 100 })
        #expect(Self.finishedCount(events) == 1)
        #expect(Self.isFinished(events.last))
        if case .finished(let result)? = events.last { #expect((try? result.get()) != nil) }
        #expect(task.progress == ImageTask.Progress(completed: 100, total: 100))
        #expect(task.state == .completed)
    }

    @Test func progressTotalIsCompletedWhenLengthUnknownAndZeroBeforeFirstChunk() async throws {
        let harness = PipelineHarness()
        harness.loader.serve(Self.body(60), for: Self.url, declaredLength: -1, splitAt: [20, 40])
        harness.loader.holdsChunks = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        #expect(task.progress == ImageTask.Progress(completed: 0, total: 0))
        #expect(task.progress.fraction == 0)
        let stream = task.events
        harness.loader.releaseChunks(1)
        await harness.loader.waitForChunks(1)
        #expect(task.progress == ImageTask.Progress(completed: 20, total: 20)) // updated when the chunk arrived
        harness.loader.holdsChunks = false
        let events = await Self.collect(stream)
        let progress = Self.progressValues(events)
        #expect(progress.allSatisfy { $0.total == $0.completed })
        #expect(progress.last?.completed == 60)
        #expect(Self.isFinished(events.last))
    }

    @Test func severalStreamsOnOneTaskEachGetEveryEventAndALateStreamTheProgressSoFarThenLaterOnes() async throws {
        let harness = PipelineHarness()
        harness.loader.serve(Self.body(100), for: Self.url, splitAt: [25, 50, 75])
        harness.loader.holdsChunks = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let first = task.events, second = task.events
        harness.loader.releaseChunks(2)
        await harness.loader.waitForChunks(2)
        let late = task.events
        harness.loader.releaseChunks(2)
        async let a = Self.collect(first)
        async let b = Self.collect(second)
        async let c = Self.collect(late)
        let (ea, eb, ec) = await (a, b, c)
        #expect(Self.progressValues(ea).map(\.completed) == [25, 50, 75, 100])
        #expect(Self.progressValues(eb).map(\.completed) == [25, 50, 75, 100])
        // A late stream starts with the progress so far (50), then gets the later steps.
        #expect(Self.progressValues(ec).map(\.completed) == [50, 75, 100])
        for events in [ea, eb, ec] {
            #expect(Self.finishedCount(events) == 1)
            #expect(Self.isFinished(events.last))
        }
        // After the end: only `.finished`.
        let after = await Self.collect(task.events)
        #expect(after.count == 1)
        #expect(Self.isFinished(after.first))
    }

    @Test func anUnreadStreamKeepsAtMost32NewestEventsAndNeverDropsFinished() async throws {
        let harness = PipelineHarness()
        harness.loader.serve(Self.body(400), for: Self.url)
        harness.loader.chunkSize = 4 // 100 progress events
        harness.loader.isSuspended = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let stream = task.events
        harness.loader.resume()
        _ = try await task.response
        let events = await Self.collect(stream)
        // 32 unread at most; `.finished` may be yielded just after the reader started (making
        // room for it), so 33 in all at most.
        #expect(events.count <= 33)
        #expect(events.count >= 2)
        #expect(Self.finishedCount(events) == 1)
        #expect(Self.isFinished(events.last))
        let progress = Self.progressValues(events)
        #expect(progress.last?.completed == 400) // the newest kept
        #expect(progress.map(\.completed) == progress.map(\.completed).sorted())
    }

    @Test func memoryHitTaskStreamYieldsOnlyFinished() async throws {
        let harness = PipelineHarness()
        _ = try await harness.pipeline.image(for: Self.url)
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        #expect(task.state == .completed)
        let events = await Self.collect(task.events)
        #expect(events.count == 1)
        if case .finished(let result)? = events.first { #expect((try? result.get())?.cacheType == .memory) }
    }

    /// `progress` is "bytes received so far": a task that joins after the bytes arrived (the
    /// decode is still queued) reports them, not 0 of 0.
    @Test func aTaskJoiningAfterTheBytesArrivedReportsThem() async throws {
        let decoding = WorkQueue(name: "contract.decode", maxConcurrentCount: 1, execution: .threads)
        decoding.isSuspended = true
        let harness = PipelineHarness { $0.decodingQueue = decoding }
        let first = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        await harness.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        #expect(first.progress == ImageTask.Progress(completed: 64, total: 64))
        let joiner = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        decoding.isSuspended = false
        _ = try await joiner.response
        #expect(harness.pipeline.metrics.decode.joined == 1)
        #expect(joiner.progress == ImageTask.Progress(completed: 64, total: 64))
    }

    @Test func imageForFromACancelledSwiftTaskStartsNothing() async throws {
        let harness = PipelineHarness()
        let gate = AsyncStream.makeStream(of: Void.self)
        let load = Task {
            for await _ in gate.stream {}
            return try await harness.pipeline.image(for: Self.url)
        }
        load.cancel()
        gate.continuation.finish()
        let error = await errorThrown { try await load.value }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        #expect(harness.loader.loadCount == 0)
        #expect(harness.pipeline.metrics.fetch.started == 0)
    }

    // MARK: - response / image from several awaiters

    @Test func responseAndImageAwaitedFromManyTasksAtOnce() async throws {
        let harness = PipelineHarness()
        harness.loader.isSuspended = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        await harness.loader.waitForLoads(1)
        let results = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<20 {
                group.addTask {
                    if i % 2 == 0 { return (try? await task.response) != nil }
                    return (try? await task.image) != nil
                }
            }
            group.addTask {
                harness.loader.resume()
                return true
            }
            var all: [Bool] = []
            for await ok in group { all.append(ok) }
            return all
        }
        #expect(results.count == 21)
        #expect(results.allSatisfy { $0 })
        #expect(harness.loader.loadCount == 1)
        #expect(harness.pipeline.metrics.decodes == 1)
    }

    @Test func cancellingTheSwiftTaskAwaitingResponseCancelsTheImageTask() async throws {
        let harness = PipelineHarness()
        harness.loader.isSuspended = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        await harness.loader.waitForLoads(1)
        let awaiting = Task { try await task.response }
        awaiting.cancel()
        let error = await errorThrown { try await awaiting.value }
        #expect(ImagePipeline.Error.Code.of(error ?? CancellationError()) == .cancelled)
        #expect(task.state == .cancelled)
        await harness.loader.waitForCancellations(1)
    }

    // MARK: - cancel() and State

    @Test func cancelEndsAtOnceWithCancelledAndIsANoOpAfterCompletion() async throws {
        let harness = PipelineHarness()
        harness.loader.isSuspended = true
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let stream = task.events
        #expect(task.state == .running)
        task.cancel()
        #expect(task.state == .cancelled)
        let error = await errorThrown { try await task.response }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        let events = await Self.collect(stream)
        #expect(events.count == 1)
        if case .finished(.failure(let e))? = events.last { #expect(e.code == .cancelled) } else { Issue.record("no cancelled finish") }
        task.cancel() // twice: nothing
        #expect(task.state == .cancelled)

        harness.loader.resume()
        let done = harness.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.b))
        _ = try await done.response
        done.cancel()
        #expect(done.state == .completed)
        #expect((try? await done.response) != nil)

        // A failure is `.completed`, not `.cancelled`.
        harness.loader.fail(PipelineURLs.numbered(9), statusCode: 500)
        let failed = harness.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(9)))
        _ = await errorThrown { try await failed.response }
        #expect(failed.state == .completed)
        await harness.waitUntilIdle()
    }

    // MARK: - Priority

    @Test func prioritySetWhileRunningReachesTheSharedDownloadAndFallsBack() async throws {
        let downloads = WorkQueue(name: "contract.downloads", maxConcurrentCount: 2, execution: .tasks)
        downloads.isSuspended = true
        let harness = PipelineHarness { $0.dataLoadingQueue = downloads }
        let low = harness.pipeline.imageTask(with: ImageRequest(url: Self.url, priority: .low))
        let other = harness.pipeline.imageTask(with: ImageRequest(url: Self.url, priority: .normal))
        #expect(downloads.pendingPriorities == [.normal])
        low.priority = .veryHigh
        #expect(low.priority == .veryHigh)
        #expect(downloads.pendingPriorities == [.veryHigh])
        low.priority = .veryLow
        #expect(downloads.pendingPriorities == [.normal])
        other.cancel()
        #expect(downloads.pendingPriorities == [.veryLow])
        other.priority = .veryHigh // a cancelled task's priority no longer counts
        #expect(downloads.pendingPriorities == [.veryLow])
        downloads.isSuspended = false
        _ = try await low.response
        low.priority = .high // after completion: harmless
        await harness.waitUntilIdle()
    }

    @Test func prioritySetWhileProcessingIsQueuedReachesTheProcessingQueue() async throws {
        let processing = WorkQueue(name: "contract.process", maxConcurrentCount: 1, execution: .threads)
        processing.isSuspended = true
        let harness = PipelineHarness { $0.processingQueue = processing }
        let task = harness.pipeline.imageTask(with: ImageRequest(url: Self.url, processors: [MockImageProcessor("p")], priority: .low))
        await harness.pipeline.waitForMetrics { $0.decode.completed == 1 }
        #expect(processing.pendingPriorities == [.low])
        task.priority = .high
        #expect(processing.pendingPriorities == [.high])
        processing.isSuspended = false
        _ = try await task.response
    }

    // MARK: - invalidate(), shared, metrics

    @Test func invalidateCancelsRunningAndFailsLaterRequests() async throws {
        let harness = PipelineHarness()
        _ = try await harness.pipeline.image(for: PipelineURLs.b) // in memory now
        harness.loader.isSuspended = true
        let running = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let runningData = harness.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.numbered(3)))
        await harness.loader.waitForLoads(3)
        harness.pipeline.invalidate()
        #expect(harness.pipeline.isInvalidated)
        #expect(running.state == .cancelled)
        #expect(runningData.state == .cancelled)
        let later = await errorThrown { try await harness.pipeline.image(for: PipelineURLs.numbered(4)) }
        #expect(ImagePipeline.Error.Code.of(later!) == .pipelineInvalidated)
        let laterTask = harness.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(5)))
        let laterTaskError = await errorThrown { try await laterTask.response }
        #expect(ImagePipeline.Error.Code.of(laterTaskError!) == .pipelineInvalidated)
        let laterData = await errorThrown { try await harness.pipeline.data(for: ImageRequest(url: PipelineURLs.numbered(6))) }
        #expect(ImagePipeline.Error.Code.of(laterData!) == .pipelineInvalidated)
        let cached = await errorThrown { try await harness.pipeline.image(for: PipelineURLs.b) }
        #expect(ImagePipeline.Error.Code.of(cached ?? CancellationError()) == .pipelineInvalidated)
        harness.loader.resume()
        await harness.loader.waitForCancellations(2)
        await harness.waitUntilIdle()
        #expect(harness.loader.loadCount == 3)
    }

    @Test func sharedIsOneDefaultPipeline() {
        let shared = ImagePipeline.shared
        #expect(shared === ImagePipeline.shared)
        #expect(shared.configuration.isTaskCoalescingEnabled)
        #expect(!shared.configuration.isProgressiveDecodingEnabled)
        #expect(shared.configuration.retryPolicy.maximumAttempts == 1)
        #expect(shared.configuration.logger == nil)
        #expect(shared.configuration.eventHandler == nil)
        #expect(shared.configuration.dataLoadingQueue.maxConcurrentCount == 6)
        #expect(shared.configuration.encodingQueue.maxConcurrentCount == 1)
        #expect(!shared.isInvalidated)
    }

    @Test func metricsSnapshotHasTheNamesDesignLists() async throws {
        let harness = PipelineHarness()
        harness.loader.isSuspended = true
        let tasks = (0..<3).map { _ in harness.pipeline.imageTask(with: ImageRequest(url: Self.url, processors: [MockImageProcessor("m")])) }
        await harness.loader.waitForLoads(1)
        harness.loader.resume()
        for task in tasks { _ = try await task.response }
        let m = harness.pipeline.metrics
        let stages: [ImagePipeline.Metrics.StageMetrics] = ImagePipeline.Stage.allCases.map { m[$0] }
        #expect(stages.count == 3)
        #expect(m.fetch.started == 1 && m.decode.started == 1 && m.process.started == 1)
        #expect(m.process.joined == 2)
        #expect(m.fetch.completed == 1 && m.fetch.failed == 0 && m.fetch.cancelled == 0)
        #expect(m.networkRequestsStarted == 1)
        #expect(m.peakNetworkRequestsInFlight == 1)
        #expect(m.decodes == 1)
        #expect(m.processorApplications == 1)
        #expect(m.bytesDownloaded == 64)
    }
}
