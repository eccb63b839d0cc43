import Foundation

/// One request running in an ``ImagePipeline``: its priority, progress, events and result.
///
/// An image task subscribes to the top of the pipeline's work graph when it is created. It
/// owns nothing but its subscription: ``cancel()`` removes it, and shared work below is
/// cancelled only when nobody else needs it. Setting ``priority`` changes this subscription's
/// priority; the shared work runs at the highest priority among its subscribers.
///
/// All members are safe to use from any thread.
public final class ImageTask: @unchecked Sendable { // mutable state guarded by the graph's lock
    /// Bytes of the original data received so far.
    public struct Progress: Sendable, Hashable {
        /// Bytes received.
        public var completed: Int64
        /// Bytes expected (the declared length, or `completed` when unknown); 0 before the
        /// first chunk.
        public var total: Int64

        /// Creates a progress of `completed` bytes out of `total`.
        public init(completed: Int64, total: Int64) {
            self.completed = completed
            self.total = total
        }

        /// `completed / total`, 0 while unknown.
        public var fraction: Double { total > 0 ? min(1, Double(completed) / Double(total)) : 0 }
    }

    /// Something that happened to the task.
    public enum Event: Sendable {
        /// More bytes arrived.
        case progress(Progress)
        /// A progressive preview was decoded (``ImageResponse/isPreview`` is `true`): sent only
        /// with ``ImagePipeline/Configuration/isProgressiveDecodingEnabled`` on, while a
        /// progressive JPEG downloads, and never after `.finished`.
        case preview(ImageResponse)
        /// The task ended; always the last event.
        case finished(Result<ImageResponse, ImagePipeline.Error>)
    }

    /// Where the task is in its life.
    public enum State: Sendable, Hashable {
        /// The task has not ended yet.
        case running
        /// The task ended with ``ImagePipeline/Error/Code/cancelled``.
        case cancelled
        /// The task ended with an image or with any error other than a cancellation.
        case completed
    }

    /// The request the task is loading.
    public let request: ImageRequest

    /// The most unread events an ``events`` stream holds (the oldest are dropped first).
    static let eventBufferLimit = 32

    private let graph: WorkGraph
    @exclusivity(unchecked) private var _priority: ImageRequest.Priority
    @exclusivity(unchecked) private var _progress = Progress(completed: 0, total: 0)
    /// How the task ended. The image is kept as the graph delivered it and made into an
    /// ``ImageResponse`` by whoever reads it: a shared stage finishing for thousands of
    /// subscribers builds no responses while it holds the graph's lock.
    @exclusivity(unchecked) private var outcome: Result<ImageResult, ImagePipeline.Error>?
    /// The subscription to the top stage (which keeps the newest preview for a stream opened
    /// later), while the task runs.
    @exclusivity(unchecked) private var subscription: SharedTask<ImageResult>.Subscription?
    /// Resumed once ``outcome`` is set. The result is read after the resumption rather than
    /// carried by it, which keeps the suspended task's frames small.
    typealias Waiter = UnsafeContinuation<Void, Never>
    /// The first caller awaiting ``response`` (almost always the only one: no array to
    /// allocate), then any others.
    @exclusivity(unchecked) private var waiter: Waiter?
    @exclusivity(unchecked) private var moreWaiters: [Waiter] = []
    @exclusivity(unchecked) private var streams: [Int: AsyncStream<Event>.Continuation] = [:]
    @exclusivity(unchecked) private var nextStreamID = 0
    @exclusivity(unchecked) var rootIndex = -1
    /// The final memory key `image(for:)` computed for its hit check, until ``run()``
    /// subscribes (used only by the Swift task that created this one, before it subscribes).
    @exclusivity(unchecked) private var pendingFinalMemoryKey: ImageCacheKey?
    /// The graph's count of finished stages, read before that hit check (same lifetime).
    @exclusivity(unchecked) private var pendingGeneration: Int?

