import Foundation
import Synchronization

/// Loads images ahead of need — the rows just below a scrolling feed — at low priority and
/// with bounded concurrency, so that they are in the pipeline's caches when they are shown.
///
/// Each prefetch is an ordinary request in the pipeline's work graph: a visible request for
/// the same image joins the prefetch's running work (one download) and raises its priority at
/// once; stopping the prefetch removes only the prefetch's own subscription, so the download
/// goes on for the visible request.
///
/// - At most ``maxConcurrentRequestCount`` prefetches run at once; the rest wait in FIFO order.
/// - A request whose result is already cached (``ImagePipeline/cache``), or that is already
///   pending or running here, is skipped.
/// - Two requests are the same prefetch when their image ID and credentials agree and, for
///   ``Destination/memoryCache``, their decode size and processors too (the decode size as
///   the pipeline rounds it, under ``ImagePipeline/Configuration/isDecodeSizeBucketingEnabled``).
/// - Errors are swallowed: prefetching is best effort (``outcomes`` counts them).
///
/// All members are safe to call from any thread and take effect before they return: the
/// bookkeeping is a small state machine under a lock (no actor hop, so a scroll callback's
/// `startPrefetching` has subscribed its first requests when it returns), and loads run in
/// the pipeline. Releasing the prefetcher stops its prefetches.
///
/// ```swift
/// let prefetcher = ImagePrefetcher(pipeline: pipeline)
/// prefetcher.startPrefetching(with: upcomingURLs)
/// …
/// prefetcher.stopPrefetching(with: urlsScrolledPast)
/// ```
public final class ImagePrefetcher: Sendable {
    /// Where a prefetch leaves its result.
    public enum Destination: Sendable, Hashable {
        /// A normal image load: downloaded and decoded, so the decoded image lands in the
        /// memory cache (and the bytes in the disk cache).
        case memoryCache
        /// The bytes only (``ImagePipeline/dataTask(with:)``): downloaded into the disk cache,
        /// never decoded. Cheaper when the display size is not known yet.
        case diskCache
    }

    /// A running prefetch's handle.
    enum Handle: Sendable {
        case image(ImageTask)
        case data(DataTask)

        func cancel() {
            switch self {
            case .image(let task): task.cancel()
            case .data(let task): task.cancel()
            }
        }

        func setPriority(_ priority: ImageRequest.Priority) {
            switch self {
            case .image(let task): task.priority = priority
            case .data(let task): task.priority = priority
            }
        }
    }

    private struct State {
        var machine: PrefetchStateMachine<Handle>
        var didComplete: (@Sendable () -> Void)?
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// The pipeline the prefetches run in.
    public let pipeline: ImagePipeline
    /// Where prefetches leave their results.
    public let destination: Destination
    /// The most prefetches running at once.
    public let maxConcurrentRequestCount: Int

    private let state: Mutex<State>

    /// Creates a prefetcher.
    ///
    /// - Parameters:
    ///   - pipeline: where the prefetches run. Default ``ImagePipeline/shared``.
    ///   - destination: decode into memory, or fetch bytes for the disk only. Default
    ///     ``Destination/memoryCache``.
    ///   - maxConcurrentRequestCount: the most prefetches running at once, at least 1.
    ///     Default 2.
    public init(pipeline: ImagePipeline = .shared, destination: Destination = .memoryCache, maxConcurrentRequestCount: Int = 2) {
        self.pipeline = pipeline
        self.destination = destination
        self.maxConcurrentRequestCount = maxConcurrentRequestCount
        self.state = Mutex(State(machine: PrefetchStateMachine(maxConcurrentCount: maxConcurrentRequestCount, priority: .low)))
    }

    deinit {
        let (handles, _) = state.withLock { $0.machine.stopAll() }
        handles.forEach { $0.cancel() }
    }

    // MARK: - Settings

    /// The priority of every prefetch. Changing it reaches pending prefetches and the running
    /// ones' tasks (image tasks, or data tasks for ``Destination/diskCache``). A visible
    /// request that joins a prefetch's work raises that work's priority regardless.
    /// Default `.low`.
    public var priority: ImageRequest.Priority {
        get { state.withLock { $0.machine.priority } }
        set {
            let handles = state.withLock { $0.machine.setPriority(newValue) }
            handles.forEach { $0.setPriority(newValue) }
        }
    }

    /// While `true`, no new prefetch starts; running ones go on. Setting it back to `false`
    /// continues with the pending prefetches in order. Default `false`.
    public var isPaused: Bool {
        get { state.withLock { $0.machine.isPaused } }
        set {
            let starts = state.withLock { $0.machine.setPaused(newValue) }
            perform(starts)
        }
    }

    /// Called (on an arbitrary thread, never under a lock) each time the last pending or
    /// running prefetch ends — finished or stopped — and when ``startPrefetching(with:)-([ImageRequest])``
    /// finds everything it was given already cached while nothing else is pending or running
    /// (so that code waiting for the signal is told the batch is done). Default `nil`.
    public var didComplete: (@Sendable () -> Void)? {
        get { state.withLock { $0.didComplete } }
        set { state.withLock { $0.didComplete = newValue } }
    }

    /// Whether nothing is pending or running.
    public var isIdle: Bool { state.withLock { $0.machine.isIdle } }

