import Foundation
import Synchronization

extension ImagePipeline {
    /// A stage of the work graph.
    public enum Stage: String, Sendable, Hashable, CaseIterable {
        /// Fetching the original bytes (the data loader or the request's data closure).
        case fetch
        /// Decoding the original bytes at a decode size.
        case decode
        /// Applying one processor to the result of the stage below.
        case process
    }

    /// Something that happened to a stage's shared work. `key` describes the stage key (the
    /// URL and the inputs that make the work distinct).
    public enum Event: Sendable {
        /// New work started (nothing equivalent was running).
        case started(Stage, key: String)
        /// A subscriber joined work that was already running.
        case joined(Stage, key: String)
        /// The work produced its result.
        case completed(Stage, key: String)
        /// The work failed; every subscriber got `error`.
        case failed(Stage, key: String, ImagePipeline.Error)
        /// The last subscriber left and the work was cancelled.
        case cancelled(Stage, key: String)
        /// The disk cache absorbed a problem (a dropped write, an unreadable or corrupt entry
        /// removed, a directory it could not list); the request went on without it (to the
        /// network on a read). Reported for the disk cache of the pipeline's configuration when
        /// it is a ``DataCache``, and for encoding failures under an encoding policy.
        case cacheFailure(DataCache.Failure)

        /// The stage the event is about (`.fetch` for cache failures: the disk cache sits in
        /// front of the fetch).
        public var stage: Stage {
            switch self {
            case .started(let s, _), .joined(let s, _), .completed(let s, _), .failed(let s, _, _), .cancelled(let s, _): s
            case .cacheFailure: .fetch
            }
        }
    }

    /// A snapshot of what the pipeline has done since it was created.
    public struct Metrics: Sendable, Hashable {
        /// All counters at zero.
        public init() {}

        /// Counters for one stage.
        public struct StageMetrics: Sendable, Hashable {
            /// New work started (a new task in the stage's pool).
            public var started = 0
            /// Subscribers that joined work already running.
            public var joined = 0
            /// Work that finished with a result.
            public var completed = 0
            /// Work that failed.
            public var failed = 0
            /// Work cancelled because its last subscriber left.
            public var cancelled = 0
        }

        /// Fetch stage counters.
        public var fetch = StageMetrics()
        /// Decode stage counters.
        public var decode = StageMetrics()
        /// Processing stage counters (one task per processor prefix).
        public var process = StageMetrics()
        /// Calls to the data loader for network URLs (including retries); `file:` and `data:`
        /// URLs and closure requests are not counted.
        public var networkRequestsStarted = 0
        /// Attempts the retry policy started after a failure (each also counted in
        /// ``networkRequestsStarted`` when it reaches the loader for a network URL).
        public var retries = 0
        /// Seconds the fetch stage spent in completed waits before retries (the delays the
        /// retry policy chose: backoff or `Retry-After`); cancelled waits are not included.
        public var retryWaitSeconds: Double = 0
        /// Waits before a retry that ended because the fetch was cancelled (its last
        /// subscriber left): no further attempt was made.
        public var retryWaitsCancelled = 0
        /// Retried downloads that continued a cut body with a range request (`Range` +
        /// `If-Range`) answered `206` with the rest.
        public var resumedDownloads = 0
        /// Bytes the resumed downloads did not load again (received before the cut).
        public var resumedBytes = 0
        /// Range requests whose answer did not continue the bytes received (a `206` for
        /// another range or length, a `416`): the next attempt loaded the whole body.
        public var resumesAbandoned = 0
        /// Calls to ``ImagePipeline/Configuration/willLoadData`` (one per load attempt).
        public var requestHookCalls = 0
        /// Loads that failed because the request hook changed what may identify a user on a
        /// request without a credential scope (``ImagePipeline/Error/Code/unscopedCredentials``).
        public var requestHookRefusals = 0
        /// Calls to the data loader for `file:` and `data:` URLs.
        public var localLoadsStarted = 0
        /// Loader calls running now.
        public var networkRequestsInFlight = 0
        /// The most loader calls ever running at once.
        public var peakNetworkRequestsInFlight = 0
        /// Calls to the decoder for the final image (or a processed entry read from disk);
        /// previews are counted in ``previewDecodes``.
        public var decodes = 0
        /// Decoder calls that stopped part-way because their work was cancelled while they ran
        /// (see ``ImageDecodingContext/isCancelled``); they are counted in ``decodes`` too.
        public var decodesInterrupted = 0
        /// Decode-stage images made by resampling a larger decode of the same image the memory
        /// cache already held (the full-size image, say, after a prefetch), with no fetch and
        /// no decoder call. Not counted in ``decodes``.
        public var resampledFromMemory = 0
        /// Calls to the decoder for progressive previews
        /// (``ImageDecoding/decodePreview(_:context:)``).
        public var previewDecodes = 0
        /// Processors applied to progressive previews (not counted in
        /// ``processorApplications``).
        public var previewProcessorApplications = 0
        /// Calls to processors.
        public var processorApplications = 0
        /// Bytes received from loaders and data closures.
        public var bytesDownloaded = 0
        /// Shared tasks of the graph still alive (allocated and not yet released).
        public var liveTasks = 0
        /// Image and data requests that have not finished yet.
        public var liveRequests = 0

