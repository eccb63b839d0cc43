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

    struct Subscription: TaskSubscription {
        let task: SharedTask<Value>
        /// The subscriber's slot in the task's list, and its id (which tells it from a later
        /// subscriber reusing the slot).
        let slot: Int
        let id: Int
        func unsubscribe() { task.unsubscribe(slot: slot, id: id) }
        func setPriority(_ priority: ImageRequest.Priority) { task.setPriority(priority, slot: slot, id: id) }
    }

    /// A slot of the subscriber list; `handler` is `nil` once the subscriber left.
    private struct Subscriber {
        var id: Int
        var priority: ImageRequest.Priority
        var handler: Handler?
    }

    /// Subscriber slots: slot 0 inline, the others in an array.
    private struct Slots {
        private var first: Subscriber?
        private var others: [Subscriber] = []

        var count: Int { first == nil ? 0 : others.count + 1 }

        /// Adds a slot holding `subscriber`; answers its index.
        mutating func append(_ subscriber: Subscriber) -> Int {
            guard first != nil else {
                first = subscriber
                return 0
            }
            others.append(subscriber)
            return others.count
        }

        subscript(slot: Int) -> Subscriber {
            get { slot == 0 ? first! : others[slot - 1] }
            set {
                if slot == 0 { first = newValue } else { others[slot - 1] = newValue }
            }
        }

        func forEach(_ body: (Subscriber) -> Void) {
            guard let first else { return }
            body(first)
            others.forEach(body)
        }
    }

    let graph: WorkGraph
    let stage: ImagePipeline.Stage
    /// Subscribers in slots (not a dictionary: joining appends, leaving clears its slot,
    /// which a later subscriber reuses, so the list never outgrows the most subscribers the
    /// task had at once). The first slot is inline: most tasks have one subscriber.
    @exclusivity(unchecked) private var subscribers = Slots()
    /// Slots cleared by subscribers that left, for reuse.
    @exclusivity(unchecked) private var freeSlots: [Int] = []
    @exclusivity(unchecked) private(set) var subscriberCount = 0
    @exclusivity(unchecked) private var nextID = 0
    /// Live subscribers per priority level (inline: no array allocated per task).
    @exclusivity(unchecked) private var priorityCounts = InlineArray<5, Int>(repeating: 0)
    @exclusivity(unchecked) private(set) var priority = ImageRequest.Priority.veryLow
    @exclusivity(unchecked) private var isStarted = false
    @exclusivity(unchecked) private(set) var isDisposed = false
    /// The latest progress sent, for subscribers that join later.
    @exclusivity(unchecked) private var lastProgress: ImageTask.Progress?
    /// The queued or running operation of this stage, if any.
    @exclusivity(unchecked) var operation: (queue: WorkQueue, item: WorkQueue.Item)?
    /// The subscription to the stage below, while its result is awaited.
    @exclusivity(unchecked) var dependency: (any TaskSubscription)?
    /// Whether the task is in its stage's pool, which it leaves when it ends
    /// (``WorkGraph/removeFromPool(_:)``).
    @exclusivity(unchecked) var isPooled = false
    /// Runs when the task ends (after it left its pool).
    @exclusivity(unchecked) var onDisposed: (() -> Void)?

    init(graph: WorkGraph, stage: ImagePipeline.Stage) {
        assert(ImageRequest.Priority.allCases.count == 5, "SharedTask: one priority count per level")
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
        let subscriber = Subscriber(id: id, priority: priority, handler: handler)
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            subscribers[slot] = subscriber
        } else {
            slot = subscribers.append(subscriber)
        }
        subscriberCount += 1
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
            // A subscriber joining work under way starts from where it is, not from zero.
            if let lastProgress { handler(.progress(lastProgress)) }
        }
        return isDisposed ? nil : Subscription(task: self, slot: slot, id: id)
    }

    /// Whether `slot` holds the live subscriber `id`.
    private func holds(_ slot: Int, _ id: Int) -> Bool {
        slot < subscribers.count && subscribers[slot].id == id && subscribers[slot].handler != nil
    }

    private func unsubscribe(slot: Int, id: Int) {
        guard !isDisposed, holds(slot, id) else { return }
        let subscriber = subscribers[slot]
        subscribers[slot].handler = nil
        freeSlots.append(slot)
        subscriberCount -= 1
        priorityCounts[subscriber.priority.rawValue] -= 1
        if subscriberCount == 0 {
            cancel()
        } else if subscriber.priority == priority {
            updatePriority()
        }
    }

    private func setPriority(_ priority: ImageRequest.Priority, slot: Int, id: Int) {
        guard !isDisposed, holds(slot, id) else { return }
        let old = subscribers[slot].priority
        guard old != priority else { return }
        subscribers[slot].priority = priority
        priorityCounts[old.rawValue] -= 1
        priorityCounts[priority.rawValue] += 1
        updatePriority()
    }

    private func updatePriority() {
        var level = priorityCounts.count - 1
        while level > 0 && priorityCounts[level] == 0 { level -= 1 }
        let newPriority = ImageRequest.Priority(rawValue: level) ?? .veryLow
        guard newPriority != priority else { return }
        priority = newPriority
        if let operation { operation.queue.setPriority(operation.item, newPriority) }
        dependency?.setPriority(newPriority)
    }

    // MARK: - Outcomes

    /// Forwards progress to every subscriber.
    final func send(progress: ImageTask.Progress) {
        guard !isDisposed else { return }
        lastProgress = progress
        let current = subscribers
        current.forEach { $0.handler?(.progress(progress)) }
    }

    /// Forwards a progressive preview to every subscriber (see ProgressiveDecoding.swift).
    final func send(preview: Value) {
        guard !isDisposed else { return }
        let current = subscribers
        current.forEach { $0.handler?(.preview(preview)) }
    }

    /// Ends the task with `value`, delivered to every subscriber.
    final func finish(with value: Value) {
        guard !isDisposed else { return }
        let current = subscribers
        dispose()
        graph.count(stage) { $0.completed += 1 }
        graph.emit(.completed(stage, key: keyDescription))
        current.forEach { $0.handler?(.value(value)) }
    }

    /// Ends the task with `error`, delivered to every subscriber; the task leaves its pool at
    /// once so that the next request starts fresh.
    final func fail(_ error: ImagePipeline.Error) {
        guard !isDisposed else { return }
        let current = subscribers
        dispose()
        graph.count(stage) { $0.failed += 1 }
        graph.emit(.failed(stage, key: keyDescription, error))
        // Logged once, by the stage where it happened: a decode or processing stage only passes
        // its input's failure (a fetch's, say) on.
        if Self.isOwnFailure(error, at: stage) {
            let stage = stage, key = keyDescription
            graph.log { "\(stage) failed for \(key): \(error)" }
        }
        current.forEach { $0.handler?(.failure(error)) }
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

    /// The last subscriber left: stop the operation, release the dependency.
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

    private func dispose() {
        isDisposed = true
        subscribers = Slots()
        freeSlots = []
        subscriberCount = 0
        operation = nil
        let dependency = self.dependency
        self.dependency = nil
        dependency?.unsubscribe()
        if isPooled {
            isPooled = false
            graph.removeFromPool(self)
        }
        onDisposed?()
        onDisposed = nil
    }
}
