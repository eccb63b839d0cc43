import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(Testing) import Lumen
import LumenUI
import LumenTestSupport

/// `ImagePipeline.dataTask(with:)`: byte loads with a handle (priority, progress, cancel), and
/// the prefetcher and `FetchImage` moving the priority of their running byte loads with it.
@Suite(.timeLimit(.minutes(1)))
struct DataTaskTests {
    @Test func aDataTaskLoadsTheBytesWithProgressAndNeverDecodes() async throws {
        let h = PipelineHarness()
        let bytes = Data((0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        h.loader.serve(bytes, for: PipelineURLs.a)
        h.loader.chunkSize = 100
        let task = h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.a))

        let (data, response) = try await task.response
        #expect(data == bytes)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(task.progress == ImageTask.Progress(completed: 300, total: 300))
        #expect(task.state == .completed)
        #expect(h.pipeline.metrics.decodes == 0)
        await h.waitUntilIdle()
    }

    @Test func theDownloadRunsAtTheHighestPriorityAmongItsSubscribersAsTheDataTasksChanges() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let task = h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.a, priority: .low))
        #expect(queue.pendingPriorities == [.low])

        task.priority = .veryHigh
        #expect(task.priority == .veryHigh)
        #expect(queue.pendingPriorities == [.veryHigh])

        // An image request for the same bytes joins the download; lowering the data task's
        // priority falls back to the image request's.
        let image = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, priority: .normal))
        task.priority = .veryLow
        #expect(queue.pendingPriorities == [.normal])

        queue.isSuspended = false
        _ = try await task.response
        _ = try await image.response
        #expect(h.loader.loadCount == 1)
        await h.waitUntilIdle()
    }

    @Test func cancellingTheOnlyDataTaskCancelsTheDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let task = h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)

        task.cancel()
        let error = await #expect(throws: ImagePipeline.Error.self) { _ = try await task.response }
        #expect(error?.code == .cancelled)
        #expect(task.state == .cancelled)
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
    }

    @Test func cancellingADataTaskSharedWithAnImageRequestKeepsTheDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let data = h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.a))
        let image = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)

        data.cancel()
        do {
            _ = try await data.response
            Issue.record("a cancelled data task returned bytes")
        } catch {
            #expect(ImagePipeline.Error.Code.of(error) == .cancelled)
        }
        h.loader.resume()
        _ = try await image.response
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
        await h.waitUntilIdle()
    }

    @Test func cancellingTheAwaitingSwiftTaskCancelsTheDataTask() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let task = h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.a))
        let waiter = Task { try await task.response }
        await h.loader.waitForLoads(1)
        waiter.cancel()
        let error = await #expect(throws: ImagePipeline.Error.self) { _ = try await waiter.value }
        #expect(error?.code == .cancelled)
        #expect(task.state == .cancelled)
        await h.loader.waitForCancellations(1)
    }

    // MARK: - Users of the handle

    @Test func aRunningDiskPrefetchFollowsThePrefetchersPriority() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache, maxConcurrentRequestCount: 2)
        prefetcher.startPrefetching(with: [PipelineURLs.a, PipelineURLs.b])
        #expect(queue.pendingPriorities == [.low, .low])

        prefetcher.priority = .high
        #expect(queue.pendingPriorities == [.high, .high])
        prefetcher.priority = .veryLow
        #expect(queue.pendingPriorities == [.veryLow, .veryLow])

        queue.isSuspended = false
        await prefetcher.waitUntilIdle()
        #expect(prefetcher.outcomes.succeeded == 2)
        #expect(h.pipeline.metrics.decodes == 0)
        await h.waitUntilIdle()
    }

    @MainActor
    @Test func fetchImagesPriorityReachesItsInFlightFetch() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        #expect(queue.pendingPriorities == [.normal])

        model.priority = .veryHigh
        #expect(queue.pendingPriorities == [.veryHigh])
        model.priority = .low
        #expect(queue.pendingPriorities == [.low])

        // Disappearing cancels the fetch: its queued download (nobody else's) is dropped.
        model.onDisappear()
        #expect(queue.pendingPriorities.isEmpty)
        queue.isSuspended = false
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 0)
    }
}
