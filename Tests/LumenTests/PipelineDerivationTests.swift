import Foundation
import Testing
@testable import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A request at a decode size whose source's full-size image is already in memory (a prefetch
/// of the URL, a detail view) is made by resampling that image: no fetch, no decode, and the
/// image a decode at that size would give.
@Suite(.timeLimit(.minutes(1)))
struct PipelineDerivationTests {
    static let url = URL(string: "https://example.com/photo.png")!

    /// A 400×300 RGB gradient as PNG (lossless).
    static let photo: Data = {
        let (w, h) = (400, 300)
        var pixels = [UInt8](repeating: 0, count: w * h * 3)
        for y in 0..<h {
            for x in 0..<w {
                let i = (y * w + x) * 3
                pixels[i] = UInt8(x * 255 / (w - 1))
                pixels[i + 1] = UInt8(y * 255 / (h - 1))
                pixels[i + 2] = UInt8((x + y) % 256)
            }
        }
        return try! Bitmap(width: w, height: h, format: .rgb8, pixels: pixels).encode(as: .png)
    }()

    /// A pipeline with the real decoder over a mock loader serving ``photo``.
    static func pipeline(configure: (inout ImagePipeline.Configuration) -> Void = { _ in }) -> (MockDataLoader, ImagePipeline) {
        let loader = MockDataLoader()
        loader.serve(photo, for: url)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configure(&configuration)
        return (loader, ImagePipeline(configuration: configuration))
    }

