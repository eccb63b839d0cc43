import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

// Contract tests for the work graph, written from issue 3, DESIGN §1–2 and
// CoalescingAndCancellation.md by an independent review, not from the implementation.

// MARK: - Helpers

/// A loader whose bytes depend on the request (its headers, say): gating and counting come
/// from a ``MockDataLoader`` (suspend, waitForLoads, cancellations), the body from `body`.
private final class RequestDependentLoader: DataLoading {
    let mock = MockDataLoader()
    private let body: @Sendable (URLRequest) -> (Data, Int)
    private let sent = Mutex<[URLRequest]>([])

    init(body: @escaping @Sendable (URLRequest) -> (Data, Int)) { self.body = body }

    var requests: [URLRequest] { sent.withLock { $0 } }

    func loadData(for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void) async throws -> URLResponse {
        sent.withLock { $0.append(request) }
        _ = try await mock.loadData(for: request) { _, _ in }
        let (data, status) = body(request)
        let response = HTTPURLResponse(url: request.url!, statusCode: status, httpVersion: "HTTP/1.1",
                                       headerFields: ["Content-Length": "\(data.count)"])!
        try didReceive(data, response)
        return response
    }
}

/// Bytes made from the request's credential headers: each user gets a different image.
private func credentialEcho(_ request: URLRequest) -> (Data, Int) {
    let auth = request.value(forHTTPHeaderField: "Authorization") ?? "-"
    let cookie = request.value(forHTTPHeaderField: "Cookie") ?? "-"
    let key = request.value(forHTTPHeaderField: "X-Api-Key") ?? "-"
    return (Data("user[\(auth)|\(cookie)|\(key)]".utf8), 200)
}

/// A decoder that blocks on a gate (a semaphore, not a sleep) until released; optionally
/// fails. Counts its calls.
private final class GatedDecoder: ImageDecoding, @unchecked Sendable {
    let inner = TrivialImageDecoder()
    private let gate = DispatchSemaphore(value: 0)
    private let calls = Mutex(0)
    let fails: Bool
    let blocks: Bool

    init(blocks: Bool = true, fails: Bool = false) {
        self.blocks = blocks
        self.fails = fails
    }

    var callCount: Int { calls.withLock { $0 } }
    func release(_ count: Int = 1) { for _ in 0..<count { gate.signal() } }

    struct Failure: Error {}

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        calls.withLock { $0 += 1 }
        if blocks { gate.wait() }
        if fails { throw Failure() }
        return try inner.decode(data, context: context)
    }
}

/// A one-shot gate: `wait()` suspends until `open()`.
private final class Latch: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let isOpen = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if isOpen { continuation.resume() }
        }
    }
    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume() }
    }
}

private func request(_ url: URL, headers: [String: String], marked: Set<String> = [], processors: [any ImageProcessing] = [],
                     thumbnail: DecodeSize? = nil, imageID: String? = nil, priority: ImageRequest.Priority = .normal) -> ImageRequest {
    var urlRequest = URLRequest(url: url)
    for (name, value) in headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
    var request = ImageRequest(urlRequest: urlRequest, processors: processors, priority: priority, thumbnail: thumbnail)
    if !marked.isEmpty { request.credentialHeaders = marked }
    if let imageID { request.imageID = imageID }
    return request
}

private func code(_ body: () async throws -> ImageResponse) async -> ImagePipeline.Error.Code? {
    do {
        _ = try await body()
        return nil
    } catch {
        return (error as? ImagePipeline.Error)?.code ?? ImagePipeline.Error.Code.dataLoadingFailed
    }
}

private func expectBalanced(_ metrics: ImagePipeline.Metrics, sourceLocation: SourceLocation = #_sourceLocation) {
    for (name, stage) in [("fetch", metrics.fetch), ("decode", metrics.decode), ("process", metrics.process)] {
        #expect(stage.started == stage.completed + stage.failed + stage.cancelled,
                "\(name): started \(stage.started) ≠ completed \(stage.completed) + failed \(stage.failed) + cancelled \(stage.cancelled)",
                sourceLocation: sourceLocation)
    }
    #expect(metrics.liveTasks == 0, sourceLocation: sourceLocation)
    #expect(metrics.liveRequests == 0, sourceLocation: sourceLocation)
    #expect(metrics.networkRequestsInFlight == 0, sourceLocation: sourceLocation)
}

