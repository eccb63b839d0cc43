import Foundation
import Testing
@testable import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One credential rule for the download, the memory key and the disk key: values compared
/// exactly after trimming surrounding whitespace, an empty credential header the same as none.
@Suite(.timeLimit(.minutes(1)))
struct CredentialRuleTests {
    /// `Authorization` padded with whitespace is the same credential: the two requests share
    /// the download *and* the cache entries (before, the download key used the raw value and
    /// the cache keys the trimmed one, so they shared the cache but not the download).
    @Test func whitespaceOnlyDifferenceSharesDownloadAndCache() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let plain = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer t")
        let padded = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "  Bearer t ")
        #expect(FetchKey(plain) == FetchKey(padded))
        #expect(RequestCacheKeys.finalMemoryKey(plain) == RequestCacheKeys.finalMemoryKey(padded))
        #expect(RequestCacheKeys.originalDiskKey(plain) == RequestCacheKeys.originalDiskKey(padded))
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: plain)
        let t2 = h.pipeline.imageTask(with: padded)
        h.loader.resume()
        _ = try await t1.response
        _ = try await t2.response
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.cache[padded] != nil)
    }

    /// An empty (or blank) credential header is no credential: it shares with the bare URL.
    @Test func emptyCredentialHeaderIsTheSameAsNone() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let bare = pipelineCacheRequest(PipelineCacheURLs.a)
        let empty = pipelineCacheRequest(PipelineCacheURLs.a, authorization: " ")
        #expect(FetchKey(bare) == FetchKey(empty))
        #expect(FetchKey(empty).credentialFingerprint == nil)
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: bare)
        let t2 = h.pipeline.imageTask(with: empty)
        h.loader.resume()
        _ = try await t1.response
        _ = try await t2.response
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.cache[empty] != nil)
    }

    /// A value differing inside (not just around) is another credential: nothing is shared.
    @Test func differentValuesShareNothing() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let alice = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer  t")
        let bob = pipelineCacheRequest(PipelineCacheURLs.a, authorization: "Bearer t")
        #expect(FetchKey(alice) != FetchKey(bob))
        _ = try await h.pipeline.image(for: alice)
        #expect(h.pipeline.cache[bob] == nil)
        _ = try await h.pipeline.image(for: bob)
        #expect(h.loader.loadCount == 2)
    }

    /// Marked headers follow the same rule, whatever the case of the marked name.
    @Test func markedHeadersFollowTheSameRule() {
        var a = URLRequest(url: PipelineCacheURLs.a)
        a.setValue("k1", forHTTPHeaderField: "X-Api-Key")
        var b = URLRequest(url: PipelineCacheURLs.a)
        b.setValue(" k1\t", forHTTPHeaderField: "x-api-key")
        var ra = ImageRequest(urlRequest: a)
        var rb = ImageRequest(urlRequest: b)
        #expect(FetchKey(ra) == FetchKey(rb)) // not credentials yet: other headers don't count
        ra.credentialHeaders = ["X-API-KEY"]
        rb.credentialHeaders = ["x-api-key"]
        #expect(FetchKey(ra) == FetchKey(rb))
        #expect(FetchKey(ra).credentialFingerprint == ImageCacheKey.credentialFingerprint(for: ["x-api-key": "k1"], markedHeaders: ["x-api-key"]))
        #expect(FetchKey(ra) != FetchKey(ImageRequest(url: PipelineCacheURLs.a)))
    }
}
