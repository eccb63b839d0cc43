import Foundation
import Synchronization
import Lumen
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A ``Lumen/DataLoading`` double for tests: serves given bytes per URL, can be suspended,
/// failed and counted, and lets a test wait — without sleeping — until loads have started.
///
/// ```swift
/// let loader = MockDataLoader()
/// loader.isSuspended = true
/// let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
/// async let a = pipeline.image(for: url)
/// await loader.waitForLoads(1)   // the load has started and is held
/// loader.resume()
/// ```
///
/// Chunk by chunk: serve the body split at chosen offsets (``serve(_:for:declaredLength:splitAt:)``)
/// and set ``holdsChunks``; each chunk then waits for ``releaseChunks(_:)``, and
/// ``waitForChunks(_:)`` returns once the pipeline has taken a number of chunks.
///
/// Responses are `HTTPURLResponse`s with status 200 and a `Content-Length` header (unless
/// the served length is declared unknown). A started load counts in ``loadCount`` before it
/// waits for ``resume()``; a load ended by cancellation counts in ``cancelledCount``.
public final class MockDataLoader: DataLoading {
    /// What the loader serves for a URL.
    public struct Response: Sendable {
        /// The body.
        public var data: Data
        /// The declared `Content-Length`: `nil` declares `data.count`, a negative value sends
        /// no length (unknown), any other value is sent as is (a lying server).
        public var declaredLength: Int?
        /// Offsets where the body is cut into chunks (each chunk ends at one of them or at the
        /// end); when empty, ``MockDataLoader/chunkSize`` decides.
        public var splitOffsets: [Int]

        /// Creates a response; each parameter sets the property of the same name (`splitAt`
        /// sets ``splitOffsets``).
        public init(data: Data, declaredLength: Int? = nil, splitAt splitOffsets: [Int] = []) {
            self.data = data
            self.declaredLength = declaredLength
            self.splitOffsets = splitOffsets
        }

        /// The chunks' ranges: cut at ``splitOffsets`` when there are any, else every
        /// `chunkSize` bytes (one chunk when `nil`).
        func chunkRanges(chunkSize: Int?) -> [Range<Int>] {
            var ends = splitOffsets.filter { $0 > 0 && $0 < data.count }.sorted()
            if ends.isEmpty, let chunkSize {
                ends = Array(stride(from: max(1, chunkSize), to: data.count, by: max(1, chunkSize)))
            }
            ends.append(data.count)
            var ranges: [Range<Int>] = []
            var start = 0
            for end in ends where end > start {
                ranges.append(start..<end)
                start = end
            }
            return ranges
        }
    }

    /// The error thrown for URLs failed with a status code.
    public struct StatusError: HTTPStatusCodeProviding, Sendable, Hashable {
        /// The HTTP status.
        public var status: Int
        /// The response's `Retry-After` value, for ``Lumen/HTTPStatusCodeProviding``.
        public var retryAfter: String?
        /// Creates the error for the HTTP status `statusCode`, with the `Retry-After` value
        /// `retryAfter` (none by default).
        public init(statusCode: Int, retryAfter: String? = nil) {
            self.status = statusCode
            self.retryAfter = retryAfter
        }
        /// ``status``, for ``Lumen/HTTPStatusCodeProviding``: never `nil`.
        public var statusCode: Int? { status }
    }

    /// Something counted (loads started, loads cancelled, chunks delivered) and the tasks
    /// waiting for the count to reach a value.
    private struct Tally {
        private(set) var count = 0
        var waiters = ConditionWaiters<Int>()

        /// Adds one; returns the waiters it satisfies (resume them after unlocking).
        mutating func increment() -> [CheckedContinuation<Void, Never>] {
            count += 1
            return waiters.takeSatisfied(by: count)
        }
    }

    private struct State {
        var defaultResponse: Response
        var responses: [URL: Response] = [:]
        var failures: [URL: any Error] = [:]
        var isSuspended = false
        var chunkSize: Int?
        var loads = Tally()
        var loadCounts: [URL: Int] = [:]
        var requestedURLs: [URL] = []
        var cancellations = Tally()
        var held: [Int: CheckedContinuation<Void, any Error>] = [:]
        var cancelledHolds: Set<Int> = []
        var nextHold = 0
        var holdsChunks = false
        var chunkPermits = 0
        /// Chunks waiting for a permit, in arrival order.
        var chunkHolds: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
        var cancelledChunkHolds: Set<Int> = []
        var deliveredChunks = Tally()
    }

    private let state: Mutex<State>