private let url = URL(string: "https://example.com/contract.jpg")!
private let url2 = URL(string: "https://example.com/contract-2.jpg")!

// MARK: - Credentials

@Suite(.timeLimit(.minutes(1)))
struct GraphCredentialContractTests {
    /// Two concurrent requests that differ only in one credential header never share a download.
    @Test(arguments: ["Authorization", "authorization", "Cookie", "cookie", "Proxy-Authorization", "PROXY-AUTHORIZATION"])
    func differentCredentialValuesNeverShareADownload(header: String) async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let alice = h.pipeline.imageTask(with: request(url, headers: [header: "alice"]))
        let bob = h.pipeline.imageTask(with: request(url, headers: [header: "bob"]))
        let none = h.pipeline.imageTask(with: ImageRequest(url: url))
        await h.loader.waitForLoads(3)
        h.loader.resume()
        for task in [alice, bob, none] { _ = try await task.response }
        #expect(h.loader.loadCount == 3)
        #expect(h.pipeline.metrics.fetch.joined == 0)
        #expect(h.pipeline.metrics.decode.joined == 0)
    }

    /// The same credentials spelled with another name case, another header order and extra
    /// non-credential headers are the same credentials: the download is shared.
    @Test func sameCredentialsInAnotherSpellingShare() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let a = h.pipeline.imageTask(with: request(url, headers: ["Authorization": "Bearer A", "Cookie": "s=1", "X-Request-ID": "7"]))
        let b = h.pipeline.imageTask(with: request(url, headers: ["cookie": "s=1", "authorization": "Bearer A"]))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        _ = try await a.response
        _ = try await b.response
        #expect(h.loader.loadCount == 1)
    }

    /// A caller-marked header separates downloads; marking is case-insensitive.
    @Test func markedHeadersSeparateDownloads() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let one = h.pipeline.imageTask(with: request(url, headers: ["X-Api-Key": "k1"], marked: ["x-api-key"]))
        let two = h.pipeline.imageTask(with: request(url, headers: ["x-api-key": "k2"], marked: ["X-API-KEY"]))
        let oneAgain = h.pipeline.imageTask(with: request(url, headers: ["X-API-KEY": "k1"], marked: ["X-Api-Key"]))
        await h.loader.waitForLoads(2)
        h.loader.resume()
        for task in [one, two, oneAgain] { _ = try await task.response }
        #expect(h.loader.loadCount == 2)
    }

    /// One user's result — original, decoded at a size, processed — never answers another's
    /// request, through the running graph or the memory cache, also under a shared `imageID`.
    @Test(arguments: [0, 1, 2, 3])
    func aSecondUserNeverGetsTheFirstUsersImage(variant: Int) async throws {
        let loader = RequestDependentLoader(body: credentialEcho)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        let processors: [any ImageProcessing] = variant == 2 ? [MockImageProcessor("p")] : []
        let thumbnail: DecodeSize? = variant == 1 ? .maxPixelSize(8) : nil
        let imageID: String? = variant == 3 ? "shared-id" : nil
        let aliceRequest = request(url, headers: ["Authorization": "alice"], processors: processors, thumbnail: thumbnail, imageID: imageID)
        let bobRequest = request(variant == 3 ? url2 : url, headers: ["Authorization": "bob"], processors: processors,
                                 thumbnail: thumbnail, imageID: imageID)
        let aliceImage = try await pipeline.image(for: aliceRequest).image
        let bobResponse = try await pipeline.image(for: bobRequest)
        #expect(bobResponse.cacheType != .memory)
        #expect(bobResponse.image != aliceImage)
        #expect(loader.mock.loadCount == 2)
        // Alice's own second request is answered from memory with her image.
        let aliceAgain = try await pipeline.image(for: aliceRequest)
        #expect(aliceAgain.cacheType == .memory)
        #expect(aliceAgain.image == aliceImage)
    }

    /// A byte load and an image load for the same URL with different credentials share nothing.
    @Test func aDataLoadNeverSharesAnotherUsersDownload() async throws {
        let loader = RequestDependentLoader(body: credentialEcho)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        loader.mock.isSuspended = true
        let image = pipeline.imageTask(with: request(url, headers: ["Cookie": "session=alice"]))
        let data = pipeline.dataTask(with: request(url, headers: ["Cookie": "session=bob"]))
        await loader.mock.waitForLoads(2)
        loader.mock.resume()
        _ = try await image.response
        let (bytes, _) = try await data.response
        #expect(String(decoding: bytes, as: UTF8.self).contains("session=bob"))
    }

    /// A joined subscriber with other credentials must never receive the first one's bytes:
    /// the bytes that reach each caller are the ones its own credentials fetch.
    @Test func concurrentUsersEachGetTheirOwnBytes() async throws {
        let loader = RequestDependentLoader(body: credentialEcho)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.imageCache = nil
        let pipeline = ImagePipeline(configuration: configuration)
        loader.mock.isSuspended = true
        let names = ["alice", "bob", "carol", "alice"]
        let tasks = names.map { pipeline.dataTask(with: request(url, headers: ["authorization": $0])) }
        await loader.mock.waitForLoads(3)
        loader.mock.resume()
        for (name, task) in zip(names, tasks) {
            let (bytes, _) = try await task.response
            #expect(String(decoding: bytes, as: UTF8.self) == "user[\(name)|-|-]")
        }
        #expect(loader.mock.loadCount == 3)
    }

    /// DESIGN §1: the fetch key covers "whatever else changes the bytes on the wire". A
    /// `Range` request gets a 206 with part of the body; a plain request joining it must not
    /// receive those partial bytes as the image.
    @Test func aRangeRequestIsNotJoinedByAPlainRequest() async throws {
        let full = Data((0..<64).map { UInt8($0) })
        let loader = RequestDependentLoader { request in
            request.value(forHTTPHeaderField: "Range") != nil ? (full.prefix(4), 206) : (full, 200)
        }
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        loader.mock.isSuspended = true
        let partial = pipeline.dataTask(with: request(url, headers: ["Range": "bytes=0-3"]))
        let plain = pipeline.imageTask(with: ImageRequest(url: url))
        await loader.mock.waitForLoads(1)
        loader.mock.resume()
        _ = try await partial.response
        let image = try await plain.response.image
        #expect(image.width == 64)
        #expect(loader.mock.loadCount == 2)
    }
}

