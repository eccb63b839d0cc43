import Foundation
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

@Suite(.timeLimit(.minutes(1)))
struct PipelinePriorityTests {
    @Test func aJoiningSubscriberRaisesTheQueuedDownloadAndLeavingLowersIt() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let low = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .low))
        #expect(queue.pendingPriorities == [.low])
        let high = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("p")], priority: .high))
        #expect(queue.pendingPriorities == [.high])
        high.cancel()
        #expect(queue.pendingPriorities == [.low])
        queue.isSuspended = false
        _ = try await low.response
        #expect(h.loader.loadCount == 1)
    }

    @Test func theQueuedPriorityIsTheMaximumOverSubscribers() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let a = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .normal))
        let b = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .veryHigh))
        let c = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .high))
        #expect(queue.pendingPriorities == [.veryHigh])
        b.priority = .veryLow
        #expect(queue.pendingPriorities == [.high])
        c.cancel()
        #expect(queue.pendingPriorities == [.normal])
        a.priority = .veryHigh
        #expect(queue.pendingPriorities == [.veryHigh])
        a.cancel()
        #expect(queue.pendingPriorities == [.veryLow])
        queue.isSuspended = false
        _ = try await b.response
    }

    @Test func raisingTaskPriorityReachesQueuedDecodeAndProcessing() async throws {
        let h = PipelineHarness()
        let decoding = h.pipeline.configuration.decodingQueue
        let processing = h.pipeline.configuration.processingQueue
        decoding.isSuspended = true
        processing.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("p")], priority: .low))
        await h.recorder.wait { $0.completed(.fetch) == 1 }
        #expect(decoding.pendingPriorities == [.low])
        task.priority = .veryHigh
        #expect(decoding.pendingPriorities == [.veryHigh])
        decoding.isSuspended = false
        await h.recorder.wait { $0.completed(.decode) == 1 }
        #expect(processing.pendingPriorities == [.veryHigh])
        task.priority = .veryLow
        #expect(processing.pendingPriorities == [.veryLow])
        processing.isSuspended = false
        _ = try await task.response
    }

    @Test func queuedDownloadsStartInPriorityOrder() async throws {
        let h = PipelineHarness { $0.dataLoadingQueue = WorkQueue(name: "test.data", maxConcurrentCount: 1, execution: .tasks) }
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let priorities: [ImageRequest.Priority] = [.low, .high, .normal, .high, .veryLow]
        let tasks = priorities.enumerated().map { i, p in
            h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(i), priority: p))
        }
        #expect(queue.pendingPriorities == [.high, .high, .normal, .low, .veryLow])
        queue.isSuspended = false
        for task in tasks { _ = try await task.response }
        #expect(h.loader.requestedURLs == [1, 3, 2, 0, 4].map(PipelineURLs.numbered))
    }
}

