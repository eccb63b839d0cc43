import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A loader that answers attempt N with the N-th scripted outcome, then with success; each
/// attempt may first deliver part of the body.
final class ScriptedRetryLoader: DataLoading {
    enum Outcome: Sendable {
        case status(Int)
        case error(URLError.Code)
        case cancellationError
        case partialThenError(bytes: Int, URLError.Code)
        case empty
    }

    let body: Data
    private let script: Mutex<[Outcome]>
    private let calls = Mutex(0)
    /// When set, every attempt waits here until released (for cancellation tests).
    let gate: Mutex<CheckedContinuation<Void, Never>?> = Mutex(nil)
    let holds: Bool
    private let started = Mutex<[CheckedContinuation<Void, Never>]>([])

    init(body: Data = Data(repeating: 7, count: 100), script: [Outcome], holds: Bool = false) {
        self.body = body
        self.script = Mutex(script)
        self.holds = holds
    }

    var callCount: Int { calls.withLock { $0 } }

    func waitForFirstCall() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done = calls.withLock { n in
                if n > 0 { return true }
                started.withLock { $0.append(c) }
                return false
            }
            if done { c.resume() }
        }
    }

    func loadData(for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void) async throws -> URLResponse {
        let waiting = calls.withLock { n in
            n += 1
            return started.withLock { s in defer { s = [] }; return s }
        }
        waiting.forEach { $0.resume() }
        if holds {
            // A hold ended only by cancellation: an AsyncStream that never yields ends its
            // iteration when the task is cancelled.
            await untilCancelled()
            try Task.checkCancellation()
        }
        let url = request.url!
        let next: Outcome? = script.withLock { $0.isEmpty ? nil : $0.removeFirst() }
        let ok = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Content-Length": "\(body.count)"])!
        switch next {
        case .status(let status)?: throw MockDataLoader.StatusError(statusCode: status)
        case .error(let code)?: throw URLError(code)
        case .cancellationError?: throw CancellationError()
        case .partialThenError(let bytes, let code)?:
            try didReceive(body.prefix(bytes), ok)
            throw URLError(code)
        case .empty?:
            return HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: [:])!
        case nil:
            try didReceive(body, ok)
            return ok
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct RetryContractTests {
    static let url = URL(string: "https://example.com/retry.jpg")!

    static func pipeline(_ loader: ScriptedRetryLoader, attempts: Int, shouldRetry: (@Sendable (ImagePipeline.Error) -> Bool)? = nil) -> ImagePipeline {
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.retryPolicy = shouldRetry.map { ImagePipeline.RetryPolicy(maximumAttempts: attempts, shouldRetry: $0) }
            ?? ImagePipeline.RetryPolicy(maximumAttempts: attempts)
        return ImagePipeline(configuration: configuration)
    }

    @Test(arguments: [500, 502, 503, 599, 408, 429])
    func transientStatusesAreRetriedUpToTheMaximum(status: Int) async throws {
        let loader = ScriptedRetryLoader(script: Array(repeating: .status(status), count: 5))
        let pipeline = Self.pipeline(loader, attempts: 3)
        let error = await errorThrown { try await pipeline.image(for: Self.url) }
        let pipelineError = try #require(error as? ImagePipeline.Error)
        #expect(pipelineError.code == .dataLoadingFailed)
        #expect(pipelineError.statusCode == status)
        #expect(loader.callCount == 3)
        let m = pipeline.metrics
        #expect(m.networkRequestsStarted == 3) // attempts are counted
        #expect(m.fetch.started == 1)
        #expect(m.fetch.failed == 1)
    }

    @Test(arguments: [400, 401, 403, 404, 410])
    func clientErrorsAreNotRetried(status: Int) async throws {
        let loader = ScriptedRetryLoader(script: Array(repeating: .status(status), count: 5))
        let pipeline = Self.pipeline(loader, attempts: 3)
        let error = await errorThrown { try await pipeline.image(for: Self.url) }
        #expect((error as? ImagePipeline.Error)?.statusCode == status)
        #expect(loader.callCount == 1)
        #expect(pipeline.metrics.networkRequestsStarted == 1)
    }

    @Test func transportErrorsAreRetriedAndASuccessEndsTheRetries() async throws {
        let loader = ScriptedRetryLoader(script: [.error(.networkConnectionLost), .error(.timedOut)])
        let pipeline = Self.pipeline(loader, attempts: 5)
        let response = try await pipeline.image(for: Self.url)
        #expect(!response.isPreview)
        #expect(loader.callCount == 3)
        #expect(pipeline.metrics.networkRequestsStarted == 3)
        #expect(pipeline.metrics.fetch.failed == 0)
        #expect(pipeline.metrics.fetch.completed == 1)
    }

    @Test func defaultPolicyIsNoRetry() async throws {
        let loader = ScriptedRetryLoader(script: [.status(503)])
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        _ = await errorThrown { try await pipeline.image(for: Self.url) }
        #expect(loader.callCount == 1)
    }

    @Test func emptyBodyIsNotRetriedByDefault() async throws {
        let loader = ScriptedRetryLoader(script: [.empty, .empty, .empty])
        let pipeline = Self.pipeline(loader, attempts: 3)
        let error = await errorThrown { try await pipeline.image(for: Self.url) }
        #expect((error as? ImagePipeline.Error)?.code == .dataIsEmpty)
        #expect(loader.callCount == 1)
    }

    @Test func aCancellationErrorFromTheLoaderIsNeverRetriedNorAskedAbout() async throws {
        let asked = CallCounter()
        let loader = ScriptedRetryLoader(script: [.cancellationError, .error(.cancelled)])
        let pipeline = Self.pipeline(loader, attempts: 5) { _ in asked.increment(); return true }
        let error = await errorThrown { try await pipeline.image(for: Self.url) }
        #expect((error as? ImagePipeline.Error)?.code == .cancelled)
        #expect(loader.callCount == 1)
        #expect(asked.value == 0)
    }

    @Test func cancellingTheOnlySubscriberStopsRetries() async throws {
        let asked = CallCounter()
        let loader = ScriptedRetryLoader(script: [], holds: true)
        let pipeline = Self.pipeline(loader, attempts: 5) { _ in asked.increment(); return true }
        let task = pipeline.imageTask(with: ImageRequest(url: Self.url))
        await loader.waitForFirstCall()
        task.cancel()
        await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 && $0.networkRequestsInFlight == 0 }
        #expect(loader.callCount == 1)
        #expect(asked.value == 0)
        #expect(pipeline.metrics.fetch.cancelled == 1)
    }

    @Test func aRetryOfSharedWorkIsSeenOnceByEverySubscriber() async throws {
        let loader = ScriptedRetryLoader(script: [.status(503)])
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 2)
        let queue = WorkQueue(name: "retry.downloads", maxConcurrentCount: 1, execution: .tasks)
        queue.isSuspended = true
        configuration.dataLoadingQueue = queue
        let pipeline = ImagePipeline(configuration: configuration)
        let a = pipeline.imageTask(with: ImageRequest(url: Self.url))
        let b = pipeline.imageTask(with: ImageRequest(url: Self.url, processors: [MockImageProcessor("x")]))
        let c = pipeline.dataTask(with: ImageRequest(url: Self.url))
        let streamA = a.events
        queue.isSuspended = false
        let ra = try await a.response
        let rb = try await b.response
        let (data, _) = try await c.response
        #expect(!ra.isPreview && !rb.isPreview)
        #expect(data.count == 100)
        #expect(loader.callCount == 2)
        var finishedEvents = 0
        for await event in streamA { if case .finished(let r) = event { finishedEvents += 1; #expect((try? r.get()) != nil) } }
        #expect(finishedEvents == 1)
        let m = pipeline.metrics
        #expect(m.fetch.started == 1)
        #expect(m.fetch.joined == 1) // the data task; `b` joined at the decode
        #expect(m.decode.joined == 1)
        #expect(m.fetch.failed == 0)
        #expect(m.networkRequestsStarted == 2)
    }

    /// The default policy retries transport errors however they were thrown, and nothing of
    /// the caller's own: a data closure's error is final unless it is a transient `URLError`.
    @Test(arguments: [
        (ClosureFailure.own, 1), (.url(.timedOut), 3), (.url(.networkConnectionLost), 3),
        (.url(.cannotConnectToHost), 3), (.url(.badURL), 1), (.url(.unsupportedURL), 1),
        (.loader(.incompleteBody(expected: 10, received: 4)), 3), (.loader(.invalidDataURL), 1),
        (.loader(.fileNotFound(URL(fileURLWithPath: "/nonexistent"))), 1),
    ])
    func theDefaultPolicyRetriesOnlyTransportFailures(failure: ClosureFailure, expectedCalls: Int) async throws {
        struct Boom: Error {}
        var configuration = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 3)
        let pipeline = ImagePipeline(configuration: configuration)
        let calls = CallCounter()
        let error = await errorThrown {
            try await pipeline.image(for: ImageRequest(id: "boom", data: {
                calls.increment()
                switch failure {
                case .own: throw Boom()
                case .url(let code): throw URLError(code)
                case .loader(let error): throw error
                }
            }))
        }
        #expect((error as? ImagePipeline.Error)?.code == .dataLoadingFailed)
        #expect(calls.value == expectedCalls, "\(failure)")
    }

    enum ClosureFailure: Sendable, CustomStringConvertible {
        case own
        case url(URLError.Code)
        case loader(DataLoader.Error)
        var description: String {
            switch self {
            case .own: "the closure's own error"
            case .url(let code): "URLError \(code.rawValue)"
            case .loader(let error): "\(error)"
            }
        }
    }

    /// An attempt that fails part-way then a full retry: the progress a task reports is never
    /// more than the body and ends at the whole body.
    @Test func progressAcrossARetryEndsAtTheWholeBody() async throws {
        let loader = ScriptedRetryLoader(script: [.partialThenError(bytes: 60, .networkConnectionLost)])
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 2)
        let queue = WorkQueue(name: "retry.downloads2", maxConcurrentCount: 1, execution: .tasks)
        queue.isSuspended = true
        configuration.dataLoadingQueue = queue
        let pipeline = ImagePipeline(configuration: configuration)
        let task = pipeline.imageTask(with: ImageRequest(url: Self.url))
        let stream = task.events
        queue.isSuspended = false
        var progress: [ImageTask.Progress] = []
        for await event in stream { if case .progress(let p) = event { progress.append(p) } }
        #expect(loader.callCount == 2)
        #expect(progress.last == ImageTask.Progress(completed: 100, total: 100))
        #expect(progress.allSatisfy { $0.completed <= $0.total })
        #expect(pipeline.metrics.bytesDownloaded == 160) // every byte received counts
    }
}