// MARK: - Coalescing keys

@Suite(.timeLimit(.minutes(1)))
struct GraphKeyContractTests {
    private func loads(_ requests: [ImageRequest]) async throws -> Int {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let tasks = requests.map { h.pipeline.imageTask(with: $0) }
        await h.loader.waitForLoads(1)
        h.loader.resume()
        for task in tasks { _ = try await task.response }
        return h.loader.loadCount
    }

    @Test func cachePolicyMethodAndBodySeparateTimeoutDoesNot() async throws {
        var reload = URLRequest(url: url)
        reload.cachePolicy = .reloadIgnoringLocalCacheData
        #expect(try await loads([ImageRequest(url: url), ImageRequest(urlRequest: reload)]) == 2)

        var timeout = URLRequest(url: url)
        timeout.timeoutInterval = 3
        #expect(try await loads([ImageRequest(url: url), ImageRequest(urlRequest: timeout)]) == 1)

        var post = URLRequest(url: url)
        post.httpMethod = "POST"
        #expect(try await loads([ImageRequest(url: url), ImageRequest(urlRequest: post)]) == 2)

        var postA = post, postB = post
        postA.httpBody = Data("a".utf8)
        postB.httpBody = Data("b".utf8)
        #expect(try await loads([ImageRequest(urlRequest: postA), ImageRequest(urlRequest: postB)]) == 2)
        #expect(try await loads([ImageRequest(urlRequest: postA), ImageRequest(urlRequest: postA)]) == 1)
    }

