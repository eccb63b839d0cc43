import Foundation
import Testing
import Lumen
import LumenTestSupport

@Suite(.timeLimit(.minutes(1)))
struct PipelineCancellationTests {
    @Test func cancellingOneOfTwoSubscribersKeepsTheDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let t2 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        t1.cancel()
        #expect(t1.state == .cancelled)
        #expect(t2.state == .running)
        h.loader.resume()
        _ = try await t2.response
        let error = await errorThrown { try await t1.response }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
        #expect(h.pipeline.metrics.decode.cancelled == 0)
    }

    @Test func cancellingEverySubscriberCancelsTheLoad() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let t2 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("p")]))
        await h.loader.waitForLoads(1)
        t1.cancel()
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
        t2.cancel()
        await h.loader.waitForCancellations(1)
        let metrics = h.pipeline.metrics
        #expect(metrics.fetch.cancelled == 1)
        #expect(metrics.decode.cancelled == 1)
        #expect(metrics.process.cancelled == 1)
        #expect(h.decoder.decodeCount == 0)
        await h.waitUntilIdle()
    }

    @Test func aCancelledChainLeavesASharedDownloadRunning() async throws {
        let h = PipelineHarness()
        let applications = ProcessorApplications()
        h.loader.isSuspended = true
        let small = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("x", applications: applications)], thumbnail: .maxPixelSize(16)))
        let large = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(32)))
        await h.loader.waitForLoads(1)
        small.cancel()
        let metrics = h.pipeline.metrics
        #expect(metrics.process.cancelled == 1)
        #expect(metrics.decode.cancelled == 1)
        #expect(metrics.fetch.cancelled == 0)
        h.loader.resume()
        #expect(try await large.response.image.width == 32)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.decoder.decodeCount == 1)
        #expect(applications.total == 0)
    }

    @Test func cancellingTheAwaitingSwiftTaskCancelsTheImageTask() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let task = Task { try await h.pipeline.image(for: PipelineURLs.a) }
        await h.loader.waitForLoads(1)
        task.cancel()
        let error = await errorThrown { try await task.value }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        await h.loader.waitForCancellations(1)
        #expect(h.pipeline.metrics.fetch.cancelled == 1)
    }

    @Test func anAlreadyCancelledCallerStartsNoWork() async throws {
        let h = PipelineHarness()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) }
        }
        let error = await task.value
        #expect(error.flatMap(ImagePipeline.Error.Code.of) == .cancelled)
        #expect(h.pipeline.metrics.fetch.started == 0)
    }

    @Test func cancellingBeforeTheQueueStartsTheLoadRemovesIt() async throws {
        let h = PipelineHarness()
        h.pipeline.configuration.dataLoadingQueue.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        #expect(h.pipeline.configuration.dataLoadingQueue.pendingCount == 1)
        task.cancel()
        #expect(h.pipeline.configuration.dataLoadingQueue.pendingCount == 0)
        h.pipeline.configuration.dataLoadingQueue.isSuspended = false
        await h.waitUntilIdle()
        #expect(h.loader.loadCount == 0)
    }

    @Test func eventsEndWithCancellation() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let events = task.events
        task.cancel()
        var last: ImageTask.Event?
        for await event in events { last = event }
        guard case .finished(.failure(let error))? = last else {
            Issue.record("expected a cancellation, got \(String(describing: last))")
            return
        }
        #expect(error.code == .cancelled)
    }

    @Test func invalidateCancelsRunningRequestsAndFailsLaterOnes() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let running = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let data = Task { try await h.pipeline.data(for: ImageRequest(url: PipelineURLs.b)) }
        await h.loader.waitForLoads(2)
        h.pipeline.invalidate()
        #expect(h.pipeline.isInvalidated)
        let e1 = await errorThrown { try await running.response }
        let e2 = await errorThrown { try await data.value }
        #expect(ImagePipeline.Error.Code.of(e1!) == .cancelled)
        #expect(ImagePipeline.Error.Code.of(e2!) == .cancelled)
        let e3 = await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) }
        let e4 = await errorThrown { try await h.pipeline.data(for: ImageRequest(url: PipelineURLs.a)) }
        #expect(ImagePipeline.Error.Code.of(e3!) == .pipelineInvalidated)
        #expect(ImagePipeline.Error.Code.of(e4!) == .pipelineInvalidated)
        await h.loader.waitForCancellations(2)
        await h.waitUntilIdle()
    }
}
