import Foundation
import Testing
import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite(.timeLimit(.minutes(1)))
struct PipelineCoalescingTests {
    @Test func identicalConcurrentRequestsShareOneDownloadAndOneDecode() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let responses = try await withThrowingTaskGroup(of: ImageResponse.self) { group in
            for _ in 0..<8 { group.addTask { try await h.pipeline.image(for: PipelineURLs.a) } }
            await h.recorder.wait { $0.subscriptions(.decode) == 8 }
            await h.loader.waitForLoads(1)
            h.loader.resume()
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(responses.count == 8)
        #expect(Set(responses.map(\.image)).count == 1)
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 1)
        let metrics = h.pipeline.metrics
        #expect(metrics.networkRequestsStarted == 1)
        #expect(metrics.decode.started == 1 && metrics.decode.joined == 7)
        #expect(metrics.fetch.started == 1 && metrics.fetch.joined == 0)
        #expect(metrics.decodes == 1)
    }

    @Test func differentProcessorsShareDownloadAndDecode() async throws {
        let h = PipelineHarness()
        let applications = ProcessorApplications()
        h.loader.isSuspended = true
        let small = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("resize160", applications: applications)]))
        let large = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("resize640", applications: applications)]))
        h.loader.resume()
        let r1 = try await small.response
        let r2 = try await large.response
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 1)
        #expect(applications["mock.resize160"] == 1)
        #expect(applications["mock.resize640"] == 1)
        #expect(r1.image.width == r2.image.width) // both one column wider than the shared decode
    }

    @Test func differentDecodeSizesShareTheDownloadOnly() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let small = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(160)))
        let large = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(640)))
        h.loader.resume()
        #expect(try await small.response.image.width == 160)
        #expect(try await large.response.image.width == 640)
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 2)
        #expect(h.pipeline.metrics.fetch.joined == 1)
    }

    @Test(arguments: [true, false])
    func processorPrefixIsAppliedOnceWhenCoalescing(coalescing: Bool) async throws {
        let h = PipelineHarness(coalescing: coalescing)
        let applications = ProcessorApplications()
        let a = MockImageProcessor("a", applications: applications)
        let b = MockImageProcessor("b", applications: applications)
        h.loader.isSuspended = true
        let first = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [a]))
        let second = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, processors: [a, b]))
        h.loader.resume()
        let r1 = try await first.response
        let r2 = try await second.response
        #expect(r2.image.width == r1.image.width + 1)
        if coalescing {
            #expect(applications["mock.a"] == 1)
            #expect(applications["mock.b"] == 1)
            #expect(h.loader.loadCount == 1)
        } else {
            #expect(applications.total == 3)
            #expect(h.loader.loadCount == 2)
        }
        #expect(h.pipeline.metrics.processorApplications == applications.total)
    }

    @Test func coalescingOffGivesEveryRequestItsOwnChain() async throws {
        let h = PipelineHarness(coalescing: false)
        h.loader.isSuspended = true
        let tasks = (0..<5).map { _ in h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a)) }
        await h.loader.waitForLoads(5)
        h.loader.resume()
        for task in tasks { _ = try await task.response }
        #expect(h.loader.loadCount == 5)
        #expect(h.decoder.decodeCount == 5)
        #expect(h.pipeline.metrics.fetch.joined == 0)
        #expect(h.pipeline.metrics.decode.joined == 0)
    }

    @Test func closureRequestsWithTheSameIDShareTheCall() async throws {
        let h = PipelineHarness()
        let calls = CallCounter()
        let gate = OneShotGate()
        let request = ImageRequest(id: "closure-1", data: {
            calls.increment()
            await gate.wait()
            return Data([1, 2, 3, 4])
        })
        var smaller = request
        smaller.thumbnail = .maxPixelSize(8) // a different decode, the same bytes
        let t1 = h.pipeline.imageTask(with: request)
        let t2 = h.pipeline.imageTask(with: smaller)
        await gate.open()
        _ = try await t1.response
        _ = try await t2.response
        #expect(calls.value == 1)
        #expect(h.loader.loadCount == 0)
        #expect(h.pipeline.metrics.fetch.joined == 1)
    }

    /// Each case: a request that must not share a download with the base request, or (the
    /// last case) one that must.
    static let variants: [(name: String, shares: Bool, make: @Sendable () -> URLRequest)] = [
        ("cache policy", false, {
            var r = URLRequest(url: PipelineURLs.a)
            r.cachePolicy = .reloadIgnoringLocalCacheData
            return r
        }),
        ("authorization", false, {
            var r = URLRequest(url: PipelineURLs.a)
            r.setValue("Bearer user-2", forHTTPHeaderField: "Authorization")
            return r
        }),
        ("cookie", false, {
            var r = URLRequest(url: PipelineURLs.a)
            r.setValue("session=2", forHTTPHeaderField: "Cookie")
            return r
        }),
        ("method and body", false, {
            var r = URLRequest(url: PipelineURLs.a)
            r.httpMethod = "POST"
            r.httpBody = Data("q=1".utf8)
            return r
        }),
        ("timeout only", true, {
            var r = URLRequest(url: PipelineURLs.a)
            r.timeoutInterval = 3
            return r
        }),
    ]

    @Test(arguments: variants.indices)
    func stageKeyCoversCredentialsAndCachePolicyButNotTimeout(index: Int) async throws {
        let variant = Self.variants[index]
        let h = PipelineHarness()
        h.loader.isSuspended = true
        var base = URLRequest(url: PipelineURLs.a)
        base.setValue("Bearer user-1", forHTTPHeaderField: "Authorization")
        base.setValue("session=1", forHTTPHeaderField: "Cookie")
        var other = variant.make()
        if variant.name != "authorization" { other.setValue("Bearer user-1", forHTTPHeaderField: "Authorization") }
        if variant.name != "cookie" { other.setValue("session=1", forHTTPHeaderField: "Cookie") }
        let t1 = h.pipeline.imageTask(with: ImageRequest(urlRequest: base))
        let t2 = h.pipeline.imageTask(with: ImageRequest(urlRequest: other))
        h.loader.resume()
        _ = try await t1.response
        _ = try await t2.response
        #expect(h.loader.loadCount == (variant.shares ? 1 : 2), "\(variant.name)")
    }

    @Test func callerMarkedCredentialHeadersAreNeverShared() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        func request(_ key: String, marked: Bool) -> ImageRequest {
            var r = URLRequest(url: PipelineURLs.a)
            r.setValue(key, forHTTPHeaderField: "X-Api-Key")
            var request = ImageRequest(urlRequest: r)
            if marked { request.credentialHeaders = ["x-api-key"] }
            return request
        }
        // Unmarked, the header is not part of the key; marked (any case), it is.
        let tasks = [
            h.pipeline.imageTask(with: request("k1", marked: false)),
            h.pipeline.imageTask(with: request("k2", marked: false)),
            h.pipeline.imageTask(with: request("k1", marked: true)),
            h.pipeline.imageTask(with: request("k2", marked: true)),
        ]
        h.loader.resume()
        for task in tasks { _ = try await task.response }
        #expect(h.loader.loadCount == 3)
    }

    /// Options that only gate cache writes don't change the image: one download, one decode
    /// (DESIGN §1: decode key = data key + decode size).
    @Test func cacheWriteOptionsShareTheDownloadAndTheDecode() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let t2 = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a, options: [.disableMemoryCacheWrites]))
        h.loader.resume()
        _ = try await t1.response
        _ = try await t2.response
        #expect(h.loader.loadCount == 1)
        #expect(h.decoder.decodeCount == 1)
    }

    @Test func eventsDescribeTheStagesAndTheLoggerHearsFailures() async throws {
        let messages = LabelRecorder()
        let h = PipelineHarness { $0.logger = { messages.record($0) } }
        h.loader.fail(PipelineURLs.b, statusCode: 404)
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("p")]))
        _ = await errorThrown { try await h.pipeline.image(for: PipelineURLs.b) }
        // The hook hears a stage's end after the graph's lock is released, which may be after
        // the response reached its caller: wait for the events rather than race them.
        await h.recorder.wait { counts in
            ImagePipeline.Stage.allCases.allSatisfy { counts.completed($0) >= 1 } && counts.failed(.decode) >= 1
        }
        let counts = h.recorder.counts
        for stage in ImagePipeline.Stage.allCases {
            #expect(counts.started(stage) == (stage == .process ? 1 : 2))
            #expect(counts.completed(stage) == 1)
        }
        #expect(counts.failed(.fetch) == 1 && counts.failed(.decode) == 1)
        let keys = h.recorder.events.compactMap { event -> String? in
            if case .started(.fetch, let key) = event { return key }
            return nil
        }
        #expect(keys.contains { $0.contains(PipelineURLs.a.absoluteString) })
        #expect(messages.labels.contains { $0.contains("404") })
    }

    @Test func dataRequestsJoinTheImageDownload() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        async let data = h.pipeline.data(for: ImageRequest(url: PipelineURLs.a))
        await h.recorder.wait { $0.joined(.fetch) == 1 }
        h.loader.resume()
        let (bytes, response) = try await data
        _ = try await task.response
        #expect(bytes.count == 64)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(h.loader.loadCount == 1)
    }
}

/// A one-shot gate for async closures.
actor OneShotGate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        waiters.forEach { $0.resume() }
        waiters = []
    }
}