    @Test func closureRequestsShareByID() async throws {
        let h = PipelineHarness()
        let calls = CallCounter()
        let gate = Latch()
        let make = { (id: String) in
            ImageRequest(id: id, data: {
                calls.increment()
                await gate.wait()
                return Data(repeating: 7, count: 16)
            })
        }
        let tasks = [make("x"), make("x"), make("y")].map { h.pipeline.imageTask(with: $0) }
        await h.pipeline.waitForMetrics { $0.fetch.started == 2 && $0.decode.joined == 1 }
        gate.open()
        for task in tasks { _ = try await task.response }
        #expect(calls.value == 2)
    }

    /// A URL and a closure whose id is that URL's string are different sources.
    @Test func aClosureNeverJoinsAURLDownloadWithTheSameIdentity() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let network = h.pipeline.imageTask(with: ImageRequest(url: url))
        let closure = h.pipeline.imageTask(with: ImageRequest(id: url.absoluteString, data: { Data(repeating: 1, count: 8) }))
        let response = try await closure.response
        #expect(response.image.pixels.allSatisfy { $0 == 1 })
        h.loader.resume()
        _ = try await network.response
    }
}

// MARK: - Priority

@Suite(.timeLimit(.minutes(1)))
struct GraphPriorityContractTests {
    /// Queued downloads start highest priority first, FIFO within a level, over all five levels.
    @Test func fiveLevelsHighestFirstFIFOWithinALevel() async throws {
        let downloads = WorkQueue(name: "review.downloads", maxConcurrentCount: 1, execution: .tasks)
        downloads.isSuspended = true
        let h = PipelineHarness { $0.dataLoadingQueue = downloads }
        let levels: [ImageRequest.Priority] = [.low, .veryHigh, .normal, .veryLow, .high, .low, .veryHigh, .normal, .veryLow, .high]
        let tasks = levels.enumerated().map { i, p in
            h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(i), priority: p))
        }
        #expect(downloads.pendingPriorities == levels.sorted { $0 > $1 })
        downloads.isSuspended = false
        for task in tasks { _ = try await task.response }
        let expected = levels.enumerated().sorted { $0.element != $1.element ? $0.element > $1.element : $0.offset < $1.offset }
            .map { PipelineURLs.numbered($0.offset) }
        #expect(h.loader.requestedURLs == expected)
    }

    /// A raised item goes to the back of its new level.
    @Test func aRaisedItemJoinsTheBackOfItsNewLevel() async throws {
        let downloads = WorkQueue(name: "review.downloads", maxConcurrentCount: 1, execution: .tasks)
        downloads.isSuspended = true
        let h = PipelineHarness { $0.dataLoadingQueue = downloads }
        let first = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(0), priority: .high))
        let raised = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(1), priority: .low))
        let second = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.numbered(2), priority: .high))
        raised.priority = .high
        #expect(downloads.pendingPriorities == [.high, .high, .high])
        downloads.isSuspended = false
        for task in [first, raised, second] { _ = try await task.response }
        #expect(h.loader.requestedURLs == [0, 2, 1].map(PipelineURLs.numbered))
    }

    /// Raising a processed request reaches its queued download; lowering it comes back down.
    @Test func raisingAProcessedRequestReachesTheQueuedFetch() async throws {
        let downloads = WorkQueue(name: "review.downloads", maxConcurrentCount: 6, execution: .tasks)
        downloads.isSuspended = true
        let h = PipelineHarness { $0.dataLoadingQueue = downloads }
        let task = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [MockImageProcessor("a"), MockImageProcessor("b")], priority: .low))
        #expect(downloads.pendingPriorities == [.low])
        task.priority = .veryHigh
        #expect(downloads.pendingPriorities == [.veryHigh])
        task.priority = .veryLow
        #expect(downloads.pendingPriorities == [.veryLow])
        downloads.isSuspended = false
        _ = try await task.response
    }

    /// The group's priority falls back to the highest remaining subscriber when the highest
    /// leaves or lowers itself; a joiner at a lower level changes nothing.
    @Test func theGroupFallsBackLevelByLevel() async throws {
        let downloads = WorkQueue(name: "review.downloads", maxConcurrentCount: 6, execution: .tasks)
        downloads.isSuspended = true
        let h = PipelineHarness { $0.dataLoadingQueue = downloads }
        let low = h.pipeline.imageTask(with: ImageRequest(url: url, priority: .low))
        let normal = h.pipeline.imageTask(with: ImageRequest(url: url, priority: .normal, thumbnail: .maxPixelSize(4)))
        let veryHigh = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [MockImageProcessor("p")], priority: .veryHigh))
        let veryLow = h.pipeline.imageTask(with: ImageRequest(url: url, priority: .veryLow))
        #expect(downloads.pendingPriorities == [.veryHigh])
        veryHigh.cancel()
        #expect(downloads.pendingPriorities == [.normal])
        normal.priority = .veryLow
        #expect(downloads.pendingPriorities == [.low])
        low.cancel()
        #expect(downloads.pendingPriorities == [.veryLow])
        normal.priority = .high
        #expect(downloads.pendingPriorities == [.high])
        downloads.isSuspended = false
        _ = try await normal.response
        _ = try await veryLow.response
    }

    /// A raise while the download runs is remembered: the decode queued after it runs at the
    /// raised priority, and so does the processor after that.
    @Test func aRaiseWhileRunningReachesTheLaterStages() async throws {
        let decodes = WorkQueue(name: "review.decode", maxConcurrentCount: 1, execution: .threads)
        let processing = WorkQueue(name: "review.process", maxConcurrentCount: 1, execution: .threads)
        decodes.isSuspended = true
        processing.isSuspended = true
        let h = PipelineHarness {
            $0.decodingQueue = decodes
            $0.processingQueue = processing
        }
        h.loader.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [MockImageProcessor("p")], priority: .veryLow))
        await h.loader.waitForLoads(1)
        task.priority = .high
        h.loader.resume()
        await h.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        #expect(decodes.pendingPriorities == [.high])
        task.priority = .low
        #expect(decodes.pendingPriorities == [.low])
        decodes.isSuspended = false
        await h.pipeline.waitForMetrics { $0.decode.completed == 1 }
        #expect(processing.pendingPriorities == [.low])
        task.priority = .veryHigh
        #expect(processing.pendingPriorities == [.veryHigh])
        processing.isSuspended = false
        _ = try await task.response
    }
}

