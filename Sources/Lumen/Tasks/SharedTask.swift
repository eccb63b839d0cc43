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
        case value(Value)
        case failure(ImagePipeline.Error)
    }

    typealias Handler = (Event) -> Void

    struct Subscription: TaskSubscription {
        let task: SharedTask<Value>
        let id: Int
        func unsubscribe() { task.unsubscribe(id) }
        func setPriority(_ priority: ImageRequest.Priority) { task.setPriority(priority, for: id) }
    }

    private struct Subscriber {
        var priority: ImageRequest.Priority
        var handler: Handler
    }

    let graph: WorkGraph
    let stage: ImagePipeline.Stage
    @exclusivity(unchecked) private var subscribers: [Int: Subscriber] = [:]
    @exclusivity(unchecked) private var nextID = 0
    @exclusivity(unchecked) private var priorityCounts = [Int](repeating: 0, count: ImageRequest.Priority.allCases.count)
    @exclusivity(unchecked) private(set) var priority = ImageRequest.Priority.veryLow
    @exclusivity(unchecked) private var isStarted = false
    @exclusivity(unchecked) private(set) var isDisposed = false
    /// The queued or running operation of this stage, if any.
    @exclusivity(unchecked) var operation: (queue: WorkQueue, item: WorkQueue.Item)?
    /// The subscription to the stage below, while its result is awaited.
    @exclusivity(unchecked) var dependency: (any TaskSubscription)?
    /// Removes the task from its pool.
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

    /// Starts the work; called once, when the first subscriber arrives.
    func start() { preconditionFailure("SharedTask.start() must be overridden") }

    // MARK: - Subscriptions

    /// Subscribes `handler`; returns `nil` if the task has already ended.
    final func subscribe(priority: ImageRequest.Priority, _ handler: @escaping Handler) -> Subscription? {
        guard !isDisposed else { return nil }
        nextID += 1
        let id = nextID
        subscribers[id] = Subscriber(priority: priority, handler: handler)
        priorityCounts[priority.rawValue] += 1
        if !isStarted {
            isStarted = true
            self.priority = priority
            graph.count(stage) { $0.started += 1 }
            graph.emit(.started(stage, key: keyDescription))
            start()
        } else {
            graph.count(stage) { $0.joined += 1 }
            graph.emit(.joined(stage, key: keyDescription))
            if priority > self.priority { updatePriority() }
        }
        return isDisposed ? nil : Subscription(task: self, id: id)
    }

    private func unsubscribe(_ id: Int) {
        guard !isDisposed, let subscriber = subscribers.removeValue(forKey: id) else { return }
        priorityCounts[subscriber.priority.rawValue] -= 1
        if subscribers.isEmpty {
            cancel()
        } else if subscriber.priority == priority {
            updatePriority()
        }
    }

    private func setPriority(_ priority: ImageRequest.Priority, for id: Int) {
        guard !isDisposed, let old = subscribers[id]?.priority, old != priority else { return }
        subscribers[id]?.priority = priority
        priorityCounts[old.rawValue] -= 1
        priorityCounts[priority.rawValue] += 1
        updatePriority()
    }

    private func updatePriority() {
        let newPriority = ImageRequest.Priority(rawValue: priorityCounts.lastIndex { $0 > 0 } ?? 0) ?? .veryLow
        guard newPriority != priority else { return }
        priority = newPriority
        if let operation { operation.queue.setPriority(operation.item, newPriority) }
        dependency?.setPriority(newPriority)
    }

    // MARK: - Outcomes

    /// Forwards progress to every subscriber.
    final func send(progress: ImageTask.Progress) {
        guard !isDisposed else { return }
        for subscriber in subscribers.values { subscriber.handler(.progress(progress)) }
    }

    /// Ends the task with `value`, delivered to every subscriber.
    final func finish(with value: Value) {
        guard !isDisposed else { return }
        let current = subscribers
        dispose()
        graph.count(stage) { $0.completed += 1 }
        graph.emit(.completed(stage, key: keyDescription))
        for subscriber in current.values { subscriber.handler(.value(value)) }
    }

    /// Ends the task with `error`, delivered to every subscriber; the task leaves its pool at
    /// once so that the next request starts fresh.
    final func fail(_ error: ImagePipeline.Error) {
        guard !isDisposed else { return }
        let current = subscribers
        dispose()
        graph.count(stage) { $0.failed += 1 }
        graph.emit(.failed(stage, key: keyDescription, error))
        let stage = stage, key = keyDescription
        graph.log { "\(stage) failed for \(key): \(error)" }
        for subscriber in current.values { subscriber.handler(.failure(error)) }
    }

    /// The last subscriber left: stop the operation, release the dependency.
    private func cancel() {
        if let operation {
            // Cancelling a running Swift task runs its cancellation handlers: not under the lock.
            graph.afterUnlock { operation.queue.cancel(operation.item) }
        }
        dispose()
        graph.count(stage) { $0.cancelled += 1 }
        graph.emit(.cancelled(stage, key: keyDescription))
    }

    private func dispose() {
        isDisposed = true
        subscribers = [:]
        operation = nil
        let dependency = self.dependency
        self.dependency = nil
        dependency?.unsubscribe()
        onDisposed?()
        onDisposed = nil
    }
}