@Suite(.timeLimit(.minutes(1)))
struct DataContractTests {
    static let url = URL(string: "https://example.com/data-contract.jpg")!

    @Test func dataSharesAnImageFetchAndNeverDecodes() async throws {
        let harness = PipelineHarness()
        harness.loader.isSuspended = true
        let image = harness.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let data = harness.pipeline.dataTask(with: ImageRequest(url: Self.url, priority: .high))
        async let bytes = harness.pipeline.data(for: ImageRequest(url: Self.url))
        await harness.pipeline.waitForMetrics { $0.fetch.joined == 2 }
        harness.loader.resume()
        let (d1, r1) = try await data.response
        let (d2, _) = try await bytes
        _ = try await image.response
        #expect(d1 == d2)
        #expect(d1.count == 64)
        #expect((r1 as? HTTPURLResponse)?.statusCode == 200)
        #expect(harness.loader.loadCount == 1)
        #expect(harness.decoder.decodeCount == 1) // the image request's, not the data loads'

        // Data alone never decodes, even with the image in the memory cache: it loads the bytes.
        let (again, _) = try await harness.pipeline.data(for: ImageRequest(url: Self.url))
        #expect(again.count == 64)
        #expect(harness.decoder.decodeCount == 1)
        #expect(harness.pipeline.metrics.decode.started == 1)
    }