// MARK: - Cancellation

@Suite(.timeLimit(.minutes(1)))
struct GraphCancellationContractTests {
    @Test func cancellingAQueuedFetchNeverCallsTheLoader() async throws {
        let downloads = WorkQueue(name: "review.downloads", maxConcurrentCount: 1, execution: .tasks)
        downloads.isSuspended = true
        let h = PipelineHarness { $0.dataLoadingQueue = downloads }
        let task = h.pipeline.imageTask(with: ImageRequest(url: url))
        task.cancel()
        #expect(downloads.pendingCount == 0)
        #expect(await code { try await task.response } == .cancelled)
        downloads.isSuspended = false
        let again = try await h.pipeline.image(for: ImageRequest(url: url))
        #expect(again.cacheType == nil)
        #expect(h.loader.loadCount == 1)
        await h.waitUntilIdle()
        expectBalanced(h.pipeline.metrics)
        #expect(h.pipeline.metrics.fetch.cancelled == 1)
    }

    /// Cancel, then at once ask for the same thing again, at every stage: the new request
    /// starts fresh (or joins live work) and succeeds; it never sees the cancellation.
    @Test(arguments: ["queued fetch", "running fetch", "queued decode", "running decode", "queued processor"])
    func cancelThenRequestAgainSucceeds(stage: String) async throws {
        let decoder = GatedDecoder(blocks: stage == "running decode")
        let downloads = WorkQueue(name: "review.downloads", maxConcurrentCount: 6, execution: .tasks)
        let decodes = WorkQueue(name: "review.decode", maxConcurrentCount: 2, execution: .threads)
        let processing = WorkQueue(name: "review.process", maxConcurrentCount: 2, execution: .threads)
        let h = PipelineHarness {
            $0.decoder = decoder
            $0.dataLoadingQueue = downloads
            $0.decodingQueue = decodes
            $0.processingQueue = processing
            $0.imageCache = nil // so the second request has to go through the graph
        }
        let request = ImageRequest(url: url, processors: stage == "queued processor" ? [MockImageProcessor("p")] : [])
        switch stage {
        case "queued fetch": downloads.isSuspended = true
        case "running fetch": h.loader.isSuspended = true
        case "queued decode": decodes.isSuspended = true
        case "queued processor": processing.isSuspended = true
        default: break
        }
        let first = h.pipeline.imageTask(with: request)
        switch stage {
        case "running fetch": await h.loader.waitForLoads(1)
        case "queued decode": await h.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        case "running decode": await h.pipeline.waitForMetrics { $0.decodes == 1 }
        case "queued processor": await h.pipeline.waitForMetrics { $0.decode.completed == 1 }
        default: break
        }
        first.cancel()
        let second = h.pipeline.imageTask(with: request)
        downloads.isSuspended = false
        decodes.isSuspended = false
        processing.isSuspended = false
        h.loader.resume()
        if stage == "running decode" { decoder.release(2) }
        #expect(await code { try await first.response } == .cancelled)
        let response = try await second.response
        #expect(!response.isPreview)
        await h.waitUntilIdle()
        expectBalanced(h.pipeline.metrics)
    }

