import Foundation
import Testing
import Lumen
import LumenTestSupport

/// Nothing outlives its usefulness: after every kind of ending, the graph holds no tasks and
/// the image tasks themselves are released.
@Suite(.timeLimit(.minutes(1)))
struct PipelineLifetimeTests {
    enum Ending: String, CaseIterable, Sendable {
        case success, failure, cancellation, invalidation
    }

    @Test(arguments: Ending.allCases)
    func noLiveTasksRemain(after ending: Ending) async throws {
        let h = PipelineHarness()
        if ending == .failure { h.loader.fail(PipelineURLs.a, statusCode: 404) }
        h.loader.isSuspended = true
        weak var weakFirst: ImageTask?
        weak var weakSecond: ImageTask?
        do {
            let processors = [MockImageProcessor("a"), MockImageProcessor("b")]
            let first = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: processors))
            let second = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [processors[0]], thumbnail: .maxPixelSize(8)))
            weakFirst = first
            weakSecond = second
            let events = first.events
            await h.loader.waitForLoads(1)
            #expect(h.pipeline.metrics.liveTasks == 6) // fetch; 2 decodes; [a], [a, b], [a]@8
            #expect(h.pipeline.metrics.liveRequests == 2)
            switch ending {
            case .success, .failure: h.loader.resume()
            case .cancellation:
                first.cancel()
                second.cancel()
            case .invalidation: h.pipeline.invalidate()
            }
            let first1 = await errorThrown { try await first.response }
            let second1 = await errorThrown { try await second.response }
            for await _ in events {}
            switch ending {
            case .success: #expect(first1 == nil && second1 == nil)
            case .failure: #expect(ImagePipeline.Error.Code.of(first1!) == .dataLoadingFailed)
            case .cancellation, .invalidation: #expect(ImagePipeline.Error.Code.of(second1!) == .cancelled)
            }
        }
        await h.waitUntilIdle()
        #expect(weakFirst == nil)
        #expect(weakSecond == nil)
        let metrics = h.pipeline.metrics
        #expect(metrics.liveTasks == 0 && metrics.liveRequests == 0)
        #expect(metrics.networkRequestsInFlight == 0)
    }

    @Test func tasksAreReleasedWithCoalescingOff() async throws {
        let h = PipelineHarness(coalescing: false)
        weak var weakTask: ImageTask?
        do {
            let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("a")]))
            weakTask = task
            _ = try await task.response
        }
        await h.waitUntilIdle()
        #expect(weakTask == nil)
    }

    @Test func manyRequestsLeaveNothingBehind() async throws {
        let h = PipelineHarness()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                group.addTask {
                    let request = ImageRequest(url: PipelineURLs.numbered(i % 10), processors: i % 3 == 0 ? [MockImageProcessor("p")] : [])
                    if i % 7 == 0 {
                        let task = h.pipeline.imageTask(with: request)
                        task.cancel()
                    } else {
                        _ = try await h.pipeline.image(for: request)
                    }
                }
            }
            try await group.waitForAll()
        }
        await h.waitUntilIdle()
        let metrics = h.pipeline.metrics
        #expect(metrics.liveTasks == 0)
        #expect(metrics.networkRequestsInFlight == 0)
        #expect(metrics.peakNetworkRequestsInFlight <= 6)
    }

    @Test func concurrentCancellationAndPriorityChangesLeaveNothingBehind() async throws {
        let h = PipelineHarness { $0.dataLoadingQueue = WorkQueue(name: "test.data", maxConcurrentCount: 3, execution: .tasks) }
        h.loader.chunkSize = 8
        h.loader.isSuspended = true // nothing finishes before the actions; some loads are held
        var generator = SystemRandomNumberGenerator()
        let plans = (0..<300).map { i in
            (url: PipelineURLs.numbered(i % 12),
             processors: [MockImageProcessor("p\(i % 2)")].prefix(i % 3),
             priority: ImageRequest.Priority.allCases.randomElement(using: &generator)!,
             action: Int.random(in: 0..<4, using: &generator))
        }
        let tasks = plans.map { plan in
            h.pipeline.imageTask(with: ImageRequest(url: plan.url, processors: Array(plan.processors), priority: plan.priority))
        }
        await withTaskGroup(of: Void.self) { group in
            for (task, plan) in zip(tasks, plans) {
                group.addTask {
                    switch plan.action {
                    case 0: task.cancel()
                    case 1: task.priority = .veryHigh
                    case 2:
                        task.priority = .veryLow
                        task.cancel()
                    default: break
                    }
                }
            }
        }
        h.loader.resume()
        var finished = 0
        for (task, plan) in zip(tasks, plans) {
            let error = await errorThrown { try await task.response }
            if plan.action == 0 || plan.action == 2 {
                #expect(error.flatMap(ImagePipeline.Error.Code.of) == .cancelled)
            } else {
                #expect(error == nil)
            }
            finished += 1
        }
        #expect(finished == plans.count)
        await h.waitUntilIdle()
        let metrics = h.pipeline.metrics
        #expect(metrics.peakNetworkRequestsInFlight <= 3)
        #expect(metrics.networkRequestsInFlight == 0)
        #expect(h.pipeline.configuration.dataLoadingQueue.pendingCount == 0)
    }
}