    static func meanDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
        guard a.pixels.count == b.pixels.count, !a.pixels.isEmpty else { return .infinity }
        return Double(zip(a.pixels, b.pixels).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }) / Double(a.pixels.count)
    }

    static func decoded(at size: DecodeSize) throws -> Bitmap {
        try ImageDecoder.decode(photo, options: DecodeOptions(size: size)).bitmap
    }

    @Test(arguments: [DecodeSize.maxPixelSize(100), .size(width: 64, height: 64, contentMode: .aspectFill),
                      .size(width: 120, height: 30, contentMode: .aspectFit), .maxPixelSize(1000)])
    func aSizedRequestIsResampledFromTheFullSizeImage(size: DecodeSize) async throws {
        let (loader, pipeline) = Self.pipeline()
        let full = try await pipeline.image(for: Self.url)
        #expect(full.image.width == 400)
        let sized = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: size))
        // The geometry a decode at that size gives, and its pixels to within the rounding of
        // the PNG decoder's own reduction.
        let decoded = try Self.decoded(at: size)
        #expect(sized.image.width == decoded.width && sized.image.height == decoded.height)
        #expect(Self.meanDifference(sized.image, decoded) < 1.5)
        #expect(sized.cacheType == .memory)
        #expect(loader.loadCount == 1)
        let metrics = pipeline.metrics
        #expect(metrics.decodes == 1 && metrics.resampledFromMemory == 1)
        #expect(metrics.fetch.started == 1)
        // Stored under its own key: asking again is a plain memory hit.
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: size))
        #expect(pipeline.metrics.resampledFromMemory == 1)
    }

    @Test func processorsRunOnTheResampledImage() async throws {
        let (loader, pipeline) = Self.pipeline()
        _ = try await pipeline.image(for: Self.url)
        let request = ImageRequest(url: Self.url, processors: [.grayscale], thumbnail: .maxPixelSize(80))
        let response = try await pipeline.image(for: request)
        let expected = try ImageProcessors.Grayscale().process(try Self.decoded(at: .maxPixelSize(80)))
        #expect(response.image.width == expected.width && response.image.format == expected.format)
        #expect(Self.meanDifference(response.image, expected) < 1.5)
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.resampledFromMemory == 1 && pipeline.metrics.processorApplications == 1)
    }

    /// Only the same source answers: other credentials are another image, and a request that
    /// may not read the memory cache (or a processed full-size image) fetches as before.
    @Test func otherCredentialsNoMemoryReadsAndProcessedImagesAreNotUsed() async throws {
        let (loader, pipeline) = Self.pipeline()
        var signed = URLRequest(url: Self.url)
        signed.setValue("Bearer one", forHTTPHeaderField: "Authorization")
        _ = try await pipeline.image(for: ImageRequest(urlRequest: signed))
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(100)))
        #expect(loader.loadCount == 2)

        _ = try await pipeline.image(for: ImageRequest(url: Self.url, processors: [.grayscale]))
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(50)))
        #expect(loader.loadCount == 4) // only the grayscale full-size image was there

        _ = try await pipeline.image(for: Self.url)
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, options: [.disableMemoryCacheReads], thumbnail: .maxPixelSize(60)))
        #expect(loader.loadCount == 6)
        #expect(pipeline.metrics.resampledFromMemory == 0)
    }

    @Test func aPrefetchedURLIsDownloadedOnceForAnySize() async throws {
        let (loader, pipeline) = Self.pipeline()
        let prefetcher = ImagePrefetcher(pipeline: pipeline)
        prefetcher.startPrefetching(with: [Self.url])
        await prefetcher.waitUntilIdle()
        #expect(loader.loadCount == 1)
        for size in [256, 128, 64] {
            let response = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(size)))
            #expect(max(response.image.width, response.image.height) == size)
        }
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.resampledFromMemory == 3)
    }

    /// A configured decoder that upscales (a custom decoder decides its output): the image for
    /// a request must not depend on whether the full-size image happens to be in memory, so
    /// only the default decoder's output is made by resampling.
    struct UpscalingDecoder: ImageDecoding {
        func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
            var options = context.options
            options.allowsUpscaling = true
            let decoded = try ImageDecoder.decode(data, options: options)
            return ImageContainer(image: decoded.bitmap, format: decoded.statistics.format)
        }
    }

    @Test func theConfiguredDecoderStillDecidesTheImage() async throws {
        let (_, cold) = Self.pipeline { $0.decoder = UpscalingDecoder() }
        let request = ImageRequest(url: Self.url, thumbnail: .maxPixelSize(800))
        let expected = try await cold.image(for: request).image
        #expect(expected.width == 800) // what the decoder gives

        let (_, warm) = Self.pipeline { $0.decoder = UpscalingDecoder() }
        _ = try await warm.image(for: Self.url) // the full-size image is now in memory
        let derived = try await warm.image(for: request).image
        #expect(derived.width == expected.width && derived.height == expected.height)
    }

    /// A request that may not read the memory cache must not get a memory-derived image by
    /// joining a derived decode (the decode key ignores `.disableMemoryCacheReads`).
    @Test func aRequestThatMayNotReadMemoryDoesNotJoinADerivedDecode() async throws {
        let decoding = WorkQueue(name: "test.decode", maxConcurrentCount: 1, execution: .threads)
        let (loader, pipeline) = Self.pipeline { $0.decodingQueue = decoding }
        _ = try await pipeline.image(for: Self.url)
        decoding.isSuspended = true
        let derived = pipeline.imageTask(with: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(100)))
        let fresh = pipeline.imageTask(with: ImageRequest(url: Self.url, options: [.disableMemoryCacheReads], thumbnail: .maxPixelSize(100)))
        decoding.isSuspended = false
        _ = try await derived.response
        let response = try await fresh.response
        #expect(response.cacheType != .memory)
        #expect(loader.loadCount == 2)
    }

    /// "No fetch, no decode": with an encoding disk policy a derived stage does not read the
    /// processed entry on the data-loading queue (behind up to 6 downloads) first.
    @Test func aDerivedDecodeDoesNotWaitForTheDataLoadingQueue() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-derivation-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (_, pipeline) = Self.pipeline {
            $0.dataCache = DataCache(name: "test", directory: directory)
            $0.dataCachePolicy = .storeEncodedImages
        }
        _ = try await pipeline.image(for: Self.url)
        let loading = pipeline.configuration.dataLoadingQueue
        loading.isSuspended = true
        defer { loading.isSuspended = false }
        let task = pipeline.imageTask(with: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(100)))
        #expect(loading.pendingCount == 0)
        task.cancel()
    }

    /// The pipeline's look for a full-size image is not a lookup of the ``ImageCache``: the
    /// cache's own counters see only the request's lookup.
    @Test func theFullSizeLookupIsNotCountedByTheImageCache() async throws {
        let (_, pipeline) = Self.pipeline()
        let cache = try #require(pipeline.configuration.imageCache as? ImageCache)
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(100)))
        let layer = pipeline.metrics.memoryCache
        #expect(cache.metrics.misses == layer.lookups - layer.hits)
    }

    /// The same for a processing stage that started from a processor prefix the memory cache
    /// held: a request that may not read memory gets its own chain (and fetches).
    @Test func aRequestThatMayNotReadMemoryDoesNotJoinAStageStartedFromMemory() async throws {
        let processing = WorkQueue(name: "test.process", maxConcurrentCount: 1, execution: .threads)
        let (loader, pipeline) = Self.pipeline { $0.processingQueue = processing }
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, processors: [.grayscale]))
        let processors: [any ImageProcessing] = [.grayscale, ImageProcessors.Crop(x: 0, y: 0, width: 10, height: 10)]
        processing.isSuspended = true
        let fromPrefix = pipeline.imageTask(with: ImageRequest(url: Self.url, processors: processors))
        let fresh = pipeline.imageTask(with: ImageRequest(url: Self.url, processors: processors, options: [.disableMemoryCacheReads]))
        processing.isSuspended = false
        _ = try await fromPrefix.response
        _ = try await fresh.response
        #expect(loader.loadCount == 2)
        #expect(pipeline.metrics.process.joined == 0)
    }

    /// An entry that keeps its encoded bytes (an animated image stored by hand) is not a still
    /// to resample: the request fetches and decodes as usual.
    @Test func anEntryKeepingItsBytesIsNotResampled() async throws {
        let (loader, pipeline) = Self.pipeline()
        let full = try ImageDecoder.decode(Self.photo).bitmap
        pipeline.cache[ImageRequest(url: Self.url)] = ImageContainer(image: full, format: .png, data: Self.photo)
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(100)))
        #expect(loader.loadCount == 1)
        #expect(pipeline.metrics.resampledFromMemory == 0 && pipeline.metrics.decodes == 1)
    }

    /// Without a memory cache nothing is derived (and nothing breaks).
    @Test func withoutAMemoryCacheEveryRequestFetches() async throws {
        let (loader, pipeline) = Self.pipeline { $0.imageCache = nil }
        _ = try await pipeline.image(for: Self.url)
        _ = try await pipeline.image(for: ImageRequest(url: Self.url, thumbnail: .maxPixelSize(100)))
        #expect(loader.loadCount == 2)
        #expect(pipeline.metrics.resampledFromMemory == 0)
    }
}