    /// Cancelling a queued decode removes it: the decoder never runs for it.
    @Test func cancellingAQueuedDecodeNeverDecodes() async throws {
        let decodes = WorkQueue(name: "review.decode", maxConcurrentCount: 1, execution: .threads)
        decodes.isSuspended = true
        let h = PipelineHarness { $0.decodingQueue = decodes }
        let task = h.pipeline.imageTask(with: ImageRequest(url: url))
        await h.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        #expect(decodes.pendingCount == 1)
        task.cancel()
        #expect(decodes.pendingCount == 0)
        decodes.isSuspended = false
        await h.waitUntilIdle()
        #expect(h.decoder.decodeCount == 0)
        #expect(h.pipeline.metrics.decode.cancelled == 1)
        expectBalanced(h.pipeline.metrics)
    }

    /// Cancelling a queued processor leaves the decode's result (shared by another request).
    @Test func cancellingAQueuedProcessorKeepsTheSharedDecode() async throws {
        let processing = WorkQueue(name: "review.process", maxConcurrentCount: 1, execution: .threads)
        processing.isSuspended = true
        let applications = ProcessorApplications()
        let h = PipelineHarness { $0.processingQueue = processing }
        let plain = h.pipeline.imageTask(with: ImageRequest(url: url))
        let processed = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [MockImageProcessor("p", applications: applications)]))
        _ = try await plain.response
        await h.pipeline.waitForMetrics { $0.decode.completed == 1 }
        #expect(processing.pendingCount == 1)
        processed.cancel()
        #expect(processing.pendingCount == 0)
        processing.isSuspended = false
        await h.waitUntilIdle()
        #expect(applications.total == 0)
        expectBalanced(h.pipeline.metrics)
    }

    /// Cancelling after completion changes nothing.
    @Test func cancelAfterCompletionIsANoOp() async throws {
        let h = PipelineHarness()
        let task = h.pipeline.imageTask(with: ImageRequest(url: url))
        let response = try await task.response
        task.cancel()
        #expect(task.state == .completed)
        #expect(try await task.response.image == response.image)
        var events: [ImageTask.Event] = []
        for await event in task.events { events.append(event) }
        #expect(events.count == 1)
        if case .finished(.success)? = events.first {} else { Issue.record("expected only .finished(.success), got \(events)") }
    }

    /// A stream made after a failure or a cancellation yields only `.finished` with that outcome.
    @Test func eventsAfterTheEndYieldOnlyFinished() async throws {
        let h = PipelineHarness()
        h.loader.fail(url, statusCode: 500)
        let failed = h.pipeline.imageTask(with: ImageRequest(url: url))
        _ = await code { try await failed.response }
        h.loader.isSuspended = true
        let cancelled = h.pipeline.imageTask(with: ImageRequest(url: url2))
        cancelled.cancel()
        for (task, expected) in [(failed, ImagePipeline.Error.Code.dataLoadingFailed), (cancelled, .cancelled)] {
            var events: [ImageTask.Event] = []
            for await event in task.events { events.append(event) }
            #expect(events.count == 1)
            if case .finished(.failure(let error))? = events.first {
                #expect(error.code == expected)
            } else {
                Issue.record("expected only .finished(.failure), got \(events)")
            }
        }
        h.loader.resume()
    }

    /// `invalidate()` during work: running requests end as cancelled (their download is
    /// cancelled), later image and data requests fail with `pipelineInvalidated` — also for an
    /// image the memory cache holds — and the graph drains.
    @Test func invalidateDuringWork() async throws {
        let h = PipelineHarness()
        _ = try await h.pipeline.image(for: ImageRequest(url: url2)) // in memory now
        h.loader.isSuspended = true
        let running = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [MockImageProcessor("p")]))
        let data = h.pipeline.dataTask(with: ImageRequest(url: url))
        await h.loader.waitForLoads(2)
        h.pipeline.invalidate()
        #expect(await code { try await running.response } == .cancelled)
        do {
            _ = try await data.response
            Issue.record("data task succeeded after invalidate()")
        } catch {
            #expect((error as? ImagePipeline.Error)?.code == .cancelled)
        }
        await h.loader.waitForCancellations(1)
        #expect(await code { try await h.pipeline.image(for: ImageRequest(url: url)) } == .pipelineInvalidated)
        #expect(await code { try await h.pipeline.image(for: ImageRequest(url: url2)) } == .pipelineInvalidated)
        #expect(await code { try await h.pipeline.imageTask(with: ImageRequest(url: url2)).response } == .pipelineInvalidated)
        do {
            _ = try await h.pipeline.data(for: ImageRequest(url: url))
            Issue.record("data(for:) succeeded after invalidate()")
        } catch {
            #expect((error as? ImagePipeline.Error)?.code == .pipelineInvalidated)
        }
        await h.waitUntilIdle()
        expectBalanced(h.pipeline.metrics)
    }

    /// Cancelling the Swift task that awaits `image(for:)` ends it with `.cancelled`.
    @Test func cancellingTheAwaitingSwiftTask() async throws {
        let h = PipelineHarness()
        h.loader.isSuspended = true
        let other = h.pipeline.imageTask(with: ImageRequest(url: url))
        let load = Task { try await h.pipeline.image(for: ImageRequest(url: url)) }
        await h.pipeline.waitForMetrics { $0.decode.joined == 1 }
        load.cancel()
        #expect(await code { try await load.value } == .cancelled)
        h.loader.resume()
        _ = try await other.response
        #expect(h.loader.cancelledCount == 0)
    }
}

