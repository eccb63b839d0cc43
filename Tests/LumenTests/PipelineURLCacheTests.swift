import Foundation
import Testing
import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// With a disk cache the pipeline's bytes are cached once, by Lumen: `URLSession`'s own
/// `URLCache` neither answers nor stores them, even when the loader's session has one.
@Suite(.timeLimit(.minutes(1)))
struct PipelineURLCacheTests {
    private static let body = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 11) })

    /// A loader whose session has an in-memory `URLCache`, and that cache.
    private func loaderWithURLCache() -> (DataLoader, URLCache) {
        let urlCache = URLCache(memoryCapacity: 8 << 20, diskCapacity: 0, diskPath: nil)
        let configuration = DataLoader.defaultConfiguration
        configuration.urlCache = urlCache
        return (DataLoader(configuration: configuration), urlCache)
    }

    @Test func dataLoaderHasNoURLCacheByDefault() {
        #expect(DataLoader().session.configuration.urlCache == nil)
        #expect(DataLoader.defaultConfiguration.urlCache == nil)
    }

    /// A response planted in the session's `URLCache` by hand, for `url`.
    private func plant(_ urlCache: URLCache, for url: URL) {
        let planted = CachedURLResponse(
            response: HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1",
                                      headerFields: ["Cache-Control": "max-age=3600"])!,
            data: Data("planted".utf8))
        urlCache.storeCachedResponse(planted, for: URLRequest(url: url))
    }

    /// The control for the test below: without a disk cache the session's `URLCache` is the
    /// cache, and a response planted there answers without a request to the server. (On
    /// Linux, FoundationNetworking never stores responses itself, so the storing half of the
    /// rule is shown only by `DataLoader`'s delegate declining it.)
    @Test func withoutADiskCacheTheSessionsURLCacheAnswers() async throws {
        let server = try LoopbackServer()
        server.serve(path: "/a.jpg", data: Self.body, etag: "\"v1\"", cacheControl: "max-age=3600")
        let url = server.url(for: "/a.jpg")
        let (loader, urlCache) = loaderWithURLCache()
        plant(urlCache, for: url)
        let h = PipelineCacheHarness(disk: false) { $0.dataLoader = loader }
        defer { h.cleanUp() }

        // The harness's decoder makes a bitmap as wide as the data (at most 64 pixels).
        #expect(try await h.pipeline.image(for: url).image.width == "planted".utf8.count)
        #expect(server.requestCount(for: "/a.jpg") == 0)
    }

    @Test func withADiskCacheTheSessionsURLCacheNeitherStoresNorAnswers() async throws {
        let server = try LoopbackServer()
        server.serve(path: "/a.jpg", data: Self.body, etag: "\"v1\"", cacheControl: "max-age=3600")
        let url = server.url(for: "/a.jpg")
        let (loader, urlCache) = loaderWithURLCache()
        let h = PipelineCacheHarness { $0.dataLoader = loader }
        defer { h.cleanUp() }

        _ = try await h.pipeline.image(for: url)
        await h.flush()
        #expect(urlCache.cachedResponse(for: URLRequest(url: url)) == nil)
        #expect(try #require(h.dataCache).containsData(for: DataCache.key(imageID: url.absoluteString)))

        // Planted in the URLCache by hand, a response is still not what answers: with both of
        // Lumen's layers emptied, the pipeline goes to the server.
        plant(urlCache, for: url)
        h.pipeline.cache.removeAll()
        let again = try await h.pipeline.image(for: url)
        #expect(again.cacheType == nil)
        // Ignoring the local cache is not asking proxies and CDNs to skip theirs.
        for request in server.recordedRequests(for: "/a.jpg") {
            #expect(request.header("Cache-Control") == nil && request.header("Pragma") == nil)
        }
        #expect(again.image.width == 64)  // the server's 4096 bytes, not the planted 7
        #expect(server.requestCount(for: "/a.jpg") == 2)
    }
}
