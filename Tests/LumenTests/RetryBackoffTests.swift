import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A retry policy's `sleep` for tests: records every delay asked for and returns at once, or,
/// when `holds`, suspends until ``release()`` or until the waiting task is cancelled (then it
/// throws `CancellationError`, as `Task.sleep` does). Tests wait for a sleep to begin with
/// ``waitForSleeps(_:)`` instead of sleeping themselves.
final class RetrySleeper: Sendable {
    private struct State {
        var delays: [TimeInterval] = []
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())
    private let holds: Bool
    private let gate: AsyncStream<Int>
    private let opener: AsyncStream<Int>.Continuation

    init(holds: Bool = false) {
        self.holds = holds
        (gate, opener) = AsyncStream.makeStream(of: Int.self)
    }

    /// The delays asked for, in order.
    var delays: [TimeInterval] { state.withLock { $0.delays } }

    /// The policy's `sleep`.
    var sleep: @Sendable (TimeInterval) async throws -> Void {
        { [self] seconds in try await self.pause(seconds) }
    }

    private func pause(_ seconds: TimeInterval) async throws {
        let ready = state.withLock { state in
            state.delays.append(seconds)
            let count = state.delays.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        ready.forEach { $0.resume() }
        guard holds else { return }
        // Ends when the gate opens (finish) or when the task is cancelled.
        for await _ in gate {}
        try Task.checkCancellation()
    }

    /// Lets every held sleep, and every later one, return.
    func release() { opener.finish() }

    /// Returns once `count` sleeps have begun.
    func waitForSleeps(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state in
                if state.delays.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct RetryBackoffTests {
    static let failure503 = ImagePipeline.Error.dataLoadingFailed(MockDataLoader.StatusError(statusCode: 503))

    static func failure(retryAfter: String) -> ImagePipeline.Error {
        .dataLoadingFailed(MockDataLoader.StatusError(statusCode: 503, retryAfter: retryAfter))
    }

    // MARK: The policy's arithmetic

    @Test func exponentialBackoffGrowsByTheFactorUpToTheCap() {
        let backoff = ImagePipeline.RetryPolicy.Backoff.exponential(base: 1, factor: 2, maximum: 5, jitter: 0)
        let delays = (1...5).map { backoff.delay(beforeRetry: $0, random: 0.7) }
        #expect(delays == [1, 2, 4, 5, 5])
        // A factor that overflows still stops at the cap.
        let huge = ImagePipeline.RetryPolicy.Backoff.exponential(base: 1, factor: 1e10, maximum: 30, jitter: 0)
        #expect(huge.delay(beforeRetry: 100, random: 0) == 30)
    }

    @Test(arguments: [(0.0, 4.0), (0.5, 2.0), (1.0, 0.0), (0.25, 3.0)])
    func fullJitterTakesARandomPartOfTheWait(random: Double, expected: TimeInterval) {
        let backoff = ImagePipeline.RetryPolicy.Backoff.exponential(base: 1, factor: 2, maximum: 60, jitter: 1)
        #expect(backoff.delay(beforeRetry: 3, random: random) == expected)
        let half = ImagePipeline.RetryPolicy.Backoff.exponential(base: 1, factor: 2, maximum: 60, jitter: 0.5)
        #expect(half.delay(beforeRetry: 3, random: random) == 4 - 2 * random)
    }

    @Test func theDefaultBackoffRetriesAtOnce() {
        let policy = ImagePipeline.RetryPolicy(maximumAttempts: 3)
        #expect(policy.backoff == .immediate)
        #expect(policy.delay(beforeRetry: 1, after: Self.failure503, now: Date(), random: 0) == 0)
        #expect(policy.maximumRetryAfter == 60)
    }

    @Test func retryAfterInDeltaSecondsIsWaitedCappedAndNeverShortensTheBackoff() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        var policy = ImagePipeline.RetryPolicy(maximumAttempts: 3, backoff: .exponential(base: 2, factor: 2, maximum: 30, jitter: 0))
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: "7"), now: now, random: 0) == 7)
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: " 1 "), now: now, random: 0) == 2) // backoff is longer
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: "3600"), now: now, random: 0) == 60) // capped
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: "99999999999999999999999"), now: now, random: 0) == 60)
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: "soon"), now: now, random: 0) == 2) // unparsable
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: "-5"), now: now, random: 0) == 2)
        policy.maximumRetryAfter = 0 // ignored
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: "7"), now: now, random: 0) == 2)
    }

    @Test func retryAfterAsAnHTTPDateIsTheTimeUntilIt() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let policy = ImagePipeline.RetryPolicy(maximumAttempts: 3, maximumRetryAfter: 120)
        let later = LoopbackServer.httpDate(now.addingTimeInterval(45))
        let past = LoopbackServer.httpDate(now.addingTimeInterval(-45))
        let far = LoopbackServer.httpDate(now.addingTimeInterval(86_400))
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: later), now: now, random: 0) == 45)
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: past), now: now, random: 0) == 0)
        #expect(policy.delay(beforeRetry: 1, after: Self.failure(retryAfter: far), now: now, random: 0) == 120)
    }

    @Test func aStatusErrorOfTheDataLoaderCarriesTheResponsesRetryAfter() throws {
        let url = URL(string: "https://images.example.com/a.jpg")!
        let response = try #require(HTTPURLResponse(url: url, statusCode: 429, httpVersion: "HTTP/1.1", headerFields: ["retry-after": "12"]))
        let error = ImagePipeline.Error.dataLoadingFailed(DataLoader.Error.statusCode(429, response))
        #expect(error.retryAfter == "12")
        #expect(ImagePipeline.Error.dataLoadingFailed(DataLoader.Error.statusCode(429, nil)).retryAfter == nil)
        #expect(ImagePipeline.Error.dataIsEmpty.retryAfter == nil)
    }

    // MARK: In the pipeline

    /// A 503 with `Retry-After` from a real server, through the default loader: each retry
    /// waits the larger of the backoff and `Retry-After`, and the waits are counted.
    @Test func theFetchWaitsTheBackoffOrRetryAfterBeforeEachRetry() async throws {
        let server = try LoopbackServer()
        server.respond(path: "/busy.jpg", status: 503, headers: ["Retry-After": "3"])
        let sleeper = RetrySleeper()
        var configuration = ImagePipeline.Configuration()
        configuration.decoder = TrivialImageDecoder()
        var policy = ImagePipeline.RetryPolicy(maximumAttempts: 3, backoff: .exponential(base: 2, factor: 2, maximum: 30, jitter: 0))
        policy.sleep = sleeper.sleep
        configuration.retryPolicy = policy
        let pipeline = ImagePipeline(configuration: configuration)

        let error = await errorThrown { try await pipeline.image(for: server.url(for: "/busy.jpg")) }
        #expect((error as? ImagePipeline.Error)?.statusCode == 503)
        #expect(sleeper.delays == [3, 4]) // max(2, 3), then max(4, 3)
        #expect(server.statistics.requests(for: "/busy.jpg") == 3)
        let metrics = pipeline.metrics
        #expect(metrics.retries == 2)
        #expect(metrics.retryWaitSeconds == 7)
        #expect(metrics.retryWaitsCancelled == 0)
        #expect(metrics.networkRequestsStarted == 3)
    }

    @Test func anHTTPDateRetryAfterIsMeasuredOnThePolicysClock() async throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let server = try LoopbackServer()
        server.respond(path: "/busy.jpg", status: 429, headers: ["Retry-After": LoopbackServer.httpDate(now.addingTimeInterval(30))])
        let sleeper = RetrySleeper()
        var configuration = ImagePipeline.Configuration()
        var policy = ImagePipeline.RetryPolicy(maximumAttempts: 2)
        policy.sleep = sleeper.sleep
        policy.clock = CacheClock { now }
        configuration.retryPolicy = policy
        let pipeline = ImagePipeline(configuration: configuration)

        _ = await errorThrown { try await pipeline.data(for: ImageRequest(url: server.url(for: "/busy.jpg"))) }
        #expect(sleeper.delays == [30])
        #expect(pipeline.metrics.retryWaitSeconds == 30)
    }

    /// Cancelling the only subscriber while the fetch waits to retry ends the wait at once:
    /// no second attempt, the wait counted as cancelled.
    @Test func theLastSubscriberLeavingEndsTheWaitAtOnce() async throws {
        let server = try LoopbackServer()
        server.respond(path: "/busy.jpg", status: 503, headers: ["Retry-After": "30"])
        let sleeper = RetrySleeper(holds: true)
        var configuration = ImagePipeline.Configuration()
        configuration.decoder = TrivialImageDecoder()
        var policy = ImagePipeline.RetryPolicy(maximumAttempts: 3)
        policy.sleep = sleeper.sleep
        configuration.retryPolicy = policy
        let pipeline = ImagePipeline(configuration: configuration)

        let task = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/busy.jpg")))
        await sleeper.waitForSleeps(1)
        task.cancel()
        await pipeline.waitForMetrics { $0.retryWaitsCancelled == 1 && $0.liveTasks == 0 }
        let error = await errorThrown { try await task.response }
        #expect((error as? ImagePipeline.Error)?.code == .cancelled)
        #expect(sleeper.delays == [30])
        #expect(server.statistics.requests(for: "/busy.jpg") == 1)
        let metrics = pipeline.metrics
        #expect(metrics.retries == 0)
        #expect(metrics.retryWaitSeconds == 0)
        #expect(metrics.fetch.cancelled == 1)
    }

    /// The default sleep (`Task.sleep`) is cancellable too: a one-hour backoff ends with the
    /// fetch (the suite's time limit is the guard).
    @Test func theDefaultSleepEndsWhenTheFetchIsCancelled() async throws {
        let server = try LoopbackServer()
        server.respond(path: "/busy.jpg", status: 503)
        var configuration = ImagePipeline.Configuration()
        configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 2, backoff: .exponential(base: 3600, maximum: 3600, jitter: 0))
        let pipeline = ImagePipeline(configuration: configuration)

        let task = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/busy.jpg")))
        // The first attempt has failed once nothing is in flight; the fetch is then waiting
        // (or about to): either way cancelling it ends the wait.
        await pipeline.waitForMetrics { $0.networkRequestsStarted == 1 && $0.networkRequestsInFlight == 0 }
        task.cancel()
        // A cancel that lands while the first attempt's failure is still being handled ends
        // the fetch before it waits at all (then no wait is counted); either way no work is
        // left: an hour's sleep that cancellation did not end would hold the fetch.
        await pipeline.waitForMetrics { $0.liveTasks == 0 }
        #expect(pipeline.metrics.retryWaitsCancelled <= 1)
        #expect(server.statistics.requests(for: "/busy.jpg") == 1)
        #expect(pipeline.metrics.retries == 0)
    }

    /// A subscriber leaving shared work does not end its wait while another still needs it:
    /// the retry happens and the one left gets the image.
    @Test func aWaitOutlivesASubscriberWhileAnotherRemains() async throws {
        let server = try LoopbackServer()
        server.serve(path: "/a.jpg", data: Data(repeating: 7, count: 100))
        server.respond(path: "/a.jpg", status: 503, headers: ["Retry-After": "5"])
        let sleeper = RetrySleeper(holds: true)
        var configuration = ImagePipeline.Configuration()
        configuration.decoder = TrivialImageDecoder()
        var policy = ImagePipeline.RetryPolicy(maximumAttempts: 2)
        policy.sleep = sleeper.sleep
        configuration.retryPolicy = policy
        let pipeline = ImagePipeline(configuration: configuration)
        let url = server.url(for: "/a.jpg")

        let leaving = pipeline.imageTask(with: ImageRequest(url: url))
        let staying = pipeline.imageTask(with: ImageRequest(url: url))
        await sleeper.waitForSleeps(1)
        leaving.cancel()
        server.respond(path: "/a.jpg", status: nil)
        sleeper.release()
        let response = try await staying.response
        #expect(response.cacheType == nil)
        #expect(server.statistics.requests(for: "/a.jpg") == 2)
        let metrics = pipeline.metrics
        #expect(metrics.retries == 1)
        #expect(metrics.retryWaitSeconds == 5)
        #expect(metrics.retryWaitsCancelled == 0)
    }
}
