import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The owner of the work graph's bookkeeping: the stage pools, every ``SharedTask``'s
/// subscribers and priorities, and every ``ImageTask``'s state.
///
/// **Why one lock rather than a global actor.** Every bookkeeping step (subscribe, leave,
/// change a priority, deliver a result) is short and synchronous. A lock lets
/// ``ImageTask/cancel()`` and the ``ImageTask/priority`` setter take effect before they return
/// — a cancelled download is out of its queue, a raised priority has reached the queued
/// decode — with no hop and no ordering races between hops, and joining running work costs one
/// uncontended lock round-trip instead of an actor hop per subscriber. The price is
/// discipline, kept here: nothing foreign runs under the lock. The event handler, the logger,
/// finishing event streams (which runs their termination handlers) and Swift task
/// cancellation (which runs cancellation handlers synchronously) are queued with
/// ``afterUnlock(_:)`` and run by ``sync(_:)`` once the lock is released. Resuming a
/// continuation only enqueues the awaiting task, so that happens under the lock. Decoding, processing and loading run on the queues' workers and take the lock
/// only to report. Lock order: graph lock, then a ``WorkQueue``'s lock; never the reverse.
///
/// The state the lock guards — here, in ``SharedTask`` and its subclasses, in ``ImageTask``
/// and in ``WorkQueue/Item`` (under its queue's lock) — is marked `@exclusivity(unchecked)`:
/// the lock already makes every access exclusive, and the run-time check the compiler would
/// otherwise add to each access of a class property costs more than the bookkeeping itself on
/// the paths that run once per request or per subscriber.
final class WorkGraph: @unchecked Sendable { // mutable state guarded by `lock`
    let configuration: ImagePipeline.Configuration
    let metricsStore = MetricsStore()
    /// The cache layers, used off the lock.
    let caches: CacheLayers
    /// Mirrors ``isInvalidated`` for the memory-hit path, which does not take the lock.
    let invalidatedFlag = Atomic<Bool>(false)
    /// How many stage tasks have finished after storing their image in memory, for requests
    /// that looked in the memory cache before taking the lock (see
    /// ``ImageTask/start(finalMemoryKey:registering:generation:)``): a stage stores its image
    /// in memory, then leaves its pool as it finishes, so a request that found neither may have
    /// looked in between — this count tells it to look again. Stages that store nothing in
    /// memory (a fetch, an image no request asked for) are not counted: after them there is
    /// nothing new to find. Raised under the lock; read without it.
    let finishedStages = Atomic<Int>(0)

    private let lock = NSLock()
    @exclusivity(unchecked) private var deferred: [() -> Void] = []
    @exclusivity(unchecked) private var fetchPool: [FetchKey: FetchTask] = [:]
    @exclusivity(unchecked) private var decodePool: [DecodeKey: DecodeTask] = [:]
    @exclusivity(unchecked) private var processPool: [ProcessKey: ProcessTask] = [:]
    /// Live requests; each knows its index (``RootTask/rootIndex``), so registering and
    /// unregistering are O(1) without hashing.
    @exclusivity(unchecked) private var roots: [any RootTask] = []
    @exclusivity(unchecked) private(set) var isInvalidated = false
    /// How many `ImageTask.events` streams are open: previews are decoded only while some
    /// task can show them (see ProgressiveDecoding.swift).
    @exclusivity(unchecked) var previewReaders = 0
    /// Decode stages that skipped a preview while no stream was open (each keeps the newest
    /// one): the first stream to open decodes them, so a stream opened just after its task
    /// started still sees the scans that arrived meanwhile. Weak: a stage that ends without
    /// one is not kept.
    @exclusivity(unchecked) var skippedPreviews: [ObjectIdentifier: WeakDecodeTask] = [:]
    /// Counter changes of the current critical section (see ``publishCounts()``).
    @exclusivity(unchecked) private var pendingCounts = PendingCounts()
    /// Metrics waiters must be checked once the lock is released (a flag rather than a queued
    /// closure: with a waiter installed, every critical section that counts sets it).
    @exclusivity(unchecked) private var needsWaiterCheck = false

