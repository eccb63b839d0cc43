import Foundation
import Testing
@testable import Lumen
import LumenTestSupport

/// ``FetchImage`` beside work the pipeline already runs for the same image — a prefetch whose
/// bytes are in and whose decode waits in the queue, a prefetch at the cell's size — and a size
/// change after success while a download runs. Each case was once a second download, a second
/// decode or a cancelled download (found by an independent acceptance probe).
@MainActor
@Suite(.timeLimit(.minutes(1)))
struct FetchImageJoiningTests {
    typealias Photo = PipelineDerivationTests

    /// The URL was prefetched (full size) and downloaded; its decode waits in the queue. A
    /// model shown now joins that decode — raising it at once — instead of downloading the
    /// bytes again, and makes its size from the full-size image the decode leaves in memory.
    /// With the display size known before or after `load`.
    @Test(arguments: [false, true])
    func aModelJoinsAPrefetchsQueuedDecodeInsteadOfDownloadingAgain(sizeFirst: Bool) async throws {
        let (loader, pipeline) = Photo.pipeline()
        let decodes = pipeline.configuration.decodingQueue
        decodes.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: pipeline)
        prefetcher.startPrefetching(with: [Photo.url])
        await decodes.waitUntil { $0.pendingCount == 1 } // the bytes are in, the decode waits
        #expect(decodes.pendingPriorities == [.low])

        let model = FetchImage(pipeline: pipeline)
        if sizeFirst { model.displaySize(width: 100, height: 100) }
        model.load(ImageRequest(url: Photo.url))
        if !sizeFirst { model.displaySize(width: 100, height: 100) } // the 128 bucket
        #expect(decodes.pendingPriorities == [.normal]) // raised by the model, at once
        #expect(model.isLoading)

        decodes.isSuspended = false
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        let image = try #require(model.phase.image)
        #expect(image.width == 128 && image.height == 96)
        await prefetcher.waitUntilIdle()
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.decodes == 1) // the prefetch's; the model's size was resampled
        #expect(pipeline.metrics.resampledFromMemory == 1)
    }

    /// A prefetch at the cell's size and the cell's model share the download; when the bytes
    /// come, the model joins the prefetch's decode at that size instead of decoding them again.
    @Test func aModelJoinsAPrefetchsDecodeAtItsSize() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(256))])
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100, scale: 2) // 200 px: the 256 bucket
        await h.loader.waitForLoads(1)
        h.pipeline.configuration.decodingQueue.isSuspended = true // both must meet the decode
        h.loader.resume()
        await h.recorder.wait { $0.subscriptions(.decode) >= 2 }
        #expect(h.recorder.counts.started(.decode) == 1 && h.recorder.counts.joined(.decode) == 1)
        h.pipeline.configuration.decodingQueue.isSuspended = false
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        await prefetcher.waitUntilIdle()
        #expect(model.phase.image?.width == 256)
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 1)
    }

    /// `load` before layout, then a prefetch of the cell's size joins the model's download:
    /// when the size comes, the model joins that decode and lets its own subscription to the
    /// download go (the download goes on for the decode). One download, one decode.
    @Test func theFirstSizeJoinsADecodeRunningAtItAndDropsTheModelsDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(128))])
        model.displaySize(width: 100, height: 100)
        // Joined with the size, before the bytes: the model then never decodes them itself.
        #expect(h.recorder.counts.subscriptions(.decode) == 2)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        await prefetcher.waitUntilIdle()
        #expect(model.phase.image?.width == 128)
        #expect(h.loader.loadCount == 1 && h.loader.cancelledCount == 0)
        #expect(h.decoder.decodeCount == 1)
    }

    /// After a success, a size change that starts a download (no bytes held: the image came
    /// from memory), then one back to a size memory has, never cancels that download; the
    /// next change to the larger size decodes the bytes it brought.
    @Test func aSizeChangeAfterSuccessNeverCancelsTheDownloadItStarted() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(128)))
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(256)))
        #expect(h.loader.loadCount == 2)
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 100, height: 100)
        model.load(ImageRequest(url: PipelineURLs.a))
        #expect(model.phase.image?.width == 128) // from memory
        model.displaySize(width: 1000, height: 100) // 1024: needs the bytes
        await h.loader.waitForLoads(3)
        model.displaySize(width: 250, height: 100) // 256: in memory, shown at once
        #expect(model.phase.image?.width == 256)
        #expect(model.isLoading) // the download goes on
        model.displaySize(width: 1000, height: 100)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image?.width == 1024 && !$0.isLoading }
        await h.waitUntilIdle()
        #expect(h.loader.cancelledCount == 0)
        #expect(h.loader.loadCount == 3)
    }
}
