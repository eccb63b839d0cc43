import Foundation
import Observation
import Synchronization
import Testing
import Lumen
import LumenUI
import LumenTestSupport

/// The UI loader model (`FetchImage`) against its contract (the feed issue and DESIGN.md §2),
/// written from the contract rather than from the implementation: an independent second set
/// beside `FetchImageTests`.
@MainActor
@Suite(.timeLimit(.minutes(1)))
struct FetchImageContractTests {
    private static let bytesA = Data(repeating: 0x11, count: 40)
    private static let bytesB = Data(repeating: 0x77, count: 40)

    // MARK: - Visibility

    @Test func hidingBeforeTheBytesArriveThenShowingAgainLoadsTheImage() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100)
        await h.loader.waitForLoads(1)
        model.onDisappear()
        #expect(!model.isLoading)
        await h.loader.waitForCancellations(1) // nobody else needed it
        #expect(model.phase.image == nil && model.phase.error == nil) // a cancellation is not a failure
        h.loader.resume()
        model.onAppear()
        #expect(model.isLoading)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 128)
        #expect(h.loader.loadCount == 2)
        #expect(model.phase.error == nil)
    }

    @Test func hidingAndShowingWhileAPrefetchSharesTheDownloadDownloadsOnce() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let prefetcher = ImagePrefetcher(pipeline: h.pipeline)
        prefetcher.startPrefetching(with: [PipelineURLs.a])
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 50, height: 50)
        await h.loader.waitForLoads(1)
        model.onDisappear()
        model.onAppear()
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        await prefetcher.waitUntilIdle()
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
    }

    @Test func hidingAfterSuccessKeepsThePhaseAndShowingAgainDoesNoWork() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 60, height: 30)
        await waitUntil(model) { $0.phase.image != nil }
        model.onDisappear()
        #expect(model.phase.image?.width == 64)
        model.onAppear()
        #expect(!model.isLoading)
        #expect(model.phase.image?.width == 64)
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.decodes == 1)
    }

    @Test func aSizeChangeWhileHiddenIsDecodedFromTheHeldBytesOnShow() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 60, height: 30)
        await waitUntil(model) { $0.phase.image != nil }
        model.onDisappear()
        model.displaySize(width: 300, height: 30) // bucket 320
        #expect(!model.isLoading) // hidden: nothing starts
        model.onAppear()
        await waitUntil(model) { $0.phase.image?.width == 320 }
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.decodes == 2)
    }

    @Test func aFailureThenHideAndShowRetriesAndSucceeds() async throws {
        let h = PipelineHarness()
        h.loader.fail(PipelineURLs.a, statusCode: 500)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 64, height: 64)
        await waitUntil(model) { $0.phase.error != nil }
        #expect(model.phase.error?.code == .dataLoadingFailed)
        #expect(model.phase.error?.statusCode == 500)
        h.loader.removeFailure(for: PipelineURLs.a)
        model.displaySize(width: 100, height: 100) // layout alone does not retry
        #expect(!model.isLoading)
        model.onDisappear()
        #expect(model.phase.error != nil) // kept while hidden
        model.onAppear()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 128)
        #expect(h.loader.loadCount == 2)
    }

    // MARK: - Sizes

    @Test(arguments: [0.0, -10.0, Double.nan, Double.infinity])
    func aDegenerateSizeIsIgnored(bad: Double) async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await waitUntil(model) { !$0.isLoading } // the bytes are in; no size yet
        #expect(h.loader.loadCount == 1)
        model.displaySize(width: bad, height: 50)
        model.displaySize(width: 50, height: bad)
        model.displaySize(width: 50, height: 50, scale: bad)
        #expect(!model.isLoading)
        #expect(model.currentDisplaySize == nil)
        #expect(h.decoder.decodeCount == 0)

        model.displaySize(width: 50, height: 50, scale: 2) // 100 px → 128
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 128)

        model.displaySize(width: bad, height: bad) // ignored after success too
        #expect(!model.isLoading)
        #expect(model.currentDisplaySize == DisplaySize(width: 50, height: 50, scale: 2))
        #expect(model.phase.image?.width == 128)
    }

    @Test(arguments: [
        (100.0, 3.0, 320), (66.67, 3.0, 256), (21.0, 3.0, 64), (22.0, 3.0, 128), (199.0, 1.0, 256), (201.0, 1.0, 256),
    ])
    func displaySizeTimesScaleIsBucketedTo64(points: Double, scale: Double, expected: Int) async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: points, height: points / 2, scale: scale)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == expected)
        #expect(model.response?.request.thumbnail == .maxPixelSize(expected))
    }

    @Test func slotsOf199And201ShareOneDecodeAndOneCacheEntry() async throws {
        let h = PipelineHarness()
        let first = FetchImage(pipeline: h.pipeline)
        let second = FetchImage(pipeline: h.pipeline)
        first.load(ImageRequest(url: PipelineURLs.a))
        first.displaySize(width: 199, height: 100)
        await waitUntil(first) { $0.phase.image != nil }
        // Size first: see aBucketAlreadyInMemoryShownAfterLoadThenSizeDownloadsNothing for the
        // other order.
        second.displaySize(width: 201, height: 100)
        second.load(ImageRequest(url: PipelineURLs.a))
        await waitUntil(second) { $0.phase.image != nil }
        #expect(second.response?.cacheType == .memory)
        #expect(h.pipeline.metrics.decodes == 1)
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.cache.containsCachedImage(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(256))))
    }

    /// The order a view uses: `load` on appear, the size at layout. The memory cache already
    /// holds the image at this bucket (another cell showed it), so per the FetchImage docs
    /// ("an entry at the display size's bucket is shown at once … fetches nothing") no download
    /// should run — or at least the one started before the size was known should be dropped
    /// once the memory hit is shown.
    @Test func aBucketAlreadyInMemoryShownAfterLoadThenSizeDownloadsNothing() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(256)))
        #expect(h.loader.loadCount == 1)
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 201, height: 100) // bucket 256: in memory
        #expect(model.phase.image?.width == 256)
        #expect(model.response?.cacheType == .memory)
        #expect(!model.isLoading, "the memory hit is shown, yet the model still reports loading")
        await h.waitUntilIdle() // the model's download was dropped: nothing is left subscribed
        h.loader.resume()
        #expect(h.pipeline.metrics.fetch.completed == 1, "the image in memory was downloaded again")
        #expect(model.phase.image?.width == 256)
    }

    /// Worse case of the above: the redundant download fails, and the image that sits in the
    /// memory cache at the display bucket is never shown.
    @Test func aBucketAlreadyInMemoryIsShownEvenIfTheRedundantDownloadFails() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(256)))
        h.loader.fail(PipelineURLs.a, statusCode: 503) // e.g. offline now
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 201, height: 100)
        await waitUntil(model) { !$0.isLoading }
        #expect(model.phase.image?.width == 256, "phase is \(model.phase) although the image is in memory")
    }

    /// Same as above with the size given first: passes, showing the problem is order-dependent.
    @Test func aBucketAlreadyInMemoryShownAfterSizeThenLoadDownloadsNothing() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(256)))
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 201, height: 100)
        model.load(ImageRequest(url: PipelineURLs.a))
        #expect(model.phase.image?.width == 256)
        #expect(!model.isLoading)
        #expect(h.loader.loadCount == 1)
    }

    @Test func aModelLoadedWhileHiddenFetchesOnlyOnAppear() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.onDisappear()
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 64, height: 64)
        #expect(!model.isLoading)
        #expect(h.pipeline.metrics.liveRequests == 0)
        model.onAppear()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.loader.loadCount == 1)
    }

    @Test func theDecodeSizeIsNeverAboveTheNaturalSizeAtScale3() async throws {
        let decoder = CappingDecoder(natural: 100)
        let h = PipelineHarness { $0.decoder = decoder }
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100, scale: 3) // 300 px → 320, image is 100
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 100)
        #expect(model.naturalMaxPixelSize == 100)
        model.displaySize(width: 200, height: 200, scale: 3) // bigger again: still the natural size
        #expect(!model.isLoading)
        #expect(decoder.requestedSizes.count == 1)
        #expect(h.loader.loadCount == 1)
    }

    @Test func fetchingStartsBeforeTheSizeAndDecodingWaitsForBoth() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        await h.loader.waitForLoads(1) // no size given yet
        model.displaySize(width: 100, height: 100)
        #expect(h.decoder.decodeCount == 0) // bytes not in yet
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(h.decoder.decodeCount == 1)
    }

    @Test func sizeChangesWhileDownloadingNeverCancelItAndDecodeOnceForTheLatest() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100)
        await h.loader.waitForLoads(1)
        model.displaySize(width: 300, height: 300)
        model.displaySize(width: 30, height: 30)
        #expect(model.isLoading)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 64)
        #expect(h.loader.loadCount == 1)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.decoder.decodeCount == 1)
    }

    @Test func aSizeChangeAfterSuccessReDecodesWithoutDownloadingAgain() async throws {
        let h = PipelineHarness()
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 50, height: 50)
        await waitUntil(model) { $0.phase.image != nil }
        model.displaySize(width: 500, height: 500) // a larger bucket than any decode
        #expect(model.phase.image?.width == 64) // the old image stays until the new one is ready
        await waitUntil(model) { $0.phase.image?.width == 512 }
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.networkRequestsStarted == 1)
    }

    /// A second model showing the same image bigger, after a first one learned the image is
    /// smaller than both slots: as documented, a size larger than any decode in memory needs
    /// the bytes again (downloaded: this pipeline has no disk cache), and the result is the
    /// natural size.
    @Test func aSecondModelLargerThanAnyDecodeInMemoryFetchesTheBytesAgain() async throws {
        let decoder = CappingDecoder(natural: 100)
        let h = PipelineHarness { $0.decoder = decoder }
        let first = FetchImage(pipeline: h.pipeline)
        first.load(ImageRequest(url: PipelineURLs.a))
        first.displaySize(width: 300, height: 300) // 320 bucket, natural 100
        await waitUntil(first) { $0.phase.image != nil }
        let second = FetchImage(pipeline: h.pipeline)
        second.load(ImageRequest(url: PipelineURLs.a))
        second.displaySize(width: 500, height: 500)
        await waitUntil(second) { $0.phase.image != nil }
        #expect(second.phase.image?.width == 100)
        #expect(h.loader.loadCount == 2)
    }

    // MARK: - Changing the URL

    @Test func changingTheURLWhileLoadingShowsOnlyTheNewImage() async throws {
        let h = PipelineHarness()
        h.loader.serve(Self.bytesA, for: PipelineURLs.a)
        h.loader.serve(Self.bytesB, for: PipelineURLs.b)
        h.loader.isSuspended = true
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 64, height: 64)
        model.url = PipelineURLs.a
        await h.loader.waitForLoads(1)
        model.url = PipelineURLs.b
        #expect(model.request?.url == PipelineURLs.b)
        await h.loader.waitForCancellations(1) // a's download, needed by nobody else
        await h.loader.waitForLoads(2)
        h.loader.resume()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.pixels.first == 0x77)
        #expect(model.response?.request.url == PipelineURLs.b)
        #expect(h.loader.loadCount(for: PipelineURLs.a) == 1)
    }

    @Test func changingTheURLWhileTheOldImageDecodesNeverShowsTheOldImage() async throws {
        let decoder = GateDecoder()
        let h = PipelineHarness { $0.decoder = decoder }
        h.loader.serve(Self.bytesA, for: PipelineURLs.a)
        h.loader.serve(Self.bytesB, for: PipelineURLs.b)
        let model = FetchImage(pipeline: h.pipeline)
        model.displaySize(width: 64, height: 64)
        model.url = PipelineURLs.a
        await decoder.waitForDecodes(1) // a's decode has started and is held
        model.url = PipelineURLs.b
        #expect(model.phase.image == nil)
        await decoder.waitForDecodes(2)
        decoder.open()
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.pixels.first == 0x77)
        await h.waitUntilIdle()
        #expect(model.phase.image?.pixels.first == 0x77)
    }
}

