import Foundation
import Testing
@testable import Lumen
@testable import LumenUI
import LumenTestSupport

/// ``FetchImage`` when the memory cache, not the model, has the pixels: a prefetched image is
/// shown at the display size without a second download, and a size change after a memory hit
/// is made from what memory holds when it covers the new size. The real decoder, a 400×300
/// PNG (``PipelineDerivationTests/photo``).
@MainActor
@Suite(.timeLimit(.minutes(1)))
struct FetchImageWithoutBytesTests {
    typealias Photo = PipelineDerivationTests

    @Test func aPrefetchedImageIsShownAtTheDisplaySizeWithoutASecondDownload() async throws {
        let (loader, pipeline) = Photo.pipeline()
        let prefetcher = ImagePrefetcher(pipeline: pipeline)
        prefetcher.startPrefetching(with: [Photo.url])
        await prefetcher.waitUntilIdle()

        let model = FetchImage(pipeline: pipeline)
        model.load(ImageRequest(url: Photo.url))
        #expect(!model.isLoading) // the size is unknown and memory has the pixels: nothing to fetch
        model.displaySize(width: 100, height: 100) // the 128 bucket
        await waitUntil(model) { $0.phase.image != nil }
        let image = try #require(model.phase.image)
        #expect(image.width == 128 && image.height == 96)
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.resampledFromMemory == 1)
        #expect(pipeline.metrics.decodes == 1) // the prefetch's
    }

    /// A model showing an image from memory (it never fetched the bytes) shrinks it from what
    /// it shows, and a size at or above the natural size needs nothing at all.
    @Test func aSizeChangeAfterAMemoryHitIsMadeFromMemoryWhenItCovers() async throws {
        let (loader, pipeline) = Photo.pipeline()
        let first = FetchImage(pipeline: pipeline)
        first.load(ImageRequest(url: Photo.url))
        first.displaySize(width: 200, height: 200) // 256 bucket
        await waitUntil(first) { $0.phase.image != nil }

        let second = FetchImage(pipeline: pipeline)
        second.displaySize(width: 200, height: 150)
        second.load(ImageRequest(url: Photo.url))
        #expect(second.phase.image?.width == 256) // from memory, synchronously
        second.displaySize(width: 50, height: 50) // 64 bucket: smaller than the image shown
        await waitUntil(second) { $0.phase.image?.width == 64 }
        #expect(second.phase.image?.height == 48)
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.resampledFromMemory == 1)

        // Past the natural size: a memory entry made at a bucket above 400 px is the whole
        // image, so the model learns the natural size and larger sizes change nothing.
        let third = FetchImage(pipeline: pipeline)
        first.displaySize(width: 1000, height: 1000) // first holds the bytes: decodes 400×300
        await waitUntil(first) { $0.phase.image?.width == 400 }
        third.displaySize(width: 1000, height: 1000)
        third.load(ImageRequest(url: Photo.url))
        #expect(third.phase.image?.width == 400)
        #expect(third.naturalMaxPixelSize == 400)
        third.displaySize(width: 3000, height: 3000)
        #expect(!third.isLoading)
        #expect(loader.loadCount == 1)
    }

    /// A larger size than any decode in memory needs the bytes: from the disk cache when the
    /// pipeline has one, else from the network (the documented limit of a memory hit).
    @Test(arguments: [false, true])
    func growingPastWhatMemoryHoldsNeedsTheBytes(withDiskCache: Bool) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-fetchimage-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (loader, pipeline) = Photo.pipeline {
            if withDiskCache { $0.dataCache = DataCache(name: "test", directory: directory) }
        }
        let first = FetchImage(pipeline: pipeline)
        first.load(ImageRequest(url: Photo.url))
        first.displaySize(width: 50, height: 50)
        await waitUntil(first) { $0.phase.image != nil }
        if let cache = pipeline.configuration.dataCache as? DataCache { await cache.flush() }

        let second = FetchImage(pipeline: pipeline)
        second.displaySize(width: 50, height: 50)
        second.load(ImageRequest(url: Photo.url))
        #expect(second.phase.image?.width == 64)
        second.displaySize(width: 200, height: 200)
        await waitUntil(second) { $0.phase.image?.width == 256 }
        #expect(loader.loadCount == (withDiskCache ? 1 : 2))
    }

    /// A decode made from memory for one size must not replace the image once the size has
    /// moved on: `backToShown`, back to the size shown; else to a bucket the memory cache
    /// holds. Either way the 64-px decode is stale when it ends.
    @Test(arguments: [true, false])
    func aStaleDerivedDecodeDoesNotReplaceTheImage(backToShown: Bool) async throws {
        let decoding = WorkQueue(name: "test.decode", maxConcurrentCount: 1, execution: .threads)
        let (_, pipeline) = Photo.pipeline { $0.decodingQueue = decoding }
        let first = FetchImage(pipeline: pipeline) // leaves the 128 and 256 buckets in memory
        first.load(ImageRequest(url: Photo.url))
        first.displaySize(width: 100, height: 100)
        await waitUntil(first) { $0.phase.image?.width == 128 }
        first.displaySize(width: 200, height: 200)
        await waitUntil(first) { $0.phase.image?.width == 256 }

        let second = FetchImage(pipeline: pipeline)
        second.displaySize(width: 200, height: 200)
        second.load(ImageRequest(url: Photo.url))
        #expect(second.phase.image?.width == 256) // from memory, no bytes
        decoding.isSuspended = true
        second.displaySize(width: 50, height: 50) // 64: resampled from the image shown
        #expect(second.isLoading)
        let wanted = backToShown ? 256 : 128
        second.displaySize(width: Double(wanted) - 20, height: Double(wanted) - 20)
        #expect(second.phase.image?.width == wanted)
        decoding.isSuspended = false
        await waitUntil(second) { !$0.isLoading }
        #expect(second.phase.image?.width == wanted) // not the stale 64-px decode
    }
}
