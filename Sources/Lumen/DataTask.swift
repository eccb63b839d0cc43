import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One byte load running in an ``ImagePipeline`` (``ImagePipeline/dataTask(with:)``): the
/// original bytes of a request, never decoded, with a priority that can change while it runs.
///
/// A data task subscribes to the fetch stage of the pipeline's work graph when it is created,
/// sharing a running download of the same bytes with image requests and other data tasks. It
/// owns nothing but its subscription: ``cancel()`` removes it, and the download is cancelled
/// only when nobody else needs it. Setting ``priority`` changes this subscription's priority;
/// the download runs at the highest priority among its subscribers. Bytes go to the disk
/// cache as for ``ImagePipeline/data(for:)`` (original bytes, never encoded images).
///
/// All members are safe to use from any thread.
public final class DataTask: @unchecked Sendable { // mutable state guarded by the graph's lock
    /// The request whose bytes the task loads.
    public let request: ImageRequest

    private let graph: WorkGraph
    @exclusivity(unchecked) private var _priority: ImageRequest.Priority
    @exclusivity(unchecked) private var _progress = ImageTask.Progress(completed: 0, total: 0)
    @exclusivity(unchecked) private var outcome: Result<FetchedData, ImagePipeline.Error>?
    @exclusivity(unchecked) private var subscription: (any TaskSubscription)?
    @exclusivity(unchecked) private var waiters: [UnsafeContinuation<Void, Never>] = []
    @exclusivity(unchecked) var rootIndex = -1

    init(request: ImageRequest, graph: WorkGraph) {
        self.request = request
        self.graph = graph
        self._priority = request.priority
    }

    /// Subscribes to the fetch stage. The disk key is computed here, without the lock.
    func start() {
        let diskKey = graph.caches.hasDataCache ? RequestCacheKeys.originalDiskKey(request) : nil
        graph.sync {
            guard !graph.isInvalidated else {
                complete(.failure(.pipelineInvalidated))
                return
            }
            graph.register(self)
            let fetch = graph.fetchTask(for: request, diskKey: diskKey)
            fetch.wantsOriginalOnDisk = true // a byte load never encodes: it stores what it loads
            // Unowned: the graph keeps the task alive while it is registered, which outlasts
            // the subscription.
            subscription = fetch.subscribe(priority: _priority) { [unowned self] event in
                switch event {
                case .progress(let progress):
                    _progress = progress
                case .preview:
                    break // partial bytes are for decode stages
                case .value(let fetched):
                    subscription = nil
                    complete(.success(fetched))
                case .failure(let error):
                    subscription = nil
                    complete(.failure(error))
                }
            }
        }
    }

    /// The priority of this task's subscription. Raising it while the download is queued
    /// moves it up the data-loading queue; lowering it lets the download fall back to the
    /// highest priority among its other subscribers.
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
    public var progress: ImageTask.Progress { graph.sync { _progress } }

    /// Whether the task is running, was cancelled, or completed (successfully or not).
    public var state: ImageTask.State {
        graph.sync {
            switch outcome {
            case nil: .running
            case .failure(let error) where error.code == .cancelled: .cancelled
            default: .completed
            }
        }
    }

    /// Cancels the task: it ends with ``ImagePipeline/Error/cancelled`` unless it has already
    /// ended. A download other requests share goes on.
    public func cancel() {
        graph.sync { cancelLocked() }
    }

    /// The bytes and the response they came with (`nil` for data closures and disk-cache
    /// hits), once the task ends. Cancelling the awaiting Swift task cancels this task.
    /// - Throws: ``ImagePipeline/Error``.
    public var response: (Data, URLResponse?) {
        get async throws {
            if let outcome = graph.sync({ outcome }) { return try Self.unpack(outcome) }
            await withTaskCancellationHandler {
                await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                    let isFinished: Bool = graph.sync {
                        if outcome != nil { return true }
                        waiters.append(continuation)
                        return false
                    }
                    if isFinished { continuation.resume() }
                }
            } onCancel: {
                cancel()
            }
            // Read without the lock: set under the lock before any waiter is resumed, and
            // never changed afterwards.
            guard let outcome else { preconditionFailure("DataTask: resumed without a result") }
            return try Self.unpack(outcome)
        }
    }

    private static func unpack(_ outcome: Result<FetchedData, ImagePipeline.Error>) throws(ImagePipeline.Error) -> (Data, URLResponse?) {
        let fetched = try outcome.get()
        return (fetched.data, fetched.urlResponse)
    }

    // MARK: - Internals (graph lock held)

    private func complete(_ outcome: Result<FetchedData, ImagePipeline.Error>) {
        guard self.outcome == nil else { return }
        self.outcome = outcome
        graph.unregister(self)
        // Resumed once the lock is released (see `ImageTask.complete`).
        if !waiters.isEmpty {
            let resumed = waiters
            graph.afterUnlock { for waiter in resumed { waiter.resume() } }
        }
        waiters = []
    }
}

extension DataTask: RootTask {
    func cancelLocked() {
        guard outcome == nil else { return }
        let subscription = self.subscription
        self.subscription = nil
        complete(.failure(.cancelled))
        subscription?.unsubscribe()
    }
}

extension DataTask: Hashable {
    /// Tasks are equal only to themselves.
    public static func == (lhs: DataTask, rhs: DataTask) -> Bool { lhs === rhs }
    /// Hashes the task's object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

extension DataTask: CustomStringConvertible {
    /// `DataTask(…)` around the request's description.
    public var description: String { "DataTask(\(request))" }
}