    /// Whether the decoder is ``ImageDecoders/Default``, whose output a resize of a larger
    /// decode reproduces (see ``derivationSource(for:)``).
    private let decoderIsDefault: Bool

    init(configuration: ImagePipeline.Configuration) {
        self.configuration = configuration
        self.caches = CacheLayers(configuration: configuration, metrics: metricsStore)
        self.decoderIsDefault = configuration.decoder is ImageDecoders.Default
    }

    /// Runs `body` holding the lock, then the effects it queued, in order, without it.
    func sync<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        let result: T
        do {
            result = try body()
        } catch {
            publishCounts()
            runEffectsUnlocking()
            throw error
        }
        publishCounts()
        guard !deferred.isEmpty || needsWaiterCheck else {
            lock.unlock()
            return result
        }
        runEffectsUnlocking()
        return result
    }

    /// Releases the lock, then runs the queued effects and, last, the metrics waiters' check.
    /// Must hold the lock.
    private func runEffectsUnlocking() {
        let effects = deferred
        deferred = []
        let checksWaiters = needsWaiterCheck
        needsWaiterCheck = false
        lock.unlock()
        effects.forEach { $0() }
        if checksWaiters { metricsStore.checkWaiters() }
    }

    /// Publishes the counters changed in this critical section, in one update of the metrics
    /// store, before the lock is released (so that the metrics never disagree with the graph).
    /// Metrics waiters' conditions (caller code) are checked after unlocking. Must hold the
    /// lock.
    private func publishCounts() {
        guard pendingCounts.isChanged else { return }
        let counts = pendingCounts
        pendingCounts = PendingCounts()
        if metricsStore.update({ counts.apply(to: &$0) }) { needsWaiterCheck = true }
    }

    /// Queues `effect` to run after the lock is released. Must hold the lock.
    func afterUnlock(_ effect: @escaping () -> Void) {
        deferred.append(effect)
    }

    /// Cancels `tasks` once the lock is released: ``WorkQueue``'s `cancelLater` for work
    /// enqueued under the lock (cancelling runs user cancellation handlers). Must hold the lock.
    func cancelAfterUnlock(_ tasks: [Task<Void, Never>]) {
        afterUnlock { for task in tasks { task.cancel() } }
    }

    /// Reports `event` to the configured handler, after unlocking. Must hold the lock.
    func emit(_ event: @autoclosure () -> ImagePipeline.Event) {
        guard let handler = configuration.eventHandler else { return }
        let event = event()
        afterUnlock { handler(event) }
    }

    /// Sends a diagnostic message to the logger, without the secrets URLs in it may carry
    /// (``LogRedaction``). Must hold the lock; `message` is built after unlocking (it may
    /// describe user errors), so it must capture values, not graph state.
    func log(_ message: @escaping () -> String) {
        guard let logger = configuration.logger else { return }
        afterUnlock { logger(LogRedaction.scrub(message())) }
    }

    /// Changes `stage`'s counters; published when the critical section ends. Must hold the
    /// lock.
    func count(_ stage: ImagePipeline.Stage, _ update: (inout ImagePipeline.Metrics.StageMetrics) -> Void) {
        update(&pendingCounts[stage])
        pendingCounts.isChanged = true
    }

    /// Counts a shared task created in this critical section. Must hold the lock.
    func countTaskCreated() {
        pendingCounts.liveTasks += 1
        pendingCounts.isChanged = true
    }

    // MARK: - Roots

    /// Registers a request that has started. Must hold the lock.
    func register(_ root: any RootTask) {
        root.rootIndex = roots.count
        roots.append(root)
        pendingCounts.liveRequests += 1
        pendingCounts.isChanged = true
    }

    /// Unregisters a request that has ended (nothing happens if it was never registered).
    /// Must hold the lock.
    func unregister(_ root: any RootTask) {
        let index = root.rootIndex
        guard index >= 0 else { return }
        root.rootIndex = -1
        let last = roots.removeLast()
        if index < roots.count {
            roots[index] = last
            last.rootIndex = index
        }
        pendingCounts.liveRequests -= 1
        pendingCounts.isChanged = true
    }

    /// Cancels every request and refuses new ones.
    func invalidate() {
        sync {
            guard !isInvalidated else { return }
            isInvalidated = true
            invalidatedFlag.store(true, ordering: .releasing)
            let count = roots.count
            log { "pipeline invalidated with \(count) requests running" }
            for root in roots { root.cancelLocked() } // iterates a copy: cancelling unregisters
        }
    }

    // MARK: - Inspection

    /// One pooled stage task as tests see it (``pooledTasks()``).
    struct PooledTask: Sendable, Hashable {
        /// The task's priority: the maximum over its live subscribers.
        var priority: ImageRequest.Priority
        /// The priority its queued or running operation has in its queue; `nil` while it has
        /// none (it waits for the stage below).
        var operationPriority: ImageRequest.Priority?
        /// Its live subscribers.
        var subscriberCount: Int
    }

    /// Every task in the stage pools, by key: lets tests compare the graph with a model of it
    /// (which work is shared, at which priority) without going through timing. Takes the lock.
    func pooledTasks() -> (fetch: [FetchKey: PooledTask], decode: [DecodeKey: PooledTask], process: [ProcessKey: PooledTask]) {
        func describe<Value>(_ task: SharedTask<Value>) -> PooledTask {
            PooledTask(
                priority: task.priority, operationPriority: task.operation.map { $0.queue.priority(of: $0.item) },
                subscriberCount: task.subscriberCount)
        }
        return sync { (fetchPool.mapValues(describe), decodePool.mapValues(describe), processPool.mapValues(describe)) }
    }

    // MARK: - Stage tasks

    /// Every key of `request`, and the longest processor prefix the memory cache holds.
    /// Keys hash processors' identities (user code): call it without the lock.
    /// `finalMemoryKey`: the request's final memory key when the caller has it; `decode`: its
    /// decode key when the caller has it.
    func requestKeys(
        for request: ImageRequest, finalMemoryKey: ImageCacheKey?, decode: DecodeKey? = nil, derivationSource: ImageContainer? = nil
    ) -> RequestKeys {
        let caches = self.caches
        let readsPrefix = request.processors.count > 0 && caches.hasImageCache && CacheLayers.readsMemory(request.options)
        return RequestKeys(
            request, memoryCache: caches.hasImageCache, diskCache: caches.hasDataCache, finalMemoryKey: finalMemoryKey,
            cachedImage: readsPrefix ? { caches.cachedImage(for: $0) } : nil, decode: decode, derivationSource: derivationSource)
    }

    /// A decoded image, at least as large as `request`'s decode size, from which a new decode
    /// stage for `request` makes its image by resampling instead of fetching and decoding:
    /// the request's own ``ImageRequest/derivationSource``, else the unprocessed full-size
    /// image of the same source (image ID and credentials) when the memory cache holds it —
    /// after a prefetch of the URL, or a detail view, say. `nil` for a request without a decode
    /// size or that may not read the memory cache, and with a decoder other than
    /// ``ImageDecoders/Default`` (a custom decoder decides its own output: it always runs).
    /// Runs user code (the memory cache): call it without the lock.
    func derivationSource(for request: ImageRequest) -> ImageContainer? {
        // An animation needs every frame, which no still image in memory has.
        guard request.thumbnail != nil, !request.options.contains(.decodeAllFrames) else { return nil }
        if let hint = request.derivationSource { return isResamplable(hint) ? hint : nil }
        return resamplableFullSizeImage(for: request)
    }

    /// The unprocessed full-size image of `request`'s source (image ID and credentials), when
    /// the memory cache holds it, `request` may read it and a decode at a size may be made
    /// from it (``derivationSource(for:)``). Whatever `request`'s own decode size. Runs user
    /// code (the memory cache): call it without the lock.
    func resamplableFullSizeImage(for request: ImageRequest) -> ImageContainer? {
        guard decoderIsDefault, caches.hasImageCache, CacheLayers.readsMemory(request.options),
              let container = caches.peekImage(for: RequestCacheKeys.fullSizeMemoryKey(request)), isResamplable(container)
        else { return nil }
        return container
    }

    /// Whether a decode at a size may be made by resampling a larger decode of the image given
    /// as the request's ``ImageRequest/derivationSource``: with the default decoder.
    var resamplesDerivationSources: Bool { decoderIsDefault }

    /// Whether a decode at a size may be made from `container` by resampling: with the default
    /// decoder, from a final still image. An entry that keeps its encoded bytes (stored by
    /// hand: the default decoder keeps none) is no still image to resample.
    func isResamplable(_ container: ImageContainer) -> Bool {
        decoderIsDefault && !container.isPreview && container.data == nil
    }

    /// Whether `request`'s keys can be made under the lock, from its decode key and its final
    /// memory key (`finalMemoryKey`, required when there is a memory cache): a request without
    /// processors (no user code hashes their identities) in a pipeline without a disk cache
    /// (no disk key to derive). Such a request joining running work needs nothing more than
    /// its decode key; the other keys are made only when it starts new work.
    func makesKeysUnderLock(for request: ImageRequest, finalMemoryKey: ImageCacheKey?) -> Bool {
        request.processors.isEmpty && !caches.hasDataCache && (finalMemoryKey != nil || !caches.hasImageCache)
    }

    /// Removes a task that ended from the pool it was in (``SharedTask/poolKey``). Must
    /// hold the lock.
    func removeFromPool(_ key: StagePoolKey) {
        switch key {
        case .fetch(let key): fetchPool[key] = nil
        case .decode(let key): decodePool[key] = nil
        case .process(let key): processPool[key] = nil
        }
    }

    /// A new decode task, put in the pool when coalescing is on (the caller found none there).
    /// Must hold the lock.
    /// `source`: a larger decode of the same image to resample instead of fetching and decoding
    /// (``derivationSource(for:)``).
    func newDecodeTask(
        for request: ImageRequest, key: DecodeKey, cacheKeys: RequestCacheKeys?, isFinal: Bool, source: ImageContainer? = nil
    ) -> DecodeTask {
        let task = DecodeTask(graph: self, request: request, key: key, cacheKeys: cacheKeys, isFinal: isFinal, source: source)
        // Not pooled when the pool holds a task this request may not join (see
        // `DecodeTask.mayBeJoined(by:)`): that one keeps answering the others.
        if configuration.isTaskCoalescingEnabled && decodePool[key] == nil {
            decodePool[key] = task
            task.isPooled = true
        }
        return task
    }

    /// `request`'s final image from the memory cache under `key` (its final memory key), when
    /// the request may read it and the graph is not invalidated: the memory-hit path of
    /// ``ImagePipeline/imageTask(with:)`` and of a start that looks again. Runs user code (the
    /// memory cache): call it without the lock.
    func cachedFinalImage(for request: ImageRequest, key: ImageCacheKey) -> ImageContainer? {
        guard CacheLayers.readsMemory(request.options), !invalidatedFlag.load(ordering: .acquiring) else { return nil }
        return caches.cachedImage(for: key)
    }

    /// Whether `request` would join running work for its final image rather than start new
    /// work: the pool holds a task for its top stage that it may join. `keys`: its keys when
    /// made; else `decodeKey` (a request without processors). `requiringInput`: only a decode
    /// (no processors) whose input is in hand counts — not one still waiting for its fetch.
    /// Must hold the lock.
    func joinsRunningWork(_ request: ImageRequest, keys: RequestKeys?, decodeKey: DecodeKey?, requiringInput: Bool = false) -> Bool {
        guard configuration.isTaskCoalescingEnabled else { return false }
        if let keys, let last = keys.process.last {
            return !requiringInput && processPool[last]?.mayBeJoined(by: request) ?? false
        }
        guard let key = keys?.decode ?? decodeKey, let task = runningDecodeTask(for: key, joinedBy: request) else { return false }
        return !requiringInput || task.hasInput
    }

    /// The decode task running for `key` that `request` may join, when coalescing is on. Must
    /// hold the lock.
    func runningDecodeTask(for key: DecodeKey, joinedBy request: ImageRequest) -> DecodeTask? {
        guard configuration.isTaskCoalescingEnabled, let task = decodePool[key], task.mayBeJoined(by: request) else { return nil }
        return task
    }

    /// The task fetching `request`'s original data: shared when coalescing is on. `diskKey` is
    /// the original data's disk-cache key (`nil` without a disk cache).
    func fetchTask(for request: ImageRequest, key: FetchKey? = nil, diskKey: String?) -> FetchTask {
        let key = key ?? FetchKey(request)
        guard configuration.isTaskCoalescingEnabled else { return FetchTask(graph: self, request: request, key: key, diskKey: diskKey) }
        if let task = fetchPool[key] { return task }
        let task = FetchTask(graph: self, request: request, key: key, diskKey: diskKey)
        fetchPool[key] = task
        task.isPooled = true
        return task
    }

    /// The task producing `request`'s image with its first `processorCount` processors applied.
    /// `isFinal`: the caller is a request whose final image this is (the stage then looks for
    /// its processed entry on disk before depending on the stage below).
    func imageTask(for request: ImageRequest, keys: RequestKeys, processorCount: Int, isFinal: Bool) -> ImageStageTask {
        guard processorCount > 0 else {
            if configuration.isTaskCoalescingEnabled, let task = decodePool[keys.decode], task.mayBeJoined(by: request) {
                return task // joining: no copy of the key
            }
            return newDecodeTask(for: request, key: keys.decode, cacheKeys: keys.cache, isFinal: isFinal, source: keys.derivationSource)
        }
        let key = keys.process[processorCount - 1]
        guard configuration.isTaskCoalescingEnabled else {
            return ProcessTask(graph: self, request: request, keys: keys, processorCount: processorCount, isFinal: isFinal)
        }
        let running = processPool[key]
        if let running, running.mayBeJoined(by: request) { return running }
        let task = ProcessTask(graph: self, request: request, keys: keys, processorCount: processorCount, isFinal: isFinal)
        // A running task this request may not join keeps its place in the pool.
        if running == nil {
            processPool[key] = task
            task.isPooled = true
        }
        return task
    }
}

