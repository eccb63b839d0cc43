import Foundation
import Testing
import Lumen
import LumenTestSupport

/// The waits of `MockDataLoader` and `PipelineEventRecorder`, which tests of users' own code
/// lean on too.
@Suite(.timeLimit(.minutes(1)))
struct MockDataLoaderTests {
    /// A wait for a count never reached returns when its task is cancelled — a test's time
    /// limit then ends the test instead of leaving the process waiting — whether the cancel
    /// comes before or after the wait began.
    @Test(arguments: [false, true])
    func aWaitEndsWhenItsTaskIsCancelled(cancelFirst: Bool) async {
        let loader = MockDataLoader()
        let started = AsyncStream<Void>.makeStream()
        let waiter = Task {
            if cancelFirst { withUnsafeCurrentTask { $0?.cancel() } }
            started.continuation.yield()
            await loader.waitForLoads(1)
            await loader.waitForCancellations(1)
            await loader.waitForChunks(1)
            await PipelineEventRecorder().wait { $0.started(.fetch) >= 1 }
        }
        var iterator = started.stream.makeAsyncIterator()
        _ = await iterator.next()
        waiter.cancel()
        await waiter.value // without the cancellation, this never returns
        #expect(loader.loadCount == 0)
    }

    /// A wait still ends when its count is reached.
    @Test func aWaitEndsWhenTheCountIsReached() async throws {
        let loader = MockDataLoader()
        loader.isSuspended = true
        let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
        let task = pipeline.imageTask(with: ImageRequest(url: URL(string: "https://example.com/a.jpg")!))
        await loader.waitForLoads(1)
        #expect(loader.loadCount == 1)
        task.cancel()
        await loader.waitForCancellations(1)
        #expect(loader.cancelledCount == 1)
    }
}