        /// Counters for one cache layer, as the pipeline used it.
        public struct CacheLayerMetrics: Sendable, Hashable {
            /// Lookups made.
            public var lookups = 0
            /// Lookups that answered (for the disk: an entry was found, fresh or not).
            public var hits = 0
            /// Entries written (for the disk: writes handed to the cache).
            public var writes = 0
        }

        /// The memory cache (decoded images).
        public var memoryCache = CacheLayerMetrics()
        /// The disk cache (original data and encoded processed images).
        public var diskCache = CacheLayerMetrics()
        /// Memory-cache writes refused because the image cost more than the cache's per-entry
        /// limit (``ImageCache/entryCostLimit``).
        public var memoryCacheRejectedOversize = 0
        /// Stale disk entries asked about with a conditional request.
        public var revalidations = 0
        /// Conditional requests answered `304 Not Modified` (the entry was renewed, its bytes
        /// not downloaded again).
        public var notModified = 0
        /// Disk entries served without asking the server (fresh, or `returnCacheDataDontLoad`).
        public var diskCacheFreshHits = 0
        /// Problems the caches absorbed (see ``Event/cacheFailure(_:)``).
        public var cacheFailures = 0

        /// The counters for `stage`.
        public subscript(stage: Stage) -> StageMetrics {
            get {
                switch stage {
                case .fetch: fetch
                case .decode: decode
                case .process: process
                }
            }
            set {
                switch stage {
                case .fetch: fetch = newValue
                case .decode: decode = newValue
                case .process: process = newValue
                }
            }
        }
    }
}

extension ImagePipeline.Metrics: CustomStringConvertible {
    /// The counters grouped in lines, every counter named (`print(pipeline.metrics)`):
    ///
    /// ```
    /// ImagePipeline.Metrics
    ///   fetch:        started 2, joined 1, completed 2, failed 0, cancelled 0
    ///   decode:       started 2, joined 0, completed 2, failed 0, cancelled 0
    ///   process:      started 0, joined 0, completed 0, failed 0, cancelled 0
    ///   network:      2 requests started (peak 2 in flight, 0 now), 0 retries (0.000 s waited, 0 waits cancelled), 0 local loads, 48213 bytes downloaded
    ///   decoding:     2 decodes (0 interrupted), 0 resampled from memory, 0 preview decodes, 0 processor applications (0 on previews)
    ///   memory cache: 3 lookups, 1 hits, 2 writes, 0 rejected as oversize
    ///   disk cache:   2 lookups, 0 hits, 2 writes; 0 fresh hits, 0 revalidations, 0 not modified, 0 cache failures
    ///   live:         0 tasks, 0 requests
    /// ```
    public var description: String {
        func line(_ name: String, _ text: String) -> String {
            "\n  " + (name + ":").padding(toLength: 14, withPad: " ", startingAt: 0) + text
        }
        return "ImagePipeline.Metrics"
            + line("fetch", fetch.description)
            + line("decode", decode.description)
            + line("process", process.description)
            + line("network", "\(networkRequestsStarted) requests started (peak \(peakNetworkRequestsInFlight) in flight, \(networkRequestsInFlight) now), "
                   + "\(retries) retries (\(String(format: "%.3f", retryWaitSeconds)) s waited, \(retryWaitsCancelled) waits cancelled), "
                   + "\(localLoadsStarted) local loads, \(bytesDownloaded) bytes downloaded, "
                   + "\(resumedDownloads) resumed (\(resumedBytes) bytes kept, \(resumesAbandoned) resumes abandoned), "
                   + "\(requestHookCalls) request hook calls (\(requestHookRefusals) refused)")
            + line("decoding", "\(decodes) decodes (\(decodesInterrupted) interrupted), \(resampledFromMemory) resampled from memory, "
                   + "\(previewDecodes) preview decodes, \(processorApplications) processor applications (\(previewProcessorApplications) on previews)")
            + line("memory cache", memoryCache.description + ", \(memoryCacheRejectedOversize) rejected as oversize")
            + line("disk cache", diskCache.description + "; \(diskCacheFreshHits) fresh hits, \(revalidations) revalidations, "
                   + "\(notModified) not modified, \(cacheFailures) cache failures")
            + line("live", "\(liveTasks) tasks, \(liveRequests) requests")
    }
}