    init(request: ImageRequest, graph: WorkGraph, finalMemoryKey: ImageCacheKey? = nil, generation: Int? = nil) {
        self.request = request
        self.graph = graph
        self._priority = request.priority
        self.pendingFinalMemoryKey = finalMemoryKey
        self.pendingGeneration = generation
    }

    /// A task that is already complete (a memory-cache hit): it never touches the graph's
    /// lock to start, and is never registered.
    init(request: ImageRequest, graph: WorkGraph, completedWith response: ImageResponse) {
        self.request = request
        self.graph = graph
        self._priority = request.priority
        self.outcome = .success(ImageResult(container: response.container, urlResponse: response.urlResponse, cacheType: response.cacheType))
    }

    /// Subscribes to the graph with the request's precomputed `keys`. Must hold the graph's
    /// lock.
    func startLocked(keys: RequestKeys) {
        guard outcome == nil else { return } // cancelled before it started
        guard !graph.isInvalidated else {
            complete(.failure(.pipelineInvalidated))
            return
        }
        let count = request.processors.count
        let top = graph.imageTask(for: request, keys: keys, processorCount: count, isFinal: true)
        subscribe(to: top, memoryKey: keys.finalMemoryKey, processedDiskKey: keys.processedDiskKey)
    }

    /// Joins the running decode for `decodeKey`, or makes the request's keys and starts as
    /// ``startLocked(keys:)`` does. Only for requests whose keys
    /// ``WorkGraph/makesKeysUnderLock(for:finalMemoryKey:)``: a joining subscriber then builds
    /// no keys at all. Must hold the graph's lock.
    func startLocked(decodeKey: DecodeKey, finalMemoryKey: ImageCacheKey?, derivationSource: ImageContainer?) {
        guard outcome == nil, !graph.isInvalidated else {
            startLocked(keys: graph.requestKeys(for: request, finalMemoryKey: finalMemoryKey, decode: decodeKey))
            return
        }
        // What `startLocked(keys:)` would use: without processors the top stage is the decode;
        // the cache keys are the memory keys alone (there is no disk cache), whose final key
        // is `finalMemoryKey` (nil without a memory cache); no processed disk key.
        let top = graph.runningDecodeTask(for: decodeKey, joinedBy: request) ?? graph.newDecodeTask(
            for: request, key: decodeKey,
            cacheKeys: graph.caches.hasImageCache
                ? RequestCacheKeys(request, memory: true, disk: false, finalMemoryKey: finalMemoryKey) : nil,
            isFinal: true, source: derivationSource)
        subscribe(to: top, memoryKey: finalMemoryKey, processedDiskKey: nil)
    }

    /// Registers the request and subscribes to `top`, its final stage, whose image is stored
    /// under `memoryKey` and `processedDiskKey` as the request's options allow. Must hold the
    /// graph's lock.
    private func subscribe(to top: ImageStageTask, memoryKey: ImageCacheKey?, processedDiskKey: String?) {
        graph.register(self)
        // This request's own cache-write permissions: the stage is shared with requests whose
        // options may differ.
        let options = request.options
        top.markRequested(
            memoryKey: options.contains(.disableMemoryCacheWrites) ? nil : memoryKey,
            diskKey: CacheLayers.writesDisk(options) ? processedDiskKey : nil)
        // Unowned: the graph keeps the task alive while it is registered (which outlasts the
        // subscription), and the Swift task awaiting it, not the stage finishing it, then
        // releases it last.
        subscription = top.subscribe(priority: _priority) { [unowned self] event in
            switch event {
            case .progress(let progress):
                _progress = progress
                for stream in streams.values { stream.yield(.progress(progress)) }
            case .preview(let image):
                yieldPreview(image)
            case .value(let image):
                subscription = nil
                complete(.success(image))
            case .failure(let error):
                subscription = nil
                complete(.failure(error))
            }
        }
    }

