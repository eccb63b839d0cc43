import Foundation
import Testing
@_spi(Testing) @testable import Lumen
import LumenTestSupport

/// A stream opened a moment after its task started, once a preview was already decoded for
/// it while another task's stream was open in the pipeline.
extension ProgressiveDecodingTests {
    /// A task that got a preview before its own stream opened shows it when the stream
    /// opens, with the rest of the body still held. The preview came while another task's
    /// stream was open: decoded at once (`otherStreamFirst`), or skipped and decoded when that
    /// other stream opened.
    @Test(arguments: [true, false])
    func aStreamOpenedAfterItsTaskGotAPreviewStartsWithIt(otherStreamFirst: Bool) async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 1))
        // Another image whose task keeps an events stream open in the pipeline: its bytes never
        // come (the closure waits until the task is cancelled).
        let (never, _) = AsyncStream.makeStream(of: Data.self)
        let other = setup.pipeline.imageTask(with: ImageRequest(id: "other", data: {
            for await data in never { return data }
            throw CancellationError()
        }))
        var otherEvents = otherStreamFirst ? other.events : nil

        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))
        setup.loader.releaseChunks(1) // the first scan, complete; the rest of the body is held
        await setup.loader.waitForChunks(1)
        if otherEvents == nil { otherEvents = other.events }
        // The preview decode ran and its image went to the task, which had no stream then.
        await setup.pipeline.waitForMetrics { $0.previewDecodes == 1 }
        await Self.waitUntilIdle(setup.decodingQueue)

        var events = task.events.makeAsyncIterator()
        setup.loader.holdsChunks = false
        let (previews, result) = await Self.rest(&events)
        #expect(previews.count == 1)
        #expect(previews.allSatisfy { $0.isPreview && $0.image.width == 320 })
        #expect(try result?.get().isPreview == false)
        #expect(setup.pipeline.metrics.previewDecodes == 1)

        other.cancel()
        withExtendedLifetime(otherEvents) {}
        await setup.pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
    }

    /// Returns once `queue` runs and holds nothing.
    static func waitUntilIdle(_ queue: WorkQueue) async {
        await queue.waitUntil { $0.runningCount == 0 && $0.pendingCount == 0 }
    }
}