extension ImagePipeline.Metrics.StageMetrics: CustomStringConvertible {
    /// `started 2, joined 1, completed 2, failed 0, cancelled 0`.
    public var description: String {
        "started \(started), joined \(joined), completed \(completed), failed \(failed), cancelled \(cancelled)"
    }
}

extension ImagePipeline.Metrics.CacheLayerMetrics: CustomStringConvertible {
    /// `3 lookups, 1 hits, 2 writes`.
    public var description: String { "\(lookups) lookups, \(hits) hits, \(writes) writes" }
}

/// The pipeline's counters, with waiters that tests use to observe them without sleeping.
///
/// Waiters' conditions are caller code: they are evaluated with no lock held (neither this
/// store's nor the graph's, under which counters are published), on a snapshot, and waiters
/// are resumed after unlocking. A waiter whose Swift task is cancelled returns.
final class MetricsStore: Sendable {
    private struct Waiter {
        var condition: @Sendable (ImagePipeline.Metrics) -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private typealias Condition = @Sendable (ImagePipeline.Metrics) -> Bool

    private struct State {
        var metrics = ImagePipeline.Metrics()
        var waiters: [Int: Waiter] = [:]
        /// The registered waiters' conditions, kept beside ``waiters`` so that a check takes
        /// them with one retain instead of building an array on every counter update.
        var conditions: [(id: Int, condition: Condition)] = []
        var nextID = 0
        /// Ids handed out whose waiter is not registered yet.
        var pending: Set<Int> = []
        /// Pending ids cancelled before they registered.
        var cancelled: Set<Int> = []

        /// Removes the waiter `id` and its condition; `nil` if it is not registered.
        mutating func removeWaiter(_ id: Int) -> Waiter? {
            guard let waiter = waiters.removeValue(forKey: id) else { return nil }
            conditions.removeAll { $0.id == id }
            return waiter
        }
    }

    private let state = Mutex(State())

    /// A consistent snapshot.
    var snapshot: ImagePipeline.Metrics { state.withLock { $0.metrics } }

    /// Applies `update`, then (without the store's lock) resumes the waiters it satisfied.
    /// Callers holding the graph's lock use ``update(_:)`` instead.
    func withLock(_ update: (inout ImagePipeline.Metrics) -> Void) {
        if self.update(update) { checkWaiters() }
    }

    /// Applies `update`; answers whether waiters must be checked (``checkWaiters()``, to be
    /// called once no lock is held).
    func update(_ update: (inout ImagePipeline.Metrics) -> Void) -> Bool {
        state.withLock { state in
            update(&state.metrics)
            return !state.waiters.isEmpty
        }
    }

    /// Applies `update` from a context that may hold the graph's lock or not: waiters, if any,
    /// are checked from a new task.
    func updateCheckingWaitersLater(_ update: (inout ImagePipeline.Metrics) -> Void) {
        if self.update(update) { Task { self.checkWaiters() } }
    }

    /// Evaluates the waiters' conditions on a snapshot with no lock held, and resumes those
    /// satisfied (each once: a waiter is resumed by whoever removes it).
    func checkWaiters() {
        let (metrics, conditions) = state.withLock { ($0.metrics, $0.conditions) }
        var satisfied: [Int] = [] // allocated only when a condition holds
        for entry in conditions where entry.condition(metrics) { satisfied.append(entry.id) }
        guard !satisfied.isEmpty else { return }
        let ready: [Waiter] = state.withLock { state in satisfied.compactMap { state.removeWaiter($0) } }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Returns once the metrics satisfy `condition` (at once if they already do), or once the
    /// calling task is cancelled.
    func wait(until condition: @escaping @Sendable (ImagePipeline.Metrics) -> Bool) async {
        let id = state.withLock { state in
            state.nextID += 1
            state.pending.insert(state.nextID)
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let registered = state.withLock { state -> Bool in
                    state.pending.remove(id)
                    if state.cancelled.remove(id) != nil { return false }
                    state.waiters[id] = Waiter(condition: condition, continuation: continuation)
                    state.conditions.append((id, condition))
                    return true
                }
                // Registered first, then checked: an update after registration checks again,
                // so no wake-up is lost.
                if registered { checkWaiters() } else { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                if let waiter = state.removeWaiter(id) { return waiter }
                if state.pending.contains(id) { state.cancelled.insert(id) }
                return nil
            }
            waiter?.continuation.resume()
        }
    }
}