    @Test func dataRespectsReturnCacheDataDontLoad() async throws {
        let harness = PipelineHarness()
        let error = await errorThrown {
            try await harness.pipeline.data(for: ImageRequest(url: Self.url, options: [.returnCacheDataDontLoad]))
        }
        #expect(ImagePipeline.Error.Code.of(error!) == .dataMissingInCache)
        #expect(harness.loader.loadCount == 0)
    }

    @Test func dataTaskPriorityAndCancellation() async throws {
        let downloads = WorkQueue(name: "contract.data.downloads", maxConcurrentCount: 2, execution: .tasks)
        downloads.isSuspended = true
        let harness = PipelineHarness { $0.dataLoadingQueue = downloads }
        let task = harness.pipeline.dataTask(with: ImageRequest(url: Self.url, priority: .low))
        #expect(downloads.pendingPriorities == [.low])
        task.priority = .veryHigh
        #expect(downloads.pendingPriorities == [.veryHigh])
        task.cancel()
        #expect(task.state == .cancelled)
        #expect(downloads.pendingCount == 0)
        let error = await errorThrown { try await task.response }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        let awaiting = Task { try await harness.pipeline.data(for: ImageRequest(url: PipelineURLs.b)) }
        awaiting.cancel()
        let cancelled = await errorThrown { try await awaiting.value }
        #expect(ImagePipeline.Error.Code.of(cancelled!) == .cancelled)
    }
}

