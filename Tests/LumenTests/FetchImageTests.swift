import Foundation
import Observation
import Synchronization
import Testing
@_spi(Testing) @testable import Lumen
@testable import LumenUI
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@MainActor
@Suite(.timeLimit(.minutes(1)))
struct FetchImageTests {
    // MARK: - Phases

    @Test func phasesGoFromEmptyToSuccess() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        #expect(model.phase.image == nil && model.phase.error == nil)
        #expect(!model.isLoading)

        model.load(ImageRequest(url: PipelineURLs.a))
        #expect(model.isLoading)
        model.displaySize(width: 100, height: 50, scale: 2) // 200 px → the 256 bucket
        await waitUntil(model) { $0.phase.image != nil }

        let image = try #require(model.phase.image)
        #expect(image.width == 256) // the trivial decoder decodes `.maxPixelSize(n)` as n×n
        // As with `AsyncImagePhase`, the success case carries the image; the response beside
        // it says the rest.
        guard case .success(let shown) = model.phase else { Issue.record("not .success: \(model.phase)"); return }
        #expect(shown == image)
        #expect(model.response?.image == image && model.response?.request.thumbnail == .maxPixelSize(256))
        #expect(model.response?.cacheType == nil) // from the network
        #expect(!model.isLoading)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
        #expect(h.pipeline.metrics.decodes == 1)
    }

    /// What a view does when its request may have changed: another caller's credentials are
    /// another image (the old one must not stay on screen), a new priority is not.
    @Test func aCredentialChangeReloadsAndAPriorityChangeDoesNot() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 100, height: 100, scale: 1)
        func request(_ authorization: String, priority: ImageRequest.Priority = .normal) -> ImageRequest {
            var urlRequest = URLRequest(url: PipelineURLs.a)
            urlRequest.setValue(authorization, forHTTPHeaderField: "Authorization")
            return ImageRequest(urlRequest: urlRequest, priority: priority)
        }
        model.loadIfChanged(request("Bearer one"))
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 1)

        model.loadIfChanged(request("Bearer one", priority: .high))
        #expect(model.phase.image != nil)  // the same image: nothing reset, nothing loaded
        model.loadIfChanged(request("Bearer two"))
        #expect(model.phase.image == nil)  // user one's image is gone at once
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 2)
        model.loadIfChanged(nil)
        #expect(model.phase.image == nil && model.request == nil)
    }

    @Test func aFailedDownloadIsTheFailurePhase() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 500)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 10, height: 10)
        await waitUntil(model) { $0.phase.error != nil }
        let error = try #require(model.phase.error)
        #expect(error.code == .dataLoadingFailed)
        #expect(error.statusCode == 500)
        #expect(model.response == nil)
        #expect(!model.isLoading)
        #expect(h.pipeline.metrics.decodes == 0)
    }

    @Test func aFailedDecodeIsTheFailurePhase() async throws {
        let h = PipelineHarness { $0.decoder = FailingDecoder() }
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 10, height: 10)
        await waitUntil(model) { $0.phase.error != nil }
        #expect(model.phase.error?.code == .decodingFailed)
        #expect(model.phase.image == nil)
        #expect(!model.isLoading)
    }

    @Test func appearingAgainAfterAFailureRetriesWithAFreshDownload() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 503)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 10, height: 10)
        await waitUntil(model) { $0.phase.error != nil }

        model.displaySize(width: 300, height: 300) // layout alone does not retry
        #expect(!model.isLoading)
        #expect(h.loader.loadCount == 1)

        h.loader.removeFailure(for: PipelineURLs.a)
        model.onDisappear()
        model.onAppear()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 2)
    }

    // MARK: - Fetch before size, decode once

    @Test func bytesThatArriveBeforeTheSizeAreDecodedOnceWhenTheSizeIsSet() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await waitUntil(model) { !$0.isLoading } // the bytes are in the model
        #expect(h.pipeline.metrics.fetch.completed == 1)
        #expect(h.pipeline.metrics.decodes == 0)
        #expect(model.phase.image == nil)

        model.displaySize(width: 60, height: 40)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 64)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.loader.loadCount == 1)
    }

    @Test func aSizeSetWhileDownloadingDecodesOnceWhenTheBytesArrive() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)
        model.displaySize(width: 100, height: 100)
        model.displaySize(width: 300, height: 100) // a size change never touches the download
        #expect(model.isLoading)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 320)
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
    }

    @Test func aRequestWithItsOwnThumbnailDoesNotWaitForADisplaySize() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(40)))
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 40)
    }

    @Test func withoutDisplaySizesTheFullImageIsDecodedWhenTheBytesArrive() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.decodesAtDisplaySize = false
        model.load(ImageRequest(url: PipelineURLs.a))
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 64) // the trivial decoder's full size for 64 bytes
        #expect(model.phase.image?.height == 1)
    }

    @Test func clearingTheURLCancelsAndForgets() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.url = PipelineURLs.a
        #expect(model.url == PipelineURLs.a)
        await h.loader.waitForLoads(1)
        model.url = nil
        #expect(model.request == nil)
        #expect(!model.isLoading)
        await h.loader.waitForCancellations(1)
        model.onAppear() // nothing to load
        #expect(!model.isLoading)
    }

    // MARK: - Size changes

    @Test func aSizeChangeAfterSuccessReDecodesWithoutDownloading() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 128)

        model.displaySize(width: 300, height: 200)
        #expect(model.phase.image?.width == 128) // the old image stays until the new one is ready
        await waitUntil(model) { $0.phase.image?.width == 320 }
        let metrics = h.pipeline.metrics
        #expect(metrics.networkRequestsStarted == 1)
        #expect(metrics.decodes == 2)
        #expect(h.loader.loadCount == 1)
    }

    /// Re-decoding bytes the model holds takes no download slot: with every slot of the
    /// data-loading queue (6) held by stalled downloads, a size change still re-decodes.
    @Test func aSizeChangeReDecodesWhileEveryDownloadSlotIsHeld() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100)
        await waitUntil(model) { $0.phase.image != nil }

        h.loader.isSuspended = true
        let downloads = (0..<6).map { h.pipeline.dataTask(with: ImageRequest(url: PipelineURLs.numbered($0))) }
        await h.pipeline.waitForMetrics { $0.networkRequestsInFlight == 6 }
        let bytesBefore = h.pipeline.metrics.bytesDownloaded

        model.displaySize(width: 300, height: 200)
        await waitUntil(model) { $0.phase.image?.width == 320 }
        #expect(h.pipeline.metrics.decodes == 2)
        #expect(h.pipeline.metrics.networkRequestsStarted == 7)
        #expect(h.pipeline.metrics.bytesDownloaded == bytesBefore) // not a download
        for download in downloads { download.cancel() }
        h.loader.resume()
    }

    @Test func sizesInTheSameBucketShareTheDecode() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 199, height: 10)
        await waitUntil(model) { $0.phase.image != nil }
        model.displaySize(width: 201, height: 10)
        #expect(!model.isLoading) // nothing to do: same bucket
        #expect(model.phase.image?.width == 256)

        // Another model at 201 points asks for the same decode size.
        let other = FetchImage(pipeline: h.pipeline)
        other.load(ImageRequest(url: PipelineURLs.a))
        other.displaySize(width: 10, height: 201)
        await waitUntil(other) { $0.phase.image != nil }
        #expect(other.phase.image?.width == 256)
    }

    @Test func modelsShowingOneImageAtOneBucketShareTheDownloadAndTheDecode() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let decoding = h.pipeline.configuration.decodingQueue
        decoding.isSuspended = true
        let cells = (0..<4).map { _ in FetchImage(pipeline: h.pipeline) }
        for (i, cell) in cells.enumerated() {
            cell.load(ImageRequest(url: PipelineURLs.a))
            cell.displaySize(width: 90 + Double(i), height: 90) // one bucket: 128
        }
        await h.pipeline.waitForMetrics { $0.fetch.joined == 3 }
        h.loader.resume()
        await h.recorder.wait { $0.subscriptions(.decode) == 4 }
        decoding.isSuspended = false
        for cell in cells { await waitUntil(cell) { $0.phase.image != nil } }

        #expect(cells.allSatisfy { $0.phase.image?.width == 128 })
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.pipeline.metrics.decode.joined == 3)
    }

    @Test func theDecodeSizeNeverExceedsTheNaturalSizeOnceKnown() async throws {
        let decoder = NaturalSizeDecoder(width: 150, height: 100)
        let h = PipelineHarness { $0.decoder = decoder }
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 256, height: 256)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 150)
        #expect(model.naturalMaxPixelSize == 150)

        model.displaySize(width: 640, height: 480) // bigger than the image: nothing to decode
        #expect(!model.isLoading)
        model.displaySize(width: 100, height: 50)
        await waitUntil(model) { $0.phase.image?.width == 128 }
        model.displaySize(width: 400, height: 300) // bucket 448, capped at 150
        await waitUntil(model) { $0.phase.image?.width == 150 }

        #expect(decoder.requestedSizes == [.maxPixelSize(256), .maxPixelSize(128), .maxPixelSize(150)])
        #expect(h.loader.loadCount == 1)
    }

    @Test func withTheRealDecoderAJPEGsNaturalSizeCapsTheDecodeSize() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let jpeg = try Data(contentsOf: root.appendingPathComponent("../shared/corpus/real-world/hopper.jpg")) // 128×128
        let h = PipelineHarness { $0.decoder = ImageDecoders.Default() }
        h.loader.serve(jpeg, for: PipelineURLs.a)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100, scale: 2) // 200 px → bucket 256, above the image
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 128)
        #expect(model.naturalMaxPixelSize == 128)

        model.displaySize(width: 100, height: 100) // bucket 128 = the natural size: nothing to do
        #expect(!model.isLoading)
        model.displaySize(width: 50, height: 40) // bucket 64
        await waitUntil(model) { $0.phase.image?.width == 64 }
        #expect(model.phase.image?.height == 64)
        #expect(h.pipeline.metrics.decodes == 2)
        #expect(h.loader.loadCount == 1)
    }

    // MARK: - Visibility

    @Test func disappearingCancelsADownloadNobodyElseNeeds() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1)

        model.onDisappear()
        #expect(!model.isLoading)
        await h.loader.waitForCancellations(1)
        await h.waitUntilIdle()
        #expect(model.phase.image == nil && model.phase.error == nil) // cancellation is not a failure

        h.loader.resume()
        model.onAppear() // starts over
        model.displaySize(width: 30, height: 30)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 2)
    }

    @Test func disappearingKeepsADownloadAnotherRequestNeeds() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let other = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.pipeline.waitForMetrics { $0.fetch.joined == 1 } // the model joined the download
        await h.loader.waitForLoads(1)

        model.onDisappear()
        await h.pipeline.waitForMetrics { $0.liveRequests == 1 }
        h.loader.resume()
        _ = try await other.response
        #expect(h.loader.cancelledCount == 0)
        #expect(h.pipeline.metrics.fetch.cancelled == 0)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
    }

    @Test func disappearingDuringTheDecodeCancelsOnlyTheDecode() async throws {
        let h = PipelineHarness()
        let decoding = h.pipeline.configuration.decodingQueue
        decoding.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 50, height: 50)
        await h.pipeline.waitForMetrics { $0.decode.started == 1 }
        model.onDisappear()
        await h.pipeline.waitForMetrics { $0.decode.cancelled == 1 }

        model.onAppear() // decodes the bytes it kept
        decoding.isSuspended = false
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
        #expect(h.pipeline.metrics.decodes == 1)
    }

    @Test func disappearingAfterSuccessKeepsTheImage() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 50, height: 50)
        await waitUntil(model) { $0.phase.image != nil }
        await h.waitUntilIdle()
        let before = h.pipeline.metrics
        model.onDisappear()
        model.onAppear()
        #expect(model.phase.image?.width == 64)
        #expect(!model.isLoading)
        #expect(h.pipeline.metrics == before) // nothing started again
    }

    // MARK: - Requests, priority, sharing

    @Test func loadingAnotherRequestCancelsThePreviousOne() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.url = PipelineURLs.a
        await h.loader.waitForLoads(1)
        model.url = PipelineURLs.a // the same URL: nothing restarts
        model.url = PipelineURLs.b
        await h.loader.waitForCancellations(1)
        await h.loader.waitForLoads(2)
        #expect(h.loader.requestedURLs == [PipelineURLs.a, PipelineURLs.b])
        h.loader.resume()
        model.displaySize(width: 10, height: 10)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.request?.url == PipelineURLs.b)
    }

    @Test func thePriorityReachesTheFetchAndTheRunningDecode() async throws {
        let h = PipelineHarness()
        let data = h.pipeline.configuration.dataLoadingQueue
        let decoding = h.pipeline.configuration.decodingQueue
        data.isSuspended = true
        decoding.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.priority = .high
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 10, height: 10)
        await h.pipeline.waitForMetrics { $0.fetch.started == 1 }
        #expect(data.pendingPriorities == [.high])
        data.isSuspended = false
        // The download, then the decode's read of the model's bytes: the decode is queued.
        await h.recorder.wait { $0.completed(.fetch) == 2 }
        #expect(decoding.pendingPriorities == [.high])
        model.priority = .veryLow
        #expect(decoding.pendingPriorities == [.veryLow])
        decoding.isSuspended = false
        await waitUntil(model) { $0.phase.image != nil }
    }

    @Test func aVisibleModelRaisesAQueuedPrefetchsDownloadAndLeavingLowersIt() async throws {
        let h = PipelineHarness()
        let queue = h.pipeline.configuration.dataLoadingQueue
        queue.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        #expect(queue.pendingPriorities == [.low])

        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.pipeline.waitForMetrics { $0.fetch.joined == 1 }
        #expect(queue.pendingPriorities == [.normal])

        model.onDisappear()
        await h.pipeline.waitForMetrics { $0.liveRequests == 1 }
        #expect(queue.pendingPriorities == [.low])
        queue.isSuspended = false
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
    }

    @Test func aVisibleModelJoinsAPrefetchsDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline, destination: .diskCache)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        await h.loader.waitForLoads(1)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 20, height: 20)
        await h.pipeline.waitForMetrics { $0.fetch.joined == 1 }
        prefetcher.stopPrefetching()
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
    }

    @Test func anImageInTheMemoryCacheShowsAtOnceWithoutFetching() async throws {
        let h = PipelineHarness()
        let first = FetchImage(pipeline: h.pipeline)
        first.load(ImageRequest(url: PipelineURLs.a))
        first.displaySize(width: 100, height: 100)
        await waitUntil(first) { $0.phase.image != nil }
        await h.waitUntilIdle()
        let before = h.pipeline.metrics

        let second = FetchImage(pipeline: h.pipeline)
        second.displaySize(width: 101, height: 90) // the same bucket
        second.load(ImageRequest(url: PipelineURLs.a))
        #expect(second.phase.image?.width == 128) // synchronously, from memory
        #expect(!second.isLoading)
        // Nothing ran; only the memory-cache lookup that answered is counted.
        var after = h.pipeline.metrics
        #expect(after.memoryCache.hits == before.memoryCache.hits + 1)
        after.memoryCache = before.memoryCache
        #expect(after == before)
    }

    @Test(arguments: [
        (199.0, 1.0, 256), (201.0, 1.0, 256), (192.0, 1.0, 192), (193.0, 1.0, 256),
        (1.0, 1.0, 64), (64.0, 1.0, 64), (65.0, 1.0, 128), (100.0, 2.0, 256),
        (100.0, 1.5, 192), (64.0 / 3.0, 3.0, 64), (66.67, 3.0, 256), (0.5, 1.0, 64),
    ])
    func theBucketRule(points: Double, scale: Double, expected: Int) {
        #expect(DisplaySize(width: points, height: 1, scale: scale).bucketedMaxPixelSize == expected)
        #expect(DisplaySize(width: 1, height: points, scale: scale).bucketedMaxPixelSize == expected)
    }

    @Test func anEmptyDisplaySizeIsIgnored() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 0, height: 100)
        model.displaySize(width: .nan, height: 100)
        await waitUntil(model) { !$0.isLoading }
        #expect(model.currentDisplaySize == nil)
        #expect(h.pipeline.metrics.decodes == 0)
    }
}

