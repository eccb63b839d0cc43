import Foundation
import Testing
@_spi(Testing) @testable import Lumen
@testable import LumenUI
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

    /// The bytes come to a model whose prefetch at the cell's size started after its fetch
    /// (and joined that fetch): the model joins the prefetch's decode when its bytes arrive.
    @Test func whenTheBytesComeTheModelJoinsADecodeWhoseBytesCameToo() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 100, height: 100) // 128
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(128))])
        #expect(h.recorder.counts.subscriptions(.decode) == 1) // the prefetch's; the model has no bytes yet
        let decodes = h.pipeline.configuration.decodingQueue
        decodes.isSuspended = true
        h.loader.resume()
        await h.recorder.wait { $0.subscriptions(.decode) >= 2 }
        #expect(h.recorder.counts.started(.decode) == 1 && h.recorder.counts.joined(.decode) == 1)
        decodes.isSuspended = false
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        await prefetcher.waitUntilIdle()
        #expect(model.phase.image?.width == 128)
        #expect(h.loader.loadCount == 1 && h.decoder.decodeCount == 1)
    }

    /// The model holds its bytes; a prefetch at its size started after the fetch had ended is
    /// waiting for a download of its own. The model does not join that decode (it would wait
    /// behind the download, and take its failure): it decodes its bytes.
    @Test func aModelWithItsBytesNeverJoinsADecodeWaitingForADownload() async throws {
        let fetched = DispatchSemaphore(value: 0)
        let h = PipelineHarness { configuration in
            let recorder = configuration.eventHandler
            configuration.eventHandler = { event in
                recorder?(event)
                if case .completed(.fetch, _) = event { fetched.signal() }
            }
        }
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 100, height: 100)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        h.loader.isSuspended = true // the next download is held
        Self.wait(fetched) // the fetch ended; the model (main actor, held here) has not seen it yet
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(128))])
        await h.loader.waitForLoads(2)
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading } // while the download is held
        #expect(model.phase.image?.width == 128)
        h.loader.resume()
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 2)
    }

    private nonisolated static func wait(_ semaphore: DispatchSemaphore) { semaphore.wait() }

    /// A full-size prefetch too large for the memory cache: the model joins its decode (its
    /// bytes are in) and makes its size from the image that decode made, not from memory —
    /// no second download.
    @Test func aJoinedFullSizeDecodeServesTheModelWhenMemoryRefusedTheImage() async throws {
        let (loader, pipeline) = Photo.pipeline { configuration in
            // 400×300 RGB is 360 KB: refused; the 128 px bucket (37 KB) is kept.
            configuration.imageCache = ImageCache(costLimit: 1 << 20, entryCostLimit: 0.2)
        }
        let decodes = pipeline.configuration.decodingQueue
        decodes.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: pipeline)
        prefetcher.startPrefetching(with: [Photo.url])
        await decodes.waitUntil { $0.pendingCount == 1 }
        let model = FetchImage(pipeline: pipeline)
        model.load(ImageRequest(url: Photo.url))
        model.displaySize(width: 100, height: 100)
        decodes.isSuspended = false
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        #expect(model.phase.image?.width == 128)
        await prefetcher.waitUntilIdle()
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.memoryCacheRejectedOversize >= 1)
        #expect(pipeline.metrics.resampledFromMemory == 1)
    }

    /// A full-size prefetch still downloading is not joined at full size: the model's fetch
    /// joins the download and decodes its own size from the bytes. One download.
    @Test func aFullSizeDecodeStillDownloadingIsNotJoinedTheDownloadIs() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await h.loader.waitForLoads(1)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        #expect(h.recorder.counts.joined(.fetch) == 1 && h.recorder.counts.joined(.decode) == 0)
        model.displaySize(width: 100, height: 100)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        await prefetcher.waitUntilIdle()
        #expect(model.phase.image?.width == 128)
        #expect(h.loader.loadCount == 1)
    }

    /// A request that may not read the memory cache is never shown from it — with the size
    /// before or after `load` — and downloads the image again (as `pipeline.image(for:)` does).
    @Test(arguments: [(ImageRequest.Options.disableMemoryCacheReads, true), (.disableMemoryCacheReads, false),
                      (.reloadIgnoringCachedData, true), (.reloadIgnoringCachedData, false)])
    func aRequestThatMayNotReadMemoryIsNotShownFromIt(options: ImageRequest.Options, sizeFirst: Bool) async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(128)))
        #expect(h.loader.loadCount == 1)
        let model = FetchImage(pipeline: h.pipeline)
        let request = ImageRequest(url: PipelineURLs.a, options: options)
        if sizeFirst { model.displaySize(width: 100, height: 100) }
        model.load(request)
        if !sizeFirst { model.displaySize(width: 100, height: 100) }
        #expect(model.phase.image == nil) // not from memory, at once
        await waitUntil(model) { $0.phase.image != nil && !$0.isLoading }
        #expect(model.response?.cacheType != .memory)
        #expect(model.phase.image?.width == 128)
        #expect(h.loader.loadCount == 2)
    }
}