    // MARK: - Prefetching

    /// Starts prefetching the images at `urls` (see ``startPrefetching(with:)-([ImageRequest])``).
    public func startPrefetching(with urls: [URL]) {
        startPrefetching(with: urls.map { ImageRequest(url: $0) })
    }

    /// Starts prefetching `requests` in order, at ``priority``. Requests already cached or
    /// already pending or running here are skipped. The first prefetches that fit in
    /// ``maxConcurrentRequestCount`` have subscribed to the pipeline when this returns.
    public func startPrefetching(with requests: [ImageRequest]) {
        let items = requests.compactMap { request -> (key: ImageCacheKey, request: ImageRequest)? in
            let request = pipeline.bucketed(request)
            return isCached(request) ? nil : (key(for: request), request)
        }
        guard !items.isEmpty else {
            // Everything was cached: the batch is done now, if nothing else runs.
            if !requests.isEmpty { signalIdle() }
            return
        }
        let starts = state.withLock { $0.machine.enqueue(items) }
        perform(starts)
    }

    /// Stops prefetching the images at `urls` (see ``stopPrefetching(with:)-([ImageRequest])``).
    public func stopPrefetching(with urls: [URL]) {
        stopPrefetching(with: urls.map { ImageRequest(url: $0) })
    }

    /// Stops the prefetches of `requests`: pending ones never start, running ones are
    /// cancelled. Only the prefetch's own subscription ends: work that a visible request also
    /// needs goes on.
    public func stopPrefetching(with requests: [ImageRequest]) {
        let keys = requests.map { key(for: pipeline.bucketed($0)) }
        let (handles, starts, becameIdle) = state.withLock { $0.machine.stop(keys) }
        handles.forEach { $0.cancel() }
        perform(starts)
        if becameIdle { signalIdle() }
    }

    /// Stops every prefetch.
    public func stopPrefetching() {
        let (handles, becameIdle) = state.withLock { $0.machine.stopAll() }
        handles.forEach { $0.cancel() }
        if becameIdle { signalIdle() }
    }

    /// Returns once nothing is pending or running (at once if nothing is). While paused with
    /// prefetches pending, it waits for them.
    public func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { state in
                if state.machine.isIdle { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// How prefetches ended so far: with a result, or with an error (stopped ones are not
    /// counted).
    public var outcomes: (succeeded: Int, failed: Int) {
        state.withLock { ($0.machine.succeededCount, $0.machine.failedCount) }
    }

    // MARK: - Internals

    /// The identity of a prefetch: what its result is cached under. Decoded images differ by
    /// decode size and processors; bytes only by image and credentials.
    private func key(for request: ImageRequest) -> ImageCacheKey {
        let fingerprint = request.fetchKey.credentialFingerprint
        switch destination {
        case .memoryCache:
            return ImageCacheKey(imageID: request.imageID ?? "", credentialFingerprint: fingerprint,
                                 decodeSize: request.thumbnail, processors: request.processors.map(\.identifier))
        case .diskCache:
            return ImageCacheKey(imageID: request.imageID ?? "", credentialFingerprint: fingerprint)
        }
    }

    private func isCached(_ request: ImageRequest) -> Bool {
        switch destination {
        case .memoryCache: pipeline.cache.containsCachedImage(for: request)
        case .diskCache: pipeline.cache.containsData(for: request)
        }
    }

    /// Starts loads outside the lock, then attaches their handles.
    private func perform(_ starts: [PrefetchStateMachine<Handle>.Start]) {
        for start in starts {
            let handle = load(start)
            let action = state.withLock { $0.machine.attach(handle, key: start.key, token: start.token) }
            switch action {
            case .keep: break
            case .setPriority(let priority): handle.setPriority(priority)
            case .cancel: handle.cancel()
            }
        }
    }

    private func load(_ start: PrefetchStateMachine<Handle>.Start) -> Handle {
        let (key, token, request) = (start.key, start.token, start.request)
        switch destination {
        case .memoryCache:
            let task = pipeline.imageTask(with: request)
            Task.detached(priority: .low) { [weak self] in
                let succeeded = (try? await task.response) != nil
                self?.finish(key: key, token: token, succeeded: succeeded)
            }
            return .image(task)
        case .diskCache:
            let task = pipeline.dataTask(with: request)
            Task.detached(priority: .low) { [weak self] in
                let succeeded = (try? await task.response) != nil
                self?.finish(key: key, token: token, succeeded: succeeded)
            }
            return .data(task)
        }
    }

    private func finish(key: ImageCacheKey, token: Int, succeeded: Bool) {
        let (starts, becameIdle) = state.withLock { $0.machine.finish(key: key, token: token, succeeded: succeeded) }
        perform(starts)
        if becameIdle { signalIdle() }
    }

    private func signalIdle() {
        let (waiters, didComplete) = state.withLock { state in
            // Something may have been queued since the transition; then it is not idle now.
            guard state.machine.isIdle else { return ([CheckedContinuation<Void, Never>](), nil as (@Sendable () -> Void)?) }
            let waiters = state.idleWaiters
            state.idleWaiters = []
            return (waiters, state.didComplete)
        }
        // The signal first: code resumed from `waitUntilIdle()` finds it given.
        didComplete?()
        waiters.forEach { $0.resume() }
    }
}
