import Foundation

/// A handle on one subscription to a ``SharedTask``, type-erased so that a task can hold its
/// dependency without knowing its value type. Use only while holding the graph's lock.
protocol TaskSubscription: Sendable {
    /// Leaves the task; the last subscriber leaving cancels it.
    func unsubscribe()
    /// Changes this subscriber's priority; the task's priority is the maximum over its
    /// subscribers.
    func setPriority(_ priority: ImageRequest.Priority)
}

/// One node of the work graph: shared work for one stage key, with subscribers.
///
/// Lifecycle: created by the graph (and put in its stage's pool when coalescing is on);
/// ``start()`` runs when the first subscriber arrives; later subscribers join. The task ends
/// exactly once, by producing a value, by failing (every current subscriber gets the same
/// error) or by being cancelled when its last subscriber leaves; in every case it leaves its
/// pool at once and releases its dependency, so cancellation cascades only as far as nobody
/// else needs the work.
///
/// The task's priority is the maximum over its live subscribers (counted per level, so joining
/// and leaving are O(1)); a change is pushed to the queued operation and to the dependency.
///
/// Every member is used only while holding ``WorkGraph/lock``. Subscriber handlers run under
/// that lock and must only do bookkeeping.
class SharedTask<Value: Sendable>: @unchecked Sendable { // state guarded by graph.lock
    enum Event {
        case progress(ImageTask.Progress)
        /// A progressive preview (partial bytes at the fetch stage, a preview image above);
        /// never sent after the task ended.
        case preview(Value)
        case value(Value)
        case failure(ImagePipeline.Error)
    }

    typealias Handler = (Event) -> Void

    /// A subscriber's handler as the state keeps it: wrapped, because a function value stored
    /// as a generic parameter itself would be reabstracted (a thunk allocated per subscriber,
    /// and one more call per delivery).
    struct Recipient {
        let handler: Handler
    }

    struct Subscription: TaskSubscription {
        let task: SharedTask<Value>
        let token: SharedTaskState<Recipient>.Token
        func unsubscribe() { task.unsubscribe(token) }
        func setPriority(_ priority: ImageRequest.Priority) { task.setPriority(priority, for: token) }
    }

    let graph: WorkGraph
    let stage: ImagePipeline.Stage
    /// The task's life, subscribers and priority: the rules are in ``SharedTaskState``; this
    /// class performs what its events answer.
    @exclusivity(unchecked) private var state = SharedTaskState<Recipient>()
    /// The queued or running operation of this stage, if any.
    @exclusivity(unchecked) var operation: (queue: WorkQueue, item: WorkQueue.Item)?
    /// The subscription to the stage below, while its result is awaited.
    @exclusivity(unchecked) var dependency: (any TaskSubscription)?
    /// Whether the task is in its stage's pool, which it leaves by ``poolKey`` when it ends
    /// (``WorkGraph/removeFromPool(_:)``).
    @exclusivity(unchecked) var isPooled = false
    /// Runs when the task ends (after it left its pool).
    @exclusivity(unchecked) var onDisposed: (() -> Void)?

    init(graph: WorkGraph, stage: ImagePipeline.Stage) {
        self.graph = graph
        self.stage = stage
        // Created under the graph's lock: counted with the critical section's other changes.
        graph.countTaskCreated()
    }

    deinit {
        // A task may be released under the graph's lock or not: waiters are checked from a
        // new task, never here.
        graph.metricsStore.updateCheckingWaitersLater { $0.liveTasks -= 1 }
    }

    /// A description of the stage key for events and logs.
    var keyDescription: String { "" }

    /// The task's pool and key there, for leaving the pool (each stage's subclass says it).
    var poolKey: StagePoolKey { preconditionFailure("SharedTask.poolKey must be overridden") }

    /// Starts the work; called once, when the first subscriber arrives.
    func start() { preconditionFailure("SharedTask.start() must be overridden") }

    /// The highest priority among the live subscribers.
    final var priority: ImageRequest.Priority { state.priority }
    /// How many subscribers the task has.
    final var subscriberCount: Int { state.subscriberCount }
    /// Whether the task has ended (finished, failed or cancelled).
    final var isDisposed: Bool { state.isEnded }

    // MARK: - Subscriptions

