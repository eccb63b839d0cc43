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
        /// A progressive preview was decoded (the pipeline does not produce previews yet).
        case preview(ImageResponse)
        /// The task ended; always the last event.
        case finished(Result<ImageResponse, ImagePipeline.Error>)
    }

    /// Where the task is in its life.
    public enum State: Sendable, Hashable {
        case running, cancelled, completed
    }

    /// The request the task is loading.
    public let request: ImageRequest

    private let graph: WorkGraph
    private var _priority: ImageRequest.Priority
    private var _progress = Progress(completed: 0, total: 0)
    private var result: Result<ImageResponse, ImagePipeline.Error>?
    private var subscription: (any TaskSubscription)?
    private var waiters: [UnsafeContinuation<Result<ImageResponse, ImagePipeline.Error>, Never>] = []
    private var streams: [Int: AsyncStream<Event>.Continuation] = [:]
    private var nextStreamID = 0

    init(request: ImageRequest, graph: WorkGraph) {
        self.request = request
        self.graph = graph
        self._priority = request.priority
    }

    /// A task that is already complete (a memory-cache hit): it never touches the graph's
    /// lock to start, and is never registered.
    init(request: ImageRequest, graph: WorkGraph, completedWith response: ImageResponse) {
        self.request = request
        self.graph = graph
        self._priority = request.priority
        self.result = .success(response)
    }

    /// Subscribes to the graph with the request's precomputed `keys`. Must hold the graph's
    /// lock.
    func startLocked(keys: RequestKeys) {
        guard !graph.isInvalidated else {
            complete(.failure(.pipelineInvalidated))
            return
        }
        graph.register(self)
        let count = request.processors.count
        let top = graph.imageTask(for: request, keys: keys, processorCount: count, isFinal: true)
        top.markRequested(memoryKey: keys.cache?.memory.isEmpty == false ? keys.cache?.memory[count] : nil, diskKey: keys.cache?.diskProcessed)
        subscription = top.subscribe(priority: _priority) { [self] event in
            switch event {
            case .progress(let progress):
                _progress = progress
                for stream in streams.values { stream.yield(.progress(progress)) }
            case .value(let image):
                subscription = nil
                complete(.success(ImageResponse(container: image.container, request: request, urlResponse: image.urlResponse, cacheType: image.cacheType)))
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
            switch result {
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

    /// The task's events: progress, then `.finished`. A stream created after the task ended
    /// yields only `.finished`.
    public var events: AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
        let finished: Result<ImageResponse, ImagePipeline.Error>? = graph.sync {
            if let result { return result }
            nextStreamID += 1
            let id = nextStreamID
            streams[id] = continuation
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                let removed = self.graph.sync { self.streams.removeValue(forKey: id) }
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
            return try await withTaskCancellationHandler {
                await withUnsafeContinuation { continuation in
                    let finished: Result<ImageResponse, ImagePipeline.Error>? = graph.sync {
                        if let result { return result }
                        waiters.append(continuation)
                        return nil
                    }
                    if let finished { continuation.resume(returning: finished) }
                }
            } onCancel: {
                cancel()
            }.get()
        }
    }

    /// The image, once the task ends. Cancelling the awaiting Swift task cancels this task.
    /// - Throws: ``ImagePipeline/Error``.
    public var image: Bitmap {
        get async throws { try await response.image }
    }

    // MARK: - Internals (graph lock held)

    private func complete(_ result: Result<ImageResponse, ImagePipeline.Error>) {
        guard self.result == nil else { return }
        self.result = result
        graph.unregister(self)
        // Resuming only enqueues the awaiting task, so it is safe under the lock and saves a
        // deferred closure per subscriber when thousands finish at once.
        for waiter in waiters { waiter.resume(returning: result) }
        waiters = []
        guard !streams.isEmpty else { return }
        // Finishing a stream runs its `onTermination`, which takes the lock: after unlocking.
        let streams = Array(self.streams.values)
        self.streams = [:]
        graph.afterUnlock {
            for stream in streams {
                stream.yield(.finished(result))
                stream.finish()
            }
        }
    }
}

extension ImageTask: RootTask {
    func cancelLocked() {
        guard result == nil else { return }
        let subscription = self.subscription
        self.subscription = nil
        complete(.failure(.cancelled))
        subscription?.unsubscribe()
    }
}

extension ImageTask: Hashable {
    /// Tasks are equal only to themselves.
    public static func == (lhs: ImageTask, rhs: ImageTask) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

extension ImageTask: CustomStringConvertible {
    public var description: String { "ImageTask(\(request))" }
}

/// A `data(for:)` request: subscribes to the fetch stage only.
final class DataRequestTask: RootTask, @unchecked Sendable { // mutable state guarded by the graph's lock
    private let graph: WorkGraph
    private let request: ImageRequest
    private var subscription: (any TaskSubscription)?
    private var result: Result<FetchedData, ImagePipeline.Error>?
    private var waiter: CheckedContinuation<Result<FetchedData, ImagePipeline.Error>, Never>?

    init(request: ImageRequest, graph: WorkGraph) {
        self.request = request
        self.graph = graph
    }

    func run() async throws -> FetchedData {
        let diskKey = graph.caches.dataCache == nil ? nil : RequestCacheKeys.originalDiskKey(request)
        graph.sync {
            guard !graph.isInvalidated else {
                complete(.failure(.pipelineInvalidated))
                return
            }
            graph.register(self)
            let fetch = graph.fetchTask(for: request, diskKey: diskKey)
            fetch.wantsOriginalOnDisk = true // `data(for:)` never encodes: it stores what it loads
            subscription = fetch.subscribe(priority: request.priority) { [self] event in
                switch event {
                case .progress: break
                case .value(let fetched):
                    subscription = nil
                    complete(.success(fetched))
                case .failure(let error):
                    subscription = nil
                    complete(.failure(error))
                }
            }
        }
        return try await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let finished: Result<FetchedData, ImagePipeline.Error>? = graph.sync {
                    if let result { return result }
                    waiter = continuation
                    return nil
                }
                if let finished { continuation.resume(returning: finished) }
            }
        } onCancel: {
            graph.sync { cancelLocked() }
        }.get()
    }

    func cancelLocked() {
        guard result == nil else { return }
        let subscription = self.subscription
        self.subscription = nil
        complete(.failure(.cancelled))
        subscription?.unsubscribe()
    }

    private func complete(_ result: Result<FetchedData, ImagePipeline.Error>) {
        guard self.result == nil else { return }
        self.result = result
        graph.unregister(self)
        waiter?.resume(returning: result) // only enqueues the awaiting task
        waiter = nil
    }
}