// MARK: - Decoders for these tests

/// Decodes any bytes as an image of `natural`×`natural` pixels, downscaled (never upscaled) to
/// the requested max pixel size; records the requested sizes.
private final class CappingDecoder: ImageDecoding {
    let natural: Int
    private let requested = Mutex<[DecodeSize?]>([])
    init(natural: Int) { self.natural = natural }
    var requestedSizes: [DecodeSize?] { requested.withLock { $0 } }

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        requested.withLock { $0.append(context.options.size) }
        var side = natural
        switch context.options.size {
        case .maxPixelSize(let n)?: side = min(natural, max(1, n))
        case .size(let w, let ht, _)?: side = min(natural, max(1, max(w, ht)))
        case nil: break
        }
        return ImageContainer(image: Bitmap(width: side, height: side, format: .rgb8,
                                            pixels: [UInt8](repeating: data.first ?? 0, count: side * side * 3)))
    }
}

/// A decoder whose decodes wait (on their worker thread) until `open()`; counts started decodes
/// and lets a test wait for a count.
private final class GateDecoder: ImageDecoding, @unchecked Sendable {
    private struct State {
        var isOpen = false
        var started = 0
        var waiters: [(Int, CheckedContinuation<Void, Never>)] = []
    }
    private let state = Mutex(State())
    private let condition = NSCondition()
    private let inner = TrivialImageDecoder()

    func open() {
        condition.lock()
        state.withLock { $0.isOpen = true }
        condition.broadcast()
        condition.unlock()
    }

    func waitForDecodes(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state in
                if state.started >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        let ready = state.withLock { state in
            state.started += 1
            let ready = state.waiters.filter { $0.0 <= state.started }.map(\.1)
            state.waiters.removeAll { $0.0 <= state.started }
            return ready
        }
        ready.forEach { $0.resume() }
        condition.lock()
        while !state.withLock({ $0.isOpen }) { condition.wait() }
        condition.unlock()
        return try inner.decode(data, context: context)
    }
}