// MARK: - Failures

@Suite(.timeLimit(.minutes(1)))
struct GraphFailureContractTests {
    /// Every subscriber of a failed download gets the same error; the next request starts fresh.
    @Test func everySubscriberGetsTheSameErrorAndTheNextRequestIsFresh() async throws {
        let h = PipelineHarness()
        h.loader.fail(url, statusCode: 503)
        h.loader.isSuspended = true
        let requests = [ImageRequest(url: url), ImageRequest(url: url, processors: [MockImageProcessor("a")]),
                        ImageRequest(url: url, thumbnail: .maxPixelSize(4))]
        let tasks = requests.map { h.pipeline.imageTask(with: $0) }
        let data = h.pipeline.dataTask(with: ImageRequest(url: url))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        for task in tasks {
            do {
                _ = try await task.response
                Issue.record("succeeded")
            } catch let error as ImagePipeline.Error {
                #expect(error.code == .dataLoadingFailed)
                #expect(error.statusCode == 503)
            }
        }
        do {
            _ = try await data.response
            Issue.record("succeeded")
        } catch let error as ImagePipeline.Error {
            #expect(error.statusCode == 503)
        }
        #expect(h.loader.loadCount == 1)
        h.loader.removeFailure(for: url)
        _ = try await h.pipeline.image(for: ImageRequest(url: url))
        #expect(h.loader.loadCount == 2)
        await h.waitUntilIdle()
        expectBalanced(h.pipeline.metrics)
    }