/// Which pool a shared task is in, under which key: the task leaves it by this key when it
/// ends, and the graph needs to know nothing about the task's class.
enum StagePoolKey {
    case fetch(FetchKey)
    case decode(DecodeKey)
    case process(ProcessKey)
}

/// A request at the top of the graph (an ``ImageTask`` or a data request), which
/// ``WorkGraph/invalidate()`` cancels.
protocol RootTask: AnyObject {
    /// The request's index in the graph's list of live requests, -1 when not registered.
    /// Used only by ``WorkGraph``, under its lock.
    var rootIndex: Int { get set }
    /// Cancels the request. Must hold the graph's lock.
    func cancelLocked()
}

/// An image on its way up the graph.
struct ImageResult: Sendable {
    var container: ImageContainer
    var urlResponse: URLResponse?
    /// The cache layer the image (or the bytes it was made from) came from.
    var cacheType: CacheType?
}

/// Original bytes and the response they came with.
struct FetchedData: Sendable {
    var data: Data
    var urlResponse: URLResponse?
    /// `.disk` when the bytes came from the disk cache (fresh, or renewed by a 304).
    var cacheType: CacheType? = nil
    /// The server answered `304 Not Modified` to a conditional request (no bytes).
    var isNotModified = false
}

/// Counter changes made under the graph's lock: a critical section that subscribes, or that
/// delivers a result to thousands of subscribers, updates the metrics store once.
struct PendingCounts {
    typealias StageMetrics = ImagePipeline.Metrics.StageMetrics

    var isChanged = false
    var liveRequests = 0
    /// Shared tasks created (their release is counted by their `deinit`, off the lock).
    var liveTasks = 0
    /// Deltas of each stage's counters.
    var fetch = StageMetrics(), decode = StageMetrics(), process = StageMetrics()

    subscript(stage: ImagePipeline.Stage) -> StageMetrics {
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

    func apply(to metrics: inout ImagePipeline.Metrics) {
        metrics.liveRequests += liveRequests
        metrics.liveTasks += liveTasks
        Self.add(fetch, to: &metrics.fetch)
        Self.add(decode, to: &metrics.decode)
        Self.add(process, to: &metrics.process)
    }

    private static func add(_ delta: StageMetrics, to counters: inout StageMetrics) {
        counters.started += delta.started
        counters.joined += delta.joined
        counters.completed += delta.completed
        counters.failed += delta.failed
        counters.cancelled += delta.cancelled
    }
}