// MARK: - Helpers

/// Returns once `condition` holds for `model`, re-checking after each change to its observed
/// properties (no polling, no sleeping).
@MainActor
func waitUntil(_ model: FetchImage, _ condition: (FetchImage) -> Bool) async {
    while !condition(model) {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            withObservationTracking {
                _ = model.phase
                _ = model.isLoading
            } onChange: {
                continuation.resume()
            }
        }
    }
}

/// A decoder for an image of a fixed natural size that never upscales; records the decode
/// sizes it was asked for.
private final class NaturalSizeDecoder: ImageDecoding {
    let width: Int
    let height: Int
    private let requested = Mutex<[DecodeSize?]>([])

    init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }

    var requestedSizes: [DecodeSize?] { requested.withLock { $0 } }

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        requested.withLock { $0.append(context.options.size) }
        var (w, h) = (width, height)
        let limit: Int? = switch context.options.size {
        case nil: nil
        case .maxPixelSize(let n): n
        case .size(let tw, let th, _): max(tw, th)
        }
        if let limit, max(w, h) > limit {
            let factor = Double(limit) / Double(max(w, h))
            (w, h) = (max(1, Int((Double(w) * factor).rounded())), max(1, Int((Double(h) * factor).rounded())))
        }
        return ImageContainer(image: Bitmap(width: w, height: h, format: .rgb8, pixels: [UInt8](repeating: data.first ?? 0, count: w * h * 3)))
    }
}

/// A decoder that always fails.
private struct FailingDecoder: ImageDecoding {
    struct Failure: Error {}
    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer { throw Failure() }
}