    /// Subscribes `handler`; returns `nil` if the task has already ended.
    final func subscribe(priority: ImageRequest.Priority, _ handler: @escaping Handler) -> Subscription? {
        let (token, arrival) = state.subscribe(Recipient(handler: handler), priority: priority)
        switch arrival {
        case .refused:
            return nil
        case .start:
            graph.count(stage) { $0.started += 1 }
            graph.emit(.started(stage, key: keyDescription))
            start() // may end the task at once (a failure found before any work)
        case .join(let raised, let replay):
            graph.count(stage) { $0.joined += 1 }
            graph.emit(.joined(stage, key: keyDescription))
            if let raised { pushPriority(raised) }
            // A subscriber joining work under way starts from where it is, not from zero.
            if let replay { handler(.progress(replay)) }
        }
        guard let token, !state.isEnded else { return nil }
        return Subscription(task: self, token: token)
    }

    private func unsubscribe(_ token: SharedTaskState<Recipient>.Token) {
        switch state.unsubscribe(token) {
        case .none: break
        case .cancel: cancel()
        case .lowerPriority(let priority): pushPriority(priority)
        }
    }

    private func setPriority(_ priority: ImageRequest.Priority, for token: SharedTaskState<Recipient>.Token) {
        if let changed = state.setPriority(priority, for: token) { pushPriority(changed) }
    }

    /// Gives the queued operation and the dependency the task's new priority.
    private func pushPriority(_ priority: ImageRequest.Priority) {
        if let operation { operation.queue.setPriority(operation.item, priority) }
        dependency?.setPriority(priority)
    }

    // MARK: - Outcomes

    /// Forwards progress to every subscriber.
    final func send(progress: ImageTask.Progress) {
        state.progress(progress)?.forEach { $0.handler(.progress(progress)) }
    }

    /// Forwards a progressive preview to every subscriber (see ProgressiveDecoding.swift).
    final func send(preview: Value) {
        state.previewRecipients()?.forEach { $0.handler(.preview(preview)) }
    }

    /// Ends the task with `value`, delivered to every subscriber.
    final func finish(with value: Value) {
        guard let recipients = state.finish() else { return }
        dispose()
        graph.count(stage) { $0.completed += 1 }
        graph.emit(.completed(stage, key: keyDescription))
        recipients.forEach { $0.handler(.value(value)) }
    }

    /// Ends the task with `error`, delivered to every subscriber; the task leaves its pool at
    /// once so that the next request starts fresh.
    final func fail(_ error: ImagePipeline.Error) {
        guard let recipients = state.finish() else { return }
        dispose()
        graph.count(stage) { $0.failed += 1 }
        graph.emit(.failed(stage, key: keyDescription, error))
        // Logged once, by the stage where it happened: a decode or processing stage only passes
        // its input's failure (a fetch's, say) on.
        if Self.isOwnFailure(error, at: stage) {
            let stage = stage, key = keyDescription
            graph.log { "\(stage) failed for \(key): \(error)" }
        }
        recipients.forEach { $0.handler(.failure(error)) }
    }

    /// Whether `error` happened at `stage` rather than below it: a fetch's every failure, a
    /// decode's decoding failures, a processing stage's processor failures.
    static func isOwnFailure(_ error: ImagePipeline.Error, at stage: ImagePipeline.Stage) -> Bool {
        switch stage {
        case .fetch: true
        case .decode: error.code == .decodingFailed
        case .process: error.code == .processingFailed
        }
    }

    /// The last subscriber left (the state has ended the task): stop the operation, release
    /// the dependency.
    private func cancel() {
        // Out of its queue at once: a queued operation left there until the lock is released
        // could be started meanwhile by another thread whose item just finished. Only cancelling
        // a running Swift task, which runs its cancellation handlers, waits for the unlock.
        if let operation, let task = operation.queue.withdraw(operation.item) {
            graph.cancelAfterUnlock([task])
        }
        dispose()
        graph.count(stage) { $0.cancelled += 1 }
        graph.emit(.cancelled(stage, key: keyDescription))
    }

    /// Releases what an ended task holds: its operation, its dependency, its place in the pool.
    private func dispose() {
        operation = nil
        let dependency = self.dependency
        self.dependency = nil
        dependency?.unsubscribe()
        if isPooled {
            isPooled = false
            graph.removeFromPool(poolKey)
        }
        onDisposed?()
        onDisposed = nil
    }
}
