import Foundation
import Testing
import Lumen
import LumenTestSupport

@Suite(.timeLimit(.minutes(1)))
struct PipelineFailureTests {
    @Test func aFailedDownloadFailsEverySubscriberAndIsNotRemembered() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 503)
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let t2 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(10)))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        for task in [t1, t2] {
            let error = try #require(await errorThrown { try await task.response } as? ImagePipeline.Error)
            #expect(error.code == .dataLoadingFailed)
            #expect(error.statusCode == 503)
        }
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.fetch.failed == 1)

        // Still failing: the next request tries again instead of reusing the failure.
        _ = await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) }
        #expect(h.loader.loadCount == 2)
        h.loader.removeFailure(for: PipelineURLs.a)
        _ = try await h.pipeline.image(for: PipelineURLs.a)
        #expect(h.loader.loadCount == 3)
        await h.waitUntilIdle()
    }

    @Test(arguments: [nil, -1] as [Int?])
    func responsesLargerThanTheLimitFail(declaredLength: Int?) async throws {
        let h = PipelineHarness { $0.maximumResponseDataSize = 100 }
        h.loader.chunkSize = 40
        h.loader.serve(Data(repeating: 7, count: 150), for: PipelineURLs.a, declaredLength: declaredLength)
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let error = try #require(await errorThrown { try await task.response } as? ImagePipeline.Error)
        #expect(error.code == .dataTooLarge)
        #expect(error.limit == 100)
        if declaredLength == nil {
            #expect(error.byteCount == 150)          // rejected from Content-Length
            #expect(task.progress.completed == 0)    // before any chunk was accepted
        } else {
            #expect(error.byteCount == 120)          // the third chunk crossed the limit
            #expect(task.progress.completed == 80)
        }
        #expect(h.decoder.decodeCount == 0)
    }

    @Test func aLyingContentLengthIsCaughtWhileStreaming() async throws {
        let h = PipelineHarness { $0.maximumResponseDataSize = 100 }
        h.loader.chunkSize = 60
        h.loader.serve(Data(repeating: 7, count: 150), for: PipelineURLs.a, declaredLength: 50)
        let error = try #require(await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) } as? ImagePipeline.Error)
        #expect(error.code == .dataTooLarge)
        #expect(error.byteCount == 120)
    }

    @Test func anEmptyBodyIsAnError() async throws {
        let h = PipelineHarness()
        h.loader.serve(Data(), for: PipelineURLs.a)
        let error = try #require(await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) } as? ImagePipeline.Error)
        #expect(error.code == .dataIsEmpty)
    }

    @Test func decodingAndProcessingFailuresAreTyped() async throws {
        let h = PipelineHarness { $0.decoder = ImageDecoders.Default() }
        let decodeError = try #require(await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) } as? ImagePipeline.Error)
        #expect(decodeError.code == .decodingFailed)
        #expect(decodeError.underlyingError is ImagingError)

        let h2 = PipelineHarness()
        let request = ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("ok"), MockImageProcessor("bad", fails: true)])
        let processError = try #require(await errorThrown { try await h2.pipeline.image(for: request) } as? ImagePipeline.Error)
        #expect(processError.code == .processingFailed)
        #expect(processError.processorIdentifier == "mock.bad.fails")
        #expect(h2.pipeline.metrics.process.failed == 1)
        #expect(h2.pipeline.metrics.process.completed == 1)
    }

    @Test func closureErrorsAreWrapped() async throws {
        struct Boom: Error {}
        let h = PipelineHarness()
        let request = ImageRequest(id: "boom", data: { throw Boom() })
        let error = try #require(await errorThrown { try await h.pipeline.image(for: request) } as? ImagePipeline.Error)
        #expect(error.code == .dataLoadingFailed)
        #expect(error.underlyingError is Boom)
        #expect(error.statusCode == nil)
    }

    @Test func retryPolicyRetriesAllowedFailures() async throws {
        let h = PipelineHarness { $0.retryPolicy = .init(maximumAttempts: 3) }
        h.loader.fail(PipelineURLs.a, statusCode: 500)
        _ = await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) }
        #expect(h.loader.loadCount == 3)
        #expect(h.pipeline.metrics.fetch.failed == 1)
        #expect(h.pipeline.metrics.networkRequestsStarted == 3)
    }

    @Test(arguments: [(404, 1), (403, 1), (408, 3), (429, 3), (503, 3)])
    func theDefaultRetryPredicateRetriesOnlyTransientStatuses(status: Int, expectedLoads: Int) async throws {
        let h = PipelineHarness { $0.retryPolicy = .init(maximumAttempts: 3) }
        h.loader.fail(PipelineURLs.a, statusCode: status)
        let error = await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) }
        #expect((error as? ImagePipeline.Error)?.statusCode == status)
        #expect(h.loader.loadCount == expectedLoads)
    }

    @Test func progressIsReportedPerChunk() async throws {
        let h = PipelineHarness()
        h.loader.chunkSize = 16
        h.loader.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let events = task.events
        h.loader.resume()
        var progress: [ImageTask.Progress] = []
        var finished = false
        for await event in events {
            switch event {
            case .progress(let p): progress.append(p)
            case .finished(let result): finished = (try? result.get()) != nil
            case .preview: break
            }
        }
        #expect(finished)
        #expect(progress.map(\.completed) == [16, 32, 48, 64])
        #expect(progress.allSatisfy { $0.total == 64 })
        #expect(task.progress.fraction == 1)
        #expect(h.pipeline.metrics.bytesDownloaded == 64)
        // A stream made after completion yields only the terminal event.
        var late: [ImageTask.Event] = []
        for await event in task.events { late.append(event) }
        #expect(late.count == 1)
        if case .finished(.success)? = late.first {} else { Issue.record("expected .finished(.success)") }
    }
}
