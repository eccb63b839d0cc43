import Foundation
import Lumen
import LumenTestSupport
import Testing

/// `Configuration.isDecodeSizeBucketingEnabled`: decode sizes a few pixels apart share one
/// decode and one memory-cache entry for every caller, never decoded above the natural size.
@Suite(.timeLimit(.minutes(1)))
struct PipelineDecodeSizeBucketTests {
    static let url = URL(string: "https://example.com/photo.jpg")!

    /// A pipeline over a mock loader serving a `width`×`height` JPEG at ``url``, decoding with
    /// the default decoder, with its own memory cache.
    static func pipeline(bucketing: Bool, width: Int = 512, height: Int = 384) throws -> (ImagePipeline, ImageCache) {
        let loader = MockDataLoader()
        loader.serve(try PipelineDecodingTests.photo(width: width, height: height).encode(as: .jpeg(quality: 90)), for: url)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        let cache = ImageCache()
        configuration.imageCache = cache
        configuration.isDecodeSizeBucketingEnabled = bucketing
        return (ImagePipeline(configuration: configuration), cache)
    }

    static func request(_ size: DecodeSize) -> ImageRequest {
        ImageRequest(url: url, thumbnail: size)
    }

    /// 199 and 201 pixels, one after the other: with bucketing the second is a memory hit on
    /// the first's 256-pixel entry; without, each has its own decode and entry.
    @Test(arguments: [false, true])
    func nearlyEqualSizesShareOneDecodeAndOneEntryOnlyWhenBucketing(bucketing: Bool) async throws {
        let (pipeline, cache) = try Self.pipeline(bucketing: bucketing)
        let first = try await pipeline.image(for: Self.request(.maxPixelSize(199)))
        let second = try await pipeline.image(for: Self.request(.maxPixelSize(201)))
        #expect(pipeline.metrics.decodes == (bucketing ? 1 : 2))
        #expect(cache.totalCount == (bucketing ? 1 : 2))
        #expect(first.image.width == (bucketing ? 256 : 199))
        #expect(second.image.width == (bucketing ? 256 : 201))
        #expect(second.cacheType == (bucketing ? .memory : nil))
        #expect(second.request.thumbnail == (bucketing ? .maxPixelSize(256) : .maxPixelSize(201)))
    }

    /// Started together through `imageTask(with:)`: with bucketing the second joins the first's
    /// decode (or hits its entry); without, two decodes.
    @Test(arguments: [false, true])
    func concurrentTasksAtNearlyEqualSizesShareOneDecodeOnlyWhenBucketing(bucketing: Bool) async throws {
        let (pipeline, cache) = try Self.pipeline(bucketing: bucketing)
        let tasks = [199, 201].map { pipeline.imageTask(with: Self.request(.maxPixelSize($0))) }
        let widths = try await tasks.asyncMap { try await $0.response.image.width }
        #expect(widths == (bucketing ? [256, 256] : [199, 201]) as [Int])
        #expect(pipeline.metrics.decodes == (bucketing ? 1 : 2))
        #expect(cache.totalCount == (bucketing ? 1 : 2))
    }

    /// A bucket above the image's natural size decodes it at its natural size, never upscaled.
    @Test(arguments: [false, true])
    func aBucketAboveTheNaturalSizeDecodesAtTheNaturalSize(bucketing: Bool) async throws {
        let (pipeline, _) = try Self.pipeline(bucketing: bucketing, width: 220, height: 165)
        let response = try await pipeline.image(for: Self.request(.maxPixelSize(201)))
        #expect(response.image.width == (bucketing ? 220 : 201)) // the bucket is 256
        if bucketing { #expect(response.image.height == 165) }
    }

    /// An aspect-fill target: its longest side bucketed, its other side scaled by the same
    /// factor, so that 199×100 and 201×101 share one decode at 256×129.
    @Test(arguments: [false, true])
    func aspectFillTargetsKeepTheirShapeAndShareOneDecodeWhenBucketing(bucketing: Bool) async throws {
        let (pipeline, cache) = try Self.pipeline(bucketing: bucketing)
        let a = try await pipeline.image(for: Self.request(.size(width: 199, height: 100, contentMode: .aspectFill)))
        let b = try await pipeline.image(for: Self.request(.size(width: 201, height: 101, contentMode: .aspectFill)))
        #expect([a.image.width, a.image.height] == (bucketing ? [256, 129] : [199, 100]) as [Int])
        #expect([b.image.width, b.image.height] == (bucketing ? [256, 129] : [201, 101]) as [Int])
        #expect(pipeline.metrics.decodes == (bucketing ? 1 : 2))
        #expect(cache.totalCount == (bucketing ? 1 : 2))
    }

    /// The cache looked up by request and the prefetcher round as loading does: 199 and 201
    /// pixels in one batch are one prefetch, and its entry answers lookups and loads in the
    /// bucket.
    @Test(arguments: [false, true])
    func cacheLookupsAndPrefetchesUseTheBucket(bucketing: Bool) async throws {
        let (pipeline, _) = try Self.pipeline(bucketing: bucketing)
        let outcome = await pipeline.prefetch([Self.request(.maxPixelSize(199)), Self.request(.maxPixelSize(201))])
        #expect(outcome.succeeded == (bucketing ? 1 : 2))
        #expect(pipeline.metrics.decodes == (bucketing ? 1 : 2))
        #expect(pipeline.cache.containsCachedImage(for: Self.request(.maxPixelSize(250))) == bucketing)
        #expect((pipeline.cache[Self.request(.maxPixelSize(193))] != nil) == bucketing)
        let response = try await pipeline.image(for: Self.request(.maxPixelSize(240)))
        #expect(response.cacheType == (bucketing ? .memory : nil))
        #expect(pipeline.metrics.decodes == (bucketing ? 1 : 3))
        // A later prefetch at another size in the bucket is skipped as cached.
        let again = await pipeline.prefetch([Self.request(.maxPixelSize(230))])
        #expect(again.succeeded == (bucketing ? 0 : 1))
        #expect(pipeline.metrics.decodes == (bucketing ? 1 : 4))
    }

    /// Storing and removing by request use the bucket too.
    @Test func storingAndRemovingByRequestUseTheBucket() async throws {
        let (pipeline, cache) = try Self.pipeline(bucketing: true)
        let container = ImageContainer(image: PipelineDecodingTests.photo(width: 8, height: 8))
        pipeline.cache[Self.request(.maxPixelSize(199))] = container
        #expect(pipeline.cache[Self.request(.maxPixelSize(256))] != nil)
        #expect(cache.totalCount == 1)
        pipeline.cache.removeAll(for: Self.request(.maxPixelSize(201)))
        #expect(cache.totalCount == 0)
    }

    /// Sizes already on a bucket, and the default, are left exactly as given.
    @Test func bucketingIsOffByDefaultAndKeepsBucketSizes() async throws {
        #expect(ImagePipeline.Configuration().isDecodeSizeBucketingEnabled == false)
        let (pipeline, _) = try Self.pipeline(bucketing: true)
        let response = try await pipeline.image(for: Self.request(.maxPixelSize(128)))
        #expect(response.image.width == 128)
        #expect(response.request.thumbnail == .maxPixelSize(128))
    }
}

private extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
