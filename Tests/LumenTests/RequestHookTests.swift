import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@testable import Lumen
import LumenTestSupport

/// `Configuration.willLoadData`, the request hook (issue 23): it adds what the load needs
/// (a user's fresh token), and what it adds for one user never reaches another's work or
/// cache entries, because it sees only what the load is keyed on (`credentialScope`
/// included) and may add nothing identifying to a request without a scope.
@Suite(.timeLimit(.minutes(1)))
struct RequestHookTests {
    static let tokens = ["alice": "token-of-alice-7f3a", "bob": "token-of-bob-91c2", "carol": "token-of-carol-55e0"]

    /// The hook an app would write: the scope's token as a bearer credential.
    static let addToken: @Sendable (URLRequest, ImagePipeline.LoadContext) async throws -> URLRequest = { request, context in
        var request = request
        if let scope = context.credentialScope, let token = tokens[scope] {
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        }
        return request
    }

    static func photo() throws -> Data {
        try Bitmap(width: 64, height: 48, format: .rgb8) { p in
            for i in p.indices { p[i] = UInt8(truncatingIfNeeded: i &* 7) }
        }.encode(as: .jpeg(quality: 90))
    }

    static func pipeline(cache directory: URL, memory: Bool = true) -> ImagePipeline {
        ImagePipeline {
            $0.willLoadData = addToken
            $0.dataCache = DataCache(name: "hook", directory: directory)
            if !memory { $0.imageCache = nil }
        }
    }

    static func request(_ url: URL, scope: String?) -> ImageRequest {
        var request = ImageRequest(url: url, thumbnail: .maxPixelSize(32))
        request.credentialScope = scope
        return request
    }

    static func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-hook-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func twoUsersThroughTheHookShareNeitherWorkNorCacheEntries() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/p.jpg", data: try Self.photo(), contentType: "image/jpeg")
        let url = server.url(for: "/p.jpg")
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let pipeline = Self.pipeline(cache: directory)

        // Alice twice and Bob once, all subscribed before any response starts.
        server.hold("/p.jpg")
        let alice1 = pipeline.imageTask(with: Self.request(url, scope: "alice"))
        let alice2 = pipeline.imageTask(with: Self.request(url, scope: "alice"))
        let bob = pipeline.imageTask(with: Self.request(url, scope: "bob"))
        try await server.waitForRequests(path: "/p.jpg", count: 2)
        server.release("/p.jpg")
        for task in [alice1, alice2, bob] { _ = try await task.response }

        // One load per user, each with that user's token only; Alice's second request joined
        // her work (no third fetch or decode).
        let sent = server.recordedRequests(for: "/p.jpg").compactMap { $0.header("authorization") }.sorted()
        #expect(sent == ["Bearer token-of-alice-7f3a", "Bearer token-of-bob-91c2"])
        #expect(pipeline.metrics.fetch.started == 2 && pipeline.metrics.decode.started == 2)
        #expect(pipeline.metrics.requestHookCalls == 2 && pipeline.metrics.requestHookRefusals == 0)

        // Memory: Alice's result answers Alice, not Carol.
        #expect(try await pipeline.image(for: Self.request(url, scope: "alice")).cacheType == .memory)
        await (pipeline.configuration.dataCache as? DataCache)?.flush()

