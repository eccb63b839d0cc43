import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import Lumen
import LumenTestSupport

/// The conveniences the article "Coming from Nuke" lists: Nuke's spellings that fit Lumen's
/// design, each doing what its Nuke counterpart does.
@Suite(.timeLimit(.minutes(1)))
struct NukeConvenienceTests {
    @Test func theClosureInitialiserChangesTheDefaultConfiguration() {
        let loader = MockDataLoader()
        let pipeline = ImagePipeline {
            $0.dataLoader = loader
            $0.isTaskCoalescingEnabled = false
            $0.imageCache = nil
        }
        #expect(pipeline.configuration.isTaskCoalescingEnabled == false)
        #expect(pipeline.configuration.imageCache == nil)
        #expect(pipeline.configuration.dataLoader as? MockDataLoader === loader)
        // Everything not touched keeps its default.
        #expect(pipeline.configuration.maximumResponseDataSize == ImagePipeline.Configuration().maximumResponseDataSize)
    }

    @Test func aRequestWithoutAURLFailsAsABadURLWithoutLoading() async throws {
        let h = PipelineHarness()
        let text: String? = nil
        let request = ImageRequest(url: text.flatMap(URL.init(string:)))
        #expect(request.url == nil && request.urlRequest == nil)
        let error = try #require(await errorThrown { try await h.pipeline.image(for: request) } as? ImagePipeline.Error)
        #expect(error.code == .dataLoadingFailed)
        #expect((error.underlyingError as? URLError)?.code == .badURL)
        #expect(h.loader.loadCount == 0)
        // Never cached: a second try fails the same way, again without a load.
        #expect(await errorThrown { try await h.pipeline.image(for: request) } != nil)
        #expect(h.pipeline.metrics.fetch.failed == 2)
    }

    @Test func anOptionalURLThatIsThereLoadsLikeAPlainOne() async throws {
        let h = PipelineHarness()
        let optional: URL? = PipelineURLs.a
        let request = ImageRequest(url: optional, thumbnail: .maxPixelSize(10))
        #expect(request.url == PipelineURLs.a)
        _ = try await h.pipeline.image(for: request)
        // Same keys as the non-optional form: this one is a memory hit.
        let again = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(10)))
        #expect(again.cacheType == .memory)
        #expect(h.loader.loadCount == 1)
    }

    @Test func resizeTakesACGSizeInPixelsRoundedUp() {
        let fromCGSize = ImageProcessors.Resize(size: CGSize(width: 100.2, height: 50), contentMode: .aspectFit, crop: false)
        let fromPixels = ImageProcessors.Resize(size: (width: 101, height: 50), contentMode: .aspectFit)
        #expect(fromCGSize == fromPixels)
        #expect(ImageProcessors.Resize(size: CGSize(width: 64, height: 64)) == ImageProcessors.Resize(size: (width: 64, height: 64)))
    }

    @Test func withDataCacheMakesADiskCacheByName() throws {
        let name = "lumen-nuke-convenience-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(at: DataCache.defaultDirectory(name: name)) }
        let configuration = ImagePipeline.Configuration.withDataCache(name: name, sizeLimit: 1 << 20)
        let cache = try #require(configuration.dataCache as? DataCache)
        #expect(cache.sizeLimit == 1 << 20)
        #expect(cache.directory.standardizedFileURL == DataCache.defaultDirectory(name: name).standardizedFileURL)
        let defaults = ImagePipeline.Configuration.withDataCache(name: name)
        #expect((defaults.dataCache as? DataCache)?.sizeLimit == DataCache(name: name).sizeLimit)
    }
}