    /// The priority of this task's subscription. Raising it while the work is queued moves the
    /// work up its queue (and the queues of the stages below); lowering it lets the work fall
    /// back to the highest priority among the other subscribers.
    public var priority: ImageRequest.Priority {
        get { graph.sync { _priority } }
        set {
            graph.sync {
                _priority = newValue
                subscription?.setPriority(newValue)
            }
        }
    }

    /// Bytes received so far.
    public var progress: Progress { graph.sync { _progress } }

    /// Whether the task is running, was cancelled, or completed (successfully or not).
    public var state: State {
        graph.sync {
            switch outcome {
            case nil: .running
            case .failure(let error) where error.code == .cancelled: .cancelled
            default: .completed
            }
        }
    }

    /// Cancels the task: it ends with ``ImagePipeline/Error/cancelled`` unless it has already
    /// ended. Shared work goes on while other requests need it.
    public func cancel() {
        graph.sync { cancelLocked() }
    }

    /// The task's events: progress (and previews, when progressive decoding is on), then
    /// `.finished`. A stream created while bytes are arriving starts with the progress so far
    /// (a download held part-way still shows where it stands) and with the newest preview
    /// sent so far; the first stream in the pipeline also gets a preview of the newest scan that
    /// arrived while none was open (a stream opened a moment after the task started misses no
    /// preview); one created after the task ended yields only `.finished`.
    ///
    /// The stream holds at most the 32 newest unread events: progress is
    /// cumulative, so a reader that falls behind skips older steps and still gets the latest,
    /// and an unread stream never grows past the limit. `.finished` is the last event and is
    /// never dropped.
    public var events: AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(Self.eventBufferLimit))
        let finished: Result<ImageResponse, ImagePipeline.Error>? = graph.sync {
            if let result { return result }
            if _progress.completed > 0 || _progress.total > 0 { continuation.yield(.progress(_progress)) }
            if let preview = (subscription?.task as? ImageStageTask)?.previews?.latest {
                continuation.yield(.preview(response(for: preview)))
            }
            nextStreamID += 1
            let id = nextStreamID
            streams[id] = continuation
            graph.addPreviewReader()
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                let removed = self.graph.sync {
                    let removed = self.streams.removeValue(forKey: id)
                    if removed != nil { self.graph.removePreviewReaders() }
                    return removed
                }
                _ = removed // released here, outside the lock
            }
            return nil
        }
        if let finished {
            continuation.yield(.finished(finished))
            continuation.finish()
        }
        return stream
    }

    /// The response, once the task ends. Cancelling the awaiting Swift task cancels this task.
    /// - Throws: ``ImagePipeline/Error``.
    public var response: ImageResponse {
        get async throws {
            if let finished = graph.sync({ result }) { return try finished.get() }
            await withTaskCancellationHandler {
                await withUnsafeContinuation { (continuation: Waiter) in
                    wait(continuation)
                }
            } onCancel: {
                cancel()
            }
            return try finishedResponse()
        }
    }

    /// Subscribes and waits for the result, taking the graph's lock once for both:
    /// `image(for:)`'s path. Cancelling the awaiting Swift task cancels this task, also when
    /// that happens before it subscribed (it then never subscribes).
    ///
    /// The work happens in synchronous calls that are not inlined, and the result is read
    /// after the resumption: an async function keeps its values, and often its callees'
    /// temporaries, in the task's frame for as long as it is suspended, and thousands of
    /// suspended requests would each hold kilobytes of them.
    func run() async throws -> ImageResponse {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: Waiter) in
                subscribe(waiting: continuation)
            }
        } onCancel: {
            cancel()
        }
        return try finishedResponse()
    }

    /// Subscribes (``start(finalMemoryKey:registering:)``) and resumes `continuation` once
    /// there is a result.
    @inline(never)
    private func subscribe(waiting continuation: Waiter) {
        let finalMemoryKey = pendingFinalMemoryKey
        let generation = pendingGeneration
        pendingFinalMemoryKey = nil
        pendingGeneration = nil
        if start(finalMemoryKey: finalMemoryKey, registering: continuation, generation: generation) { continuation.resume() }
    }

    /// Subscribes to the graph — the one way a task starts, for ``ImagePipeline/imageTask(with:)``
    /// and for `image(for:)` — and registers `continuation` (when given) in the same critical
    /// section. The keys are made before taking the lock, unless the request's can be made under
    /// it (``WorkGraph/makesKeysUnderLock(for:finalMemoryKey:)``: a request joining a running
    /// decode then makes none). Answers `true` when the task had already ended
    /// (`continuation` is then not kept: resume it).
    ///
    /// **A stage finishing meanwhile.** The caller looked for the final image in the memory
    /// cache, and the keys looked for a processor prefix there, before the lock. A stage stores
    /// its image in memory and then leaves its pool; one that did both in between would be
    /// missed twice, and the request would start the same work again. `generation`, the
    /// graph's count of finished stages read before the caller's lookup, tells: when it moved
    /// and the request has no running work to join, the memory cache is looked at again (and
    /// the keys made again) before new work starts. `nil`: no memory cache to look at.
    @inline(never)
    func start(finalMemoryKey: ImageCacheKey?, registering continuation: Waiter?, generation: Int? = nil) -> Bool {
        if case .started(let ended) = attemptStart(finalMemoryKey: finalMemoryKey, registering: continuation, generation: generation) {
            return ended
        }
        if let finalMemoryKey, let container = graph.cachedFinalImage(for: request, key: finalMemoryKey) {
            return graph.sync {
                if outcome == nil {
                    outcome = .success(ImageResult(container: container, urlResponse: nil, cacheType: .memory))
                }
                return continuation.map(registerLocked) ?? false
            }
        }
        guard case .started(let ended) = attemptStart(finalMemoryKey: finalMemoryKey, registering: continuation, generation: nil) else {
            preconditionFailure("ImageTask: a start without a generation always starts")
        }
        return ended
    }

    private enum StartAttempt {
        /// Subscribed (or found the task ended); the flag as ``start(finalMemoryKey:registering:generation:)`` answers.
        case started(Bool)
        /// A stage finished since `generation` and nothing runs to join: look again.
        case retry
    }

    private func attemptStart(finalMemoryKey: ImageCacheKey?, registering continuation: Waiter?, generation: Int?) -> StartAttempt {
        let source = graph.derivationSource(for: request)
        if graph.makesKeysUnderLock(for: request, finalMemoryKey: finalMemoryKey) {
            let decodeKey = DecodeKey(request)
            return graph.sync {
                if let generation, mustLookAgain(since: generation, keys: nil, decodeKey: decodeKey) { return .retry }
                startLocked(decodeKey: decodeKey, finalMemoryKey: finalMemoryKey, derivationSource: source)
                return .started(continuation.map(registerLocked) ?? false)
            }
        }
        let keys = graph.requestKeys(for: request, finalMemoryKey: finalMemoryKey, derivationSource: source)
        return graph.sync {
            if let generation, mustLookAgain(since: generation, keys: keys, decodeKey: nil) { return .retry }
            startLocked(keys: keys)
            return .started(continuation.map(registerLocked) ?? false)
        }
    }

    /// Whether a stage finished since `generation` while this request, not yet ended, has no
    /// running work to join. Must hold the graph's lock.
    private func mustLookAgain(since generation: Int, keys: RequestKeys?, decodeKey: DecodeKey?) -> Bool {
        outcome == nil && !graph.isInvalidated
            && graph.finishedStages.load(ordering: .relaxed) != generation
            && !graph.joinsRunningWork(request, keys: keys, decodeKey: decodeKey)
    }

    /// Resumes `continuation` once there is a result (at once if there is one).
    @inline(never)
    private func wait(_ continuation: Waiter) {
        if graph.sync({ registerLocked(continuation) }) { continuation.resume() }
    }

    /// Keeps `continuation` to resume when the task ends; answers `true`, keeping nothing, if
    /// it has ended. Must hold the graph's lock.
    private func registerLocked(_ continuation: Waiter) -> Bool {
        if outcome != nil { return true }
        if waiter == nil { waiter = continuation } else { moreWaiters.append(continuation) }
        return false
    }

    /// The response or the error, once the task ended. Must hold the graph's lock, or be
    /// resumed after the task ended.
    private var result: Result<ImageResponse, ImagePipeline.Error>? {
        guard let outcome else { return nil }
        let request = request
        return outcome.map { ImageResponse(container: $0.container, request: request, urlResponse: $0.urlResponse, cacheType: $0.cacheType) }
    }

    /// The response after a waiter was resumed, built straight from the outcome (no
    /// intermediate `Result` to copy and destroy: this runs once per awaiting request). Reads
    /// the outcome without the lock: it is set, under the lock, before any waiter is resumed
    /// (the resumption orders the accesses) and never changes afterwards.
    private func finishedResponse() throws(ImagePipeline.Error) -> ImageResponse {
        switch outcome {
        case .success(let image)?:
            return ImageResponse(container: image.container, request: request, urlResponse: image.urlResponse, cacheType: image.cacheType)
        case .failure(let error)?:
            throw error
        case nil:
            preconditionFailure("ImageTask: resumed without a result")
        }
    }

    /// The image, once the task ends. Cancelling the awaiting Swift task cancels this task.
    /// - Throws: ``ImagePipeline/Error``.
    public var image: Bitmap {
        get async throws { try await response.image }
    }

    // MARK: - Internals (graph lock held)

    /// Hands a progressive preview to the event streams (nobody else sees previews).
    private func yieldPreview(_ image: ImageResult) {
        guard !streams.isEmpty else { return }
        let response = response(for: image)
        for stream in streams.values { stream.yield(.preview(response)) }
    }

    /// `image`, a preview, as this task's response.
    private func response(for image: ImageResult) -> ImageResponse {
        ImageResponse(container: image.container, request: request, urlResponse: image.urlResponse, cacheType: image.cacheType)
    }

    private func complete(_ outcome: Result<ImageResult, ImagePipeline.Error>) {
        guard self.outcome == nil else { return }
        self.outcome = outcome
        graph.unregister(self)
        // The event streams get `.finished` now, under the lock, as they get progress: a
        // caller that reads the result — resumed below, or finding it at once through
        // `response` before this critical section's effects ran — finds `.finished` in the
        // streams too. Once the lock is released the streams end (which runs their
        // `onTermination`, which takes the lock), then the awaiting callers resume. By then the
        // whole step is done (every other subscriber of the work has had its turn, a processor
        // its job queued) and the metrics count it, so what a caller reads next agrees with its
        // result.
        if !streams.isEmpty {
            let streams = Array(self.streams.values)
            graph.removePreviewReaders(streams.count)
            self.streams = [:]
            if let finished = result {
                for stream in streams { stream.yield(.finished(finished)) }
            }
            graph.afterUnlock {
                for stream in streams { stream.finish() }
            }
        }
        if let waiter {
            let others = moreWaiters
            self.waiter = nil
            moreWaiters = []
            graph.afterUnlock {
                waiter.resume()
                for other in others { other.resume() }
            }
        }
    }
}

extension ImageTask: RootTask {
    func cancelLocked() {
        guard outcome == nil else { return }
        let subscription = self.subscription
        self.subscription = nil
        complete(.failure(.cancelled))
        subscription?.unsubscribe()
    }
}

extension ImageTask: Hashable {
    /// Tasks are equal only to themselves.
    public static func == (lhs: ImageTask, rhs: ImageTask) -> Bool { lhs === rhs }
    /// Hashes the task's object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

extension ImageTask: CustomStringConvertible {
    /// `ImageTask(…)` around the request's description.
    public var description: String { "ImageTask(\(request))" }
}