        // Disk, from a new pipeline without a memory cache: Bob's entry answers Bob with no
        // request; Carol, whose entry is not there, is loaded with her own token.
        let fresh = Self.pipeline(cache: directory, memory: false)
        server.resetStatistics()
        #expect(try await fresh.image(for: Self.request(url, scope: "bob")).cacheType == .disk)
        #expect(server.requestCount(for: "/p.jpg") == 0)
        let carol = try await fresh.image(for: Self.request(url, scope: "carol"))
        #expect(carol.cacheType == nil)
        #expect(server.recordedRequests(for: "/p.jpg").map { $0.header("authorization") } == ["Bearer token-of-carol-55e0"])
        // And a request without a scope is none of theirs: it is loaded, without a token.
        let anonymous = try await fresh.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(32)))
        #expect(anonymous.cacheType == nil)
        #expect(server.recordedRequests(for: "/p.jpg").last?.header("authorization") == nil)
    }

    /// A hook that adds a credential (or changes the URL, the method, the body, any header
    /// that is not neutral) to a request without a scope fails that load before it is sent,
    /// with an error that names what changed and never a value.
    @Test(arguments: [
        "authorization", "cookie", "x-api-key", "url", "method",
    ])
    func anIdentifyingChangeWithoutAScopeSendsNothing(change: String) async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/p.jpg", data: try Self.photo(), contentType: "image/jpeg")
        server.allow(methods: ["GET", "HEAD", "POST"], for: "/p.jpg")
        let secret = "s3cr3t-value-0d9e"
        let pipeline = ImagePipeline {
            $0.imageCache = nil
            $0.willLoadData = { request, _ in
                var request = request
                switch change {
                case "url": request.url = URL(string: request.url!.absoluteString + "?token=\(secret)")
                case "method": request.httpMethod = "POST"
                default: request.setValue(secret, forHTTPHeaderField: change)
                }
                return request
            }
        }
        let url = server.url(for: "/p.jpg")
        let error = try #require(await errorThrown { try await pipeline.image(for: url) } as? ImagePipeline.Error)
        #expect(error.code == .unscopedCredentials)
        let changed = try #require(error.underlyingError as? ImagePipeline.UnscopedCredentials)
        switch change {
        case "url": #expect(changed.url && changed.headers.isEmpty)
        case "method": #expect(changed.methodOrBody && changed.headers.isEmpty)
        default: #expect(changed.headers == [change] && !changed.url)
        }
        #expect(!"\(error)".contains(secret) && !"\(changed)".contains(secret))
        #expect(server.statistics.totalRequests == 0)
        #expect(pipeline.metrics.requestHookRefusals == 1 && pipeline.metrics.networkRequestsStarted == 0)

        // The same hook with a scope is the caller's to use.
        var scoped = ImageRequest(url: url)
        scoped.credentialScope = "alice"
        _ = try await pipeline.image(for: scoped)
        #expect(server.statistics.totalRequests == 1)
    }

    /// Headers that describe the client or the transfer need no scope, and requests without
    /// one still share their load.
    @Test func neutralHeadersNeedNoScopeAndKeepSharing() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/p.jpg", data: try Self.photo(), contentType: "image/jpeg")
        let pipeline = ImagePipeline {
            $0.willLoadData = { request, _ in
                var request = request
                request.setValue("lumen-tests/1", forHTTPHeaderField: "User-Agent")
                request.setValue("req-42", forHTTPHeaderField: "X-Request-ID")
                return request
            }
        }
        let url = server.url(for: "/p.jpg")
        server.hold("/p.jpg")
        let first = pipeline.imageTask(with: ImageRequest(url: url))
        let second = pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(16)))
        try await server.waitForRequests(path: "/p.jpg", count: 1)
        server.release("/p.jpg")
        _ = try await (first.response, second.response)
        let sent = server.recordedRequests(for: "/p.jpg")
        #expect(sent.count == 1)
        #expect(sent.first?.header("user-agent") == "lumen-tests/1" && sent.first?.header("x-request-id") == "req-42")
        #expect(pipeline.metrics.requestHookRefusals == 0)
    }

    /// The hook runs before every attempt and is told which one it is: a token refreshed on a
    /// retry is the one sent.
    @Test func theHookRunsBeforeEveryAttempt() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/p.jpg", data: try Self.photo(), contentType: "image/jpeg")
        let attempts = Mutex<[Int]>([])
        let pipeline = ImagePipeline {
            $0.retryPolicy = .init(maximumAttempts: 3)
            $0.willLoadData = { request, context in
                attempts.withLock { $0.append(context.attempt) }
                // The first token has expired: the app's refresh fails this attempt as transient.
                if context.attempt == 1 { throw URLError(.timedOut) }
                var request = request
                request.setValue("Bearer fresh-\(context.attempt)", forHTTPHeaderField: "Authorization")
                return request
            }
        }
        var request = ImageRequest(url: server.url(for: "/p.jpg"))
        request.credentialScope = "alice"
        _ = try await pipeline.image(for: request)
        #expect(attempts.withLock { $0 } == [1, 2])
        #expect(server.recordedRequests(for: "/p.jpg").map { $0.header("authorization") } == ["Bearer fresh-2"])
        #expect(pipeline.metrics.retries == 1 && pipeline.metrics.requestHookCalls == 2)
    }

    /// A hook's own error fails the load as `dataLoadingFailed` and is never cached: the next
    /// request runs the hook again.
    @Test func aHookErrorFailsTheLoadAndIsNotCached() async throws {
        struct SignedOut: Error {}
        let h = PipelineHarness { $0.willLoadData = { _, _ in throw SignedOut() } }
        let error = try #require(await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) } as? ImagePipeline.Error)
        #expect(error.code == .dataLoadingFailed && error.underlyingError is SignedOut)
        #expect(await errorThrown { try await h.pipeline.image(for: PipelineURLs.a) } != nil)
        #expect(h.pipeline.metrics.requestHookCalls == 2)
        #expect(h.loader.loadCount == 0)
    }

    /// The scope is part of the keys even without a hook, like a credential header.
    @Test func theScopeSeparatesKeysLikeACredential() {
        func key(_ scope: String?) -> FetchKey { FetchKey(Self.request(PipelineURLs.a, scope: scope)) }
        #expect(key("alice") == key("alice"))
        #expect(key("alice") != key("bob"))
        #expect(key(nil) != key("alice"))
        #expect(key(nil) == FetchKey(ImageRequest(url: PipelineURLs.a)))
        let alice = Self.request(PipelineURLs.a, scope: "alice"), bob = Self.request(PipelineURLs.a, scope: "bob")
        #expect(RequestCacheKeys.finalMemoryKey(alice) != RequestCacheKeys.finalMemoryKey(bob))
        #expect(RequestCacheKeys.originalDiskKey(alice) != RequestCacheKeys.originalDiskKey(bob))
        // A header cannot pass for a scope: its name would need a space.
        var header = URLRequest(url: PipelineURLs.a)
        header.setValue("alice", forHTTPHeaderField: "credential-scope")
        #expect(FetchKey(ImageRequest(urlRequest: header, thumbnail: .maxPixelSize(32))) != key("alice"))
    }
}