/// `ImageRequest(id:data:)`: coalescing by id, errors, cancellation reaching the closure.
@Suite(.timeLimit(.minutes(1)))
struct ClosureRequestContractTests {
    static let png: Data = { try! Bitmap(width: 4, height: 4, format: .rgba8) { for i in $0.indices { $0[i] = UInt8(i % 256) } }.encode(as: .png) }()

    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>], arrived: Int, arrivalWaiters: [(Int, CheckedContinuation<Void, Never>)])>((false, [], 0, []))
        func pass() async {
            let ready: [CheckedContinuation<Void, Never>] = state.withLock { s in
                s.arrived += 1
                let r = s.arrivalWaiters.filter { $0.0 <= s.arrived }.map(\.1)
                s.arrivalWaiters.removeAll { $0.0 <= s.arrived }
                return r
            }
            ready.forEach { $0.resume() }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let open = state.withLock { s in
                    if s.open { return true }
                    s.waiters.append(c)
                    return false
                }
                if open { c.resume() }
            }
        }
        func open() {
            let waiters = state.withLock { s in s.open = true; defer { s.waiters = [] }; return s.waiters }
            waiters.forEach { $0.resume() }
        }
        func waitForArrivals(_ n: Int) async {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let done = state.withLock { s in
                    if s.arrived >= n { return true }
                    s.arrivalWaiters.append((n, c))
                    return false
                }
                if done { c.resume() }
            }
        }
    }

    static func pipeline() -> ImagePipeline {
        var configuration = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        configuration.decodingQueue = WorkQueue(name: "closure.decode", maxConcurrentCount: 2, execution: .threads)
        return ImagePipeline(configuration: configuration)
    }

    @Test func requestsWithOneIdShareOneCallOfTheClosure() async throws {
        let pipeline = Self.pipeline()
        let calls = CallCounter()
        let gate = Gate()
        let make: @Sendable (String) -> ImageRequest = { id in
            ImageRequest(id: id, data: { calls.increment(); await gate.pass(); return Self.png })
        }
        let tasks = [make("one"), make("one"), make("one"), make("two")].map { pipeline.imageTask(with: $0) }
        await gate.waitForArrivals(2)
        gate.open()
        for task in tasks {
            let response = try await task.response
            #expect(response.image.width == 4)
            #expect(response.urlResponse == nil)
        }
        #expect(calls.value == 2)
        let (bytes, urlResponse) = try await pipeline.data(for: ImageRequest(id: "three", data: { Self.png }))
        #expect(bytes == Self.png)
        #expect(urlResponse == nil)
    }

    struct Boom: Error, Equatable {}

    @Test func anErrorThrownByTheClosureFailsAsDataLoadingFailedWithIt() async throws {
        let pipeline = Self.pipeline()
        let error = await errorThrown { try await pipeline.image(for: ImageRequest(id: "boom", data: { throw Boom() })) }
        let e = try #require(error as? ImagePipeline.Error)
        #expect(e.code == .dataLoadingFailed)
        #expect(e.underlyingError as? Boom == Boom())
        #expect(e.statusCode == nil)
        let empty = await errorThrown { try await pipeline.image(for: ImageRequest(id: "empty", data: { Data() })) }
        #expect((empty as? ImagePipeline.Error)?.code == .dataIsEmpty)
        // A failure is not remembered: the next request calls the closure again.
        let calls = CallCounter()
        let flaky = ImageRequest(id: "flaky", data: { calls.increment(); if calls.value == 1 { throw Boom() }; return Self.png })
        _ = await errorThrown { try await pipeline.image(for: flaky) }
        _ = try await pipeline.image(for: flaky)
        #expect(calls.value == 2)
    }

    @Test func cancellationReachesTheClosuresSwiftTask() async throws {
        let pipeline = Self.pipeline()
        let sawCancellation = Gate()
        let started = Gate()
        let request = ImageRequest(id: "slow", data: {
            await started.pass() // the test opens it at once; arrival is what it waits for
            await untilCancelled() // ends when the task is cancelled
            if Task.isCancelled { await sawCancellation.pass() }
            throw CancellationError()
        })
        started.open()
        sawCancellation.open()
        let load = Task { try await pipeline.image(for: request) }
        await started.waitForArrivals(1)
        load.cancel()
        let error = await errorThrown { try await load.value }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        await sawCancellation.waitForArrivals(1) // the closure saw its task cancelled
        await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
    }

    /// Only one of two subscribers cancels: the closure's call goes on for the other.
    @Test func cancellingOneOfTwoSubscribersLeavesTheClosureRunning() async throws {
        let pipeline = Self.pipeline()
        let gate = Gate()
        let cancelled = CallCounter()
        let request = ImageRequest(id: "shared", data: {
            await gate.pass()
            if Task.isCancelled { cancelled.increment() }
            return Self.png
        })
        let a = pipeline.imageTask(with: request)
        let b = pipeline.imageTask(with: request)
        await gate.waitForArrivals(1)
        a.cancel()
        gate.open()
        let response = try await b.response
        #expect(response.image.width == 4)
        #expect(cancelled.value == 0)
        #expect(a.state == .cancelled)
    }
}

/// Returns when the calling task is cancelled (an unfinished stream's iteration ends then).
func untilCancelled() async {
    let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
    for await _ in stream {}
    continuation.finish() // kept alive until the iteration ended
}