    /// `b` failing in `[a, b]` fails that request only: `[a]` succeeds, `a` ran once.
    @Test func aFailureInTheSecondProcessorLeavesThePrefix() async throws {
        let h = PipelineHarness()
        let applications = ProcessorApplications()
        let a = MockImageProcessor("a", applications: applications)
        let b = MockImageProcessor("b", fails: true, applications: applications)
        h.loader.isSuspended = true
        let ab = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [a, b]))
        let onlyA = h.pipeline.imageTask(with: ImageRequest(url: url, processors: [a]))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        do {
            _ = try await ab.response
            Issue.record("[a, b] succeeded")
        } catch let error as ImagePipeline.Error {
            #expect(error.code == .processingFailed)
            #expect(error.processorIdentifier == b.identifier)
        }
        #expect(try await onlyA.response.image.width == 65)
        #expect(applications[a.identifier] == 1)
        #expect(applications[b.identifier] == 1)
        // Not remembered: [a, b] again runs b again (a comes from memory or runs once more).
        _ = await code { try await h.pipeline.image(for: ImageRequest(url: url, processors: [a, b])) }
        #expect(applications[b.identifier] == 2)
        await h.waitUntilIdle()
        expectBalanced(h.pipeline.metrics)
    }

    /// A decode failure at two decode sizes: one download, both fail, next request refetches.
    @Test func aDecodeFailureAtTwoSizes() async throws {
        let decoder = GatedDecoder(blocks: false, fails: true)
        let h = PipelineHarness { $0.decoder = decoder }
        h.loader.isSuspended = true
        let small = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(8)))
        let small2 = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(8)))
        let large = h.pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(32)))
        await h.loader.waitForLoads(1)
        h.loader.resume()
        for task in [small, small2, large] { #expect(await code { try await task.response } == .decodingFailed) }
        #expect(h.loader.loadCount == 1)
        #expect(decoder.callCount == 2)
        _ = await code { try await h.pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(8))) }
        #expect(h.loader.loadCount == 2)
        await h.waitUntilIdle()
        expectBalanced(h.pipeline.metrics)
    }
}

// MARK: - Metrics

@Suite(.timeLimit(.minutes(1)))
struct GraphMetricsContractTests {
    /// A mix of shared success, failure and cancellation: once idle, every stage's started
    /// work is completed, failed or cancelled exactly once; joins, network requests, peak in
    /// flight and bytes add up.
    @Test func countersAddUpOnceIdle() async throws {
        let h = PipelineHarness()
        let bad = URL(string: "https://example.com/bad.jpg")!
        let cancelled = URL(string: "https://example.com/cancelled.jpg")!
        h.loader.serve(Data(repeating: 3, count: 100), for: url)
        h.loader.fail(bad, statusCode: 404)
        h.loader.isSuspended = true
        let ok = (0..<4).map { i in h.pipeline.imageTask(with: ImageRequest(url: url, processors: i % 2 == 0 ? [] : [MockImageProcessor("p")])) }
        let failing = (0..<3).map { _ in h.pipeline.imageTask(with: ImageRequest(url: bad)) }
        let gone = (0..<2).map { _ in h.pipeline.imageTask(with: ImageRequest(url: cancelled, processors: [MockImageProcessor("q")])) }
        await h.loader.waitForLoads(3)
        #expect(h.pipeline.metrics.peakNetworkRequestsInFlight == 3)
        #expect(h.pipeline.metrics.networkRequestsInFlight == 3)
        gone.forEach { $0.cancel() }
        await h.loader.waitForCancellations(1)
        h.loader.resume()
        for task in ok { _ = try await task.response }
        for task in failing { _ = await code { try await task.response } }
        await h.waitUntilIdle()
        let m = h.pipeline.metrics
        expectBalanced(m)
        #expect(m.fetch.started == 3)
        #expect(m.fetch.joined == 0) // one decode per URL subscribes to each fetch
        #expect(m.fetch.completed == 1 && m.fetch.failed == 1 && m.fetch.cancelled == 1)
        #expect(m.decode.started == 3)
        #expect(m.decode.joined == 4) // ok: 1 plain + 1 processing stage; failing: 2 plain
        #expect(m.process.started == 2 && m.process.joined == 2)
        #expect(m.networkRequestsStarted == 3)
        #expect(m.peakNetworkRequestsInFlight == 3)
        #expect(m.bytesDownloaded == 100)
        #expect(m.decodes == 1)
        #expect(m.processorApplications == 1)
    }
}