    /// Creates a loader serving `defaultData` for every URL without its own response.
    /// The default is 64 deterministic bytes.
    public init(defaultData: Data = Data((0..<64).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })) {
        state = Mutex(State(defaultResponse: Response(data: defaultData)))
    }

    // MARK: - Setting up

    /// Serves `data` for `url`; `declaredLength` as in ``Response/declaredLength``; the body
    /// is cut into chunks at `splitAt` (offsets into `data`) when given.
    public func serve(_ data: Data, for url: URL, declaredLength: Int? = nil, splitAt: [Int] = []) {
        state.withLock { $0.responses[url] = Response(data: data, declaredLength: declaredLength, splitAt: splitAt) }
    }

    /// Makes loads of `url` throw `error` (after any suspension).
    public func fail(_ url: URL, with error: any Error) {
        state.withLock { $0.failures[url] = error }
    }

    /// Makes loads of `url` throw a ``StatusError`` with `statusCode`.
    public func fail(_ url: URL, statusCode: Int) {
        fail(url, with: StatusError(statusCode: statusCode))
    }

    /// Serves `url` normally again.
    public func removeFailure(for url: URL) {
        state.withLock { _ = $0.failures.removeValue(forKey: url) }
    }

    /// When set, the body is delivered in chunks of this many bytes (one chunk otherwise).
    public var chunkSize: Int? {
        get { state.withLock { $0.chunkSize } }
        set { state.withLock { $0.chunkSize = newValue } }
    }

    /// While `true`, every chunk of every load waits for a permit from ``releaseChunks(_:)``
    /// before it is handed to the pipeline (a cancelled load stops waiting). Setting it to
    /// `false` lets every chunk through.
    public var holdsChunks: Bool {
        get { state.withLock { $0.holdsChunks } }
        set {
            let released = state.withLock { state in
                state.holdsChunks = newValue
                guard !newValue else { return [CheckedContinuation<Void, any Error>]() }
                let released = state.chunkHolds.map(\.continuation)
                state.chunkHolds = []
                return released
            }
            for continuation in released { continuation.resume() }
        }
    }

    /// Lets `count` more held chunks through, first come first served.
    public func releaseChunks(_ count: Int = 1) {
        let released = state.withLock { state in
            state.chunkPermits += count
            var released: [CheckedContinuation<Void, any Error>] = []
            while state.chunkPermits > 0, !state.chunkHolds.isEmpty {
                state.chunkPermits -= 1
                released.append(state.chunkHolds.removeFirst().continuation)
            }
            return released
        }
        for continuation in released { continuation.resume() }
    }

    /// Chunks the pipeline has taken so far (its callback returned), over all loads.
    public var deliveredChunkCount: Int { state.withLock { $0.deliveredChunks.count } }

    /// Returns once the pipeline has taken at least `count` chunks, over all loads, or once
    /// the calling task is cancelled.
    public func waitForChunks(_ count: Int) async {
        await ConditionWaiters.wait(in: state, \.deliveredChunks.waiters, value: \.deliveredChunks.count) { $0 >= count }
    }

    /// While `true`, started loads wait (counted, holding no data) until ``resume()``.
    /// Setting it to `false` is the same as ``resume()``.
    public var isSuspended: Bool {
        get { state.withLock { $0.isSuspended } }
        set {
            if newValue { state.withLock { $0.isSuspended = true } } else { resume() }
        }
    }

    /// Releases every held load and stops holding new ones.
    public func resume() {
        let held = state.withLock { state in
            state.isSuspended = false
            let held = state.held
            state.held = [:]
            return held
        }
        for continuation in held.values { continuation.resume() }
    }

    // MARK: - Counting

    /// Loads started so far.
    public var loadCount: Int { state.withLock { $0.loads.count } }

    /// Loads of `url` started so far.
    public func loadCount(for url: URL) -> Int { state.withLock { $0.loadCounts[url, default: 0] } }

    /// The URLs of the loads started so far, in the order they started.
    public var requestedURLs: [URL] { state.withLock { $0.requestedURLs } }

    /// Loads that ended because their task was cancelled.
    public var cancelledCount: Int { state.withLock { $0.cancellations.count } }

    /// Loads waiting for ``resume()``.
    public var heldCount: Int { state.withLock { $0.held.count } }

    /// Returns once at least `count` loads have started, or once the calling task is cancelled.
    public func waitForLoads(_ count: Int) async {
        await ConditionWaiters.wait(in: state, \.loads.waiters, value: \.loads.count) { $0 >= count }
    }

    /// Returns once at least `count` loads have ended by cancellation, or once the calling
    /// task is cancelled.
    public func waitForCancellations(_ count: Int) async {
        await ConditionWaiters.wait(in: state, \.cancellations.waiters, value: \.cancellations.count) { $0 >= count }
    }

    // MARK: - DataLoading

    /// Counts the load, waits while ``isSuspended``, then answers for the request's URL: its
    /// failure if one is set, else a 200 response whose body (the URL's or the default one)
    /// goes to `didReceive` chunk by chunk, each chunk first waiting for a permit while
    /// ``holdsChunks`` is on.
    /// - Throws: the error set with ``fail(_:with:)`` or ``fail(_:statusCode:)``, what
    ///   `didReceive` throws, or `CancellationError` when the calling task is cancelled (counted
    ///   in ``cancelledCount``).
    public func loadData(
        for request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        let url = request.url ?? URL(string: "mock:none")!
        let (ready, isSuspended, hold) = state.withLock { state in
            let ready = state.loads.increment()
            state.loadCounts[url, default: 0] += 1
            state.requestedURLs.append(url)
            state.nextHold += 1
            return (ready, state.isSuspended, state.nextHold)
        }
        ready.forEach { $0.resume() }
        do {
            if isSuspended { try await wait(hold) }
            try Task.checkCancellation()
            let (response, failure, chunkSize) = state.withLock { state in
                (state.responses[url] ?? state.defaultResponse, state.failures[url], state.chunkSize)
            }
            if let failure { throw failure }
            var headers: [String: String] = [:]
            let declared = response.declaredLength ?? response.data.count
            if declared >= 0 { headers["Content-Length"] = String(declared) }
            let urlResponse = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: headers)!
            for range in response.chunkRanges(chunkSize: chunkSize) {
                try await waitForChunkPermit()
                try Task.checkCancellation()
                try didReceive(response.data.subdata(in: range), urlResponse)
                state.withLock { $0.deliveredChunks.increment() }.forEach { $0.resume() }
            }
            return urlResponse
        } catch is CancellationError {
            state.withLock { $0.cancellations.increment() }.forEach { $0.resume() }
            throw CancellationError()
        }
    }

    /// While ``holdsChunks`` is on, takes a permit or waits for one (or for cancellation).
    private func waitForChunkPermit() async throws {
        let id: Int? = state.withLock { state in
            guard state.holdsChunks else { return nil }
            if state.chunkPermits > 0, state.chunkHolds.isEmpty {
                state.chunkPermits -= 1
                return nil
            }
            state.nextHold += 1
            return state.nextHold
        }
        guard let id else { return }
        try await park { state, continuation in
            if state.cancelledChunkHolds.remove(id) != nil { return false }
            if !state.holdsChunks { return true }
            if state.chunkPermits > 0, state.chunkHolds.isEmpty {
                state.chunkPermits -= 1
                return true
            }
            state.chunkHolds.append((id, continuation))
            return nil
        } unpark: { state in
            if let index = state.chunkHolds.firstIndex(where: { $0.id == id }) {
                return state.chunkHolds.remove(at: index).continuation
            }
            state.cancelledChunkHolds.insert(id)
            return nil
        }
    }

    /// Holds the calling load until ``resume()`` or cancellation.
    private func wait(_ hold: Int) async throws {
        try await park { state, continuation in
            if state.cancelledHolds.remove(hold) != nil { return false }
            if !state.isSuspended { return true }
            state.held[hold] = continuation
            return nil
        } unpark: { state in
            if let continuation = state.held.removeValue(forKey: hold) { return continuation }
            state.cancelledHolds.insert(hold)
            return nil
        }
    }

    /// Suspends the calling load until the continuation `park` stored is resumed, or throws
    /// `CancellationError` when its task is cancelled. Both closures run under the lock:
    /// `park` answers `true` to go on at once, `false` when the wait was cancelled before it
    /// parked, `nil` once it has stored the continuation; `unpark` (on cancellation) takes the
    /// stored continuation back, or records the cancellation for `park` to find.
    private func park(
        _ park: @escaping @Sendable (inout State, CheckedContinuation<Void, any Error>) -> Bool?,
        unpark: @escaping @Sendable (inout State) -> CheckedContinuation<Void, any Error>?
    ) async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                switch state.withLock({ park(&$0, continuation) }) {
                case true?: continuation.resume()
                case false?: continuation.resume(throwing: CancellationError())
                case nil: break
                }
            }
        } onCancel: {
            state.withLock { unpark(&$0) }?.resume(throwing: CancellationError())
        }
    }
}
