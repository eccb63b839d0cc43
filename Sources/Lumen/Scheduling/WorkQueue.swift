import Foundation
import Synchronization

/// A bounded, priority-ordered queue for one stage of the pipeline.
///
/// At most ``maxConcurrentCount`` items run at once. Pending items start highest priority
/// first, FIFO within a priority level; a pending item can change priority (it moves to the
/// back of its new level) or be cancelled before it starts. With ``Execution-swift.enum/threads``
/// synchronous work runs on the queue's own worker threads (never on the cooperative pool);
/// with ``Execution-swift.enum/tasks`` each item runs in a detached Swift task that is
/// cancelled when the item is (a task whose item ends goes on with the next pending item).
///
/// Share a queue between pipelines to share its limit. Set ``isSuspended`` to hold items
/// pending (tests use this to observe priorities).
public final class WorkQueue: Sendable {
    /// Where admitted items run.
    public enum Execution: Sendable {
        /// In detached Swift tasks (for async work such as downloads).
        case tasks
        /// On dedicated worker threads, at most ``WorkQueue/maxConcurrentCount`` of them (for
        /// CPU work such as decoding).
        case threads
    }

    enum Job {
        case async(@Sendable () async -> Void)
        case sync(@Sendable () -> Void)
    }

    /// One unit of work in the queue. State is guarded by the owning queue's lock.
    final class Item: @unchecked Sendable { // state guarded by the owning queue's lock
        enum State { case pending, running, finished, cancelled }
        @exclusivity(unchecked) fileprivate(set) var priority: ImageRequest.Priority
        @exclusivity(unchecked) fileprivate var job: Job?
        @exclusivity(unchecked) fileprivate var state = State.pending
        @exclusivity(unchecked) fileprivate var sequence = 0
        /// The Swift task running the item, for items that run in one.
        @exclusivity(unchecked) fileprivate var runner: Runner?
        /// Cancellation asked for while running, before the item had its runner.
        @exclusivity(unchecked) fileprivate var isCancellationRequested = false
        /// Set when the item is cancelled while it runs, for synchronous work that watches it.
        fileprivate let cancellation: DecodeCancellation?

        fileprivate init(priority: ImageRequest.Priority, job: Job, cancellation: DecodeCancellation? = nil) {
            self.priority = priority
            self.job = job
            self.cancellation = cancellation
        }
    }

    /// A detached Swift task running items one after another: when an item ends, the task
    /// takes the next pending item itself rather than ending and leaving it to a new task (a
    /// task creation and a trip through the global executor's queue per item). It goes on only
    /// while nobody asked to cancel it, so cancelling one item's task never reaches another.
    final class Runner: @unchecked Sendable { // state guarded by the owning queue's lock
        @exclusivity(unchecked) fileprivate var task: Task<Void, Never>?
        @exclusivity(unchecked) fileprivate var isCancellationRequested = false
    }

    /// The queue's name, for diagnostics.
    public let name: String
    /// Where items run.
    public let execution: Execution

    /// The queue's bookkeeping, one value under one lock: its methods work on an `inout`
    /// value, so they pay for no run-time exclusivity checks (as class properties would).
    private struct State {
        var maxConcurrentCount: Int
        var isSuspended = false
        /// Pending items per priority level, FIFO from `heads[level]`; an entry is stale when
        /// its item is no longer pending or was re-queued (its sequence changed).
        var levels: [[(item: Item, sequence: Int)]]
        var heads: [Int]
        var pending = 0
        var running = 0
        var sequence = 0
        /// Entries from the heads on, valid or stale.
        var entries = 0
        /// Changes so far: bumped when an item is inserted, re-prioritised, admitted, finished
        /// or withdrawn (see ``WorkQueue/changeCount``).
        var changes = 0
        /// Tasks in ``WorkQueue/waitForChange(after:)``, by waiter id; all of them are due at
        /// the next change (a waiter registers only while nothing changed after its version).
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        /// The id of the latest waiter (ids let a cancelled waiter find its continuation).
        var nextWaiterID = 0

        init(maxConcurrentCount: Int) {
            self.maxConcurrentCount = maxConcurrentCount
            levels = Array(repeating: [], count: ImageRequest.Priority.allCases.count)
            heads = Array(repeating: 0, count: ImageRequest.Priority.allCases.count)
        }

        mutating func insert(_ item: Item) {
            changes += 1
            sequence += 1
            item.sequence = sequence
            levels[item.priority.rawValue].append((item, sequence))
            pending += 1
            entries += 1
        }

        /// Drops every stale entry once they outnumber the pending items (re-prioritised or
        /// cancelled items leave one each, which head compaction alone may never reach).
        mutating func compactIfMostlyStale() {
            guard entries - pending > max(pending, 16) else { return }
            for level in levels.indices {
                levels[level] = levels[level][heads[level]...].filter {
                    $0.item.state == .pending && $0.item.sequence == $0.sequence
                }
                heads[level] = 0
            }
            entries = pending
        }

        /// The next valid pending item, highest level first.
        mutating func popNext() -> Item? {
            var level = levels.count - 1
            while level >= 0 {
                while heads[level] < levels[level].count {
                    let entry = levels[level][heads[level]]
                    heads[level] += 1
                    entries -= 1
                    if entry.item.state == .pending && entry.item.sequence == entry.sequence {
                        compact(level)
                        return entry.item
                    }
                }
                compact(level)
                level -= 1
            }
            return nil
        }

        /// Drops consumed entries once they are most of the array.
        mutating func compact(_ level: Int) {
            let head = heads[level]
            guard head > 0 else { return }
            if head == levels[level].count {
                levels[level].removeAll(keepingCapacity: true)
                heads[level] = 0
            } else if head > 64 && head * 2 > levels[level].count {
                levels[level].removeFirst(head)
                heads[level] = 0
            }
        }

        /// Marks the next pending item running, if there is room.
        mutating func admitNext() -> (Item, Job)? {
            guard !isSuspended, running < maxConcurrentCount, let item = popNext(), let job = item.job else { return nil }
            item.state = .running
            item.job = nil
            pending -= 1
            running += 1
            changes += 1
            return (item, job)
        }

        /// The waiters to resume when the critical section that began at change count
        /// `before` changed the queue: `nil` (touching nothing) when nobody waits.
        mutating func dueWaiters(since before: Int) -> [CheckedContinuation<Void, Never>]? {
            guard changes != before, !waiters.isEmpty else { return nil }
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
    }

    private let state: Mutex<State>
    private let workers: WorkerThreads?

    /// Runs `body` under the queue's lock; once unlocked, resumes the tasks waiting for a change
    /// if `body` made one. Every critical section that may change the queue goes through here.
    private func withLockNotifying<Result: Sendable>(_ body: (inout State) -> Result) -> Result {
        let (result, waiters) = state.withLock { state in
            let before = state.changes
            let result = body(&state)
            return (result, state.dueWaiters(since: before))
        }
        if let waiters { for waiter in waiters { waiter.resume() } }
        return result
    }

    /// Creates a queue running at most `maxConcurrentCount` items at once.
    public init(name: String, maxConcurrentCount: Int, execution: Execution) {
        precondition(maxConcurrentCount >= 1, "WorkQueue: maxConcurrentCount must be at least 1")
        self.name = name
        self.execution = execution
        self.state = Mutex(State(maxConcurrentCount: maxConcurrentCount))
        self.workers = execution == .threads ? WorkerThreads(name: name) : nil
    }

    /// The most items running at once. Raising it starts pending items at once.
    public var maxConcurrentCount: Int {
        get { state.withLock { $0.maxConcurrentCount } }
        set {
            precondition(newValue >= 1, "WorkQueue: maxConcurrentCount must be at least 1")
            state.withLock { $0.maxConcurrentCount = newValue }
            drainCancelling()
        }
    }

    /// While `true`, no pending item starts (running items go on).
    public var isSuspended: Bool {
        get { state.withLock { $0.isSuspended } }
        set {
            state.withLock { $0.isSuspended = newValue }
            if !newValue { drainCancelling() }
        }
    }

    /// Items waiting to start.
    public var pendingCount: Int { state.withLock { $0.pending } }
    /// Items running now.
    public var runningCount: Int { state.withLock { $0.running } }

    /// Stored pending entries, stale ones included (tests check they stay bounded).
    var storedEntryCount: Int { state.withLock { $0.entries } }

    /// How many times the queue changed so far: an item was inserted, re-prioritised, admitted,
    /// finished or withdrawn. Read it before looking at the queue, then pass it to
    /// ``waitForChange(after:)`` to wait for what the look did not see.
    var changeCount: Int { state.withLock { $0.changes } }

    /// Returns once the queue changed after ``changeCount`` was `version` (at once if it already
    /// has), or once the calling task is cancelled. For tests, which wait on the queue's counts
    /// and priorities this way rather than by polling; a queue nobody waits on pays one integer
    /// increment per change.
    func waitForChange(after version: Int) async {
        let id = state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Cancellation is read under the lock: a cancel that comes after this look
                // finds the waiter registered and resumes it.
                let isDue = state.withLock { state in
                    if state.changes != version || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if isDue { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// The priorities of the pending items in the order they would start. A test hook, behind
    /// the `Testing` SPI: `@_spi(Testing) import Lumen`.
    @_spi(Testing)
    public var pendingPriorities: [ImageRequest.Priority] {
        state.withLock { state in
            var result: [ImageRequest.Priority] = []
            for level in state.levels.indices.reversed() {
                for entry in state.levels[level][state.heads[level]...] where entry.item.state == .pending && entry.item.sequence == entry.sequence {
                    result.append(entry.item.priority)
                }
            }
            return result
        }
    }

    // MARK: - Items

    /// Adds async work; it runs in a detached task that is cancelled if the item is.
    ///
    /// - Parameter cancelLater: receives the tasks (started by this call) whose cancellation
    ///   was asked for while they were being started; the caller cancels them once it holds
    ///   no lock (cancelling runs the work's cancellation handlers). `nil`: cancelled here.
    func enqueue(
        priority: ImageRequest.Priority, cancelLater: (([Task<Void, Never>]) -> Void)? = nil,
        _ work: @escaping @Sendable () async -> Void
    ) -> Item {
        enqueue(Item(priority: priority, job: .async(work)), cancelLater: cancelLater)
    }

    /// Adds synchronous work; it runs on a worker thread (or a detached task for a
    /// ``Execution-swift.enum/tasks`` queue). `cancelLater`: as for the async variant.
    /// `cancellation`, when given, is cancelled if the item is cancelled while it runs, so that
    /// work watching it can stop part-way.
    func enqueue(
        priority: ImageRequest.Priority, cancelLater: (([Task<Void, Never>]) -> Void)? = nil,
        cancellation: DecodeCancellation? = nil, _ work: @escaping @Sendable () -> Void
    ) -> Item {
        enqueue(Item(priority: priority, job: .sync(work), cancellation: cancellation), cancelLater: cancelLater)
    }

    private func enqueue(_ item: Item, cancelLater: (([Task<Void, Never>]) -> Void)?) -> Item {
        // Inserts and admits in one critical section: when the queue is full (the common case
        // under load) that is the only one.
        let admitted: (Item, Job, Int)? = withLockNotifying { state in
            state.insert(item)
            guard let (next, job) = state.admitNext() else { return nil }
            return (next, job, state.maxConcurrentCount)
        }
        guard let (next, job, limit) = admitted else { return item }
        var cancellations: [Task<Void, Never>] = []
        if let task = start(next, job, threadLimit: limit) { cancellations.append(task) }
        cancellations += drain()
        if !cancellations.isEmpty {
            if let cancelLater { cancelLater(cancellations) } else { cancellations.forEach { $0.cancel() } }
        }
        return item
    }

    /// Moves a pending item to the back of its new priority level; a running item only records
    /// the new priority.
    func setPriority(_ item: Item, _ priority: ImageRequest.Priority) {
        withLockNotifying { state in
            guard item.priority != priority else { return }
            item.priority = priority
            if item.state == .pending {
                state.pending -= 1
                state.insert(item)
                state.compactIfMostlyStale()
            } else {
                state.changes += 1
            }
        }
    }

    /// The priority `item` has in this queue (the last one ``setPriority(_:_:)`` gave it).
    func priority(of item: Item) -> ImageRequest.Priority {
        state.withLock { _ in item.priority }
    }

    /// Removes a pending item (it never runs); cancels the task of a running async item and the
    /// cancellation a running item was enqueued with.
    func cancel(_ item: Item) {
        withdraw(item)?.cancel()
    }

    /// ``cancel(_:)`` but for the Swift task of a running async item, which it answers: the
    /// caller cancels it once it holds no lock (cancelling a task runs its cancellation
    /// handlers). Everything else — a pending item leaving the queue, the cancellation a running
    /// item was enqueued with — is done before it returns, so it may be called under the graph's
    /// lock (lock order: graph, then queue).
    func withdraw(_ item: Item) -> Task<Void, Never>? {
        withLockNotifying { state in
            switch item.state {
            case .pending:
                item.state = .cancelled
                item.job = nil
                state.pending -= 1
                state.changes += 1
                state.compactIfMostlyStale()
                return nil
            case .running:
                item.cancellation?.cancel()
                guard let runner = item.runner else {
                    item.isCancellationRequested = true // about to get its runner, or on a worker thread
                    return nil
                }
                // Set even when the task is answered: the caller cancels it later, and a runner
                // that went on with the next item meanwhile would carry the cancellation to it.
                // Flagged, the runner ends with this item (`attach` cancels a task not attached yet).
                runner.isCancellationRequested = true
                return runner.task
            case .finished, .cancelled:
                return nil
            }
        }
    }

    /// Starts pending items while there is room; answers the started tasks whose cancellation
    /// was asked for meanwhile (the caller cancels them, outside any lock it holds).
    @discardableResult
    private func drain() -> [Task<Void, Never>] {
        var cancellations: [Task<Void, Never>] = []
        while true {
            let next: (Item, Job, Int)? = withLockNotifying { state in
                guard let (item, job) = state.admitNext() else { return nil }
                return (item, job, state.maxConcurrentCount)
            }
            guard let (item, job, limit) = next else { return cancellations }
            if let task = start(item, job, threadLimit: limit) { cancellations.append(task) }
        }
    }

    /// Cancels at once what ``drain()`` started and must be cancelled (callers holding no lock).
    private func drainCancelling() {
        for task in drain() { task.cancel() }
    }

    /// Starts `item`; answers its task when it must be cancelled (see ``drain()``).
    private func start(_ item: Item, _ job: Job, threadLimit: Int) -> Task<Void, Never>? {
        if case .sync(let work) = job, let workers {
            workers.submit(threadLimit: threadLimit) { [self] in runOnWorker(item, work) }
            return nil
        }
        let runner = Runner()
        state.withLock { _ in
            item.runner = runner
            runner.isCancellationRequested = item.isCancellationRequested
        }
        let task = Task.detached(priority: item.priority.taskPriority) { [self] in
            await runInTask(item, job, runner)
        }
        return attach(task, to: runner) ? task : nil
    }

    /// Runs `job` in `runner`'s task, then, while the runner may go on, the next pending items
    /// that run in a task.
    private func runInTask(_ item: Item, _ job: Job, _ runner: Runner) async {
        var item = item
        var job = job
        while true {
            switch job {
            case .async(let work): await work()
            case .sync(let work): work()
            }
            let hasWorkers = workers != nil
            let next: (Item, Job)? = withLockNotifying { state in
                item.state = .finished
                item.runner = nil
                state.running -= 1
                state.changes += 1
                // Go on only in an attached task nobody asked to cancel.
                guard runner.task != nil, !runner.isCancellationRequested, !Task.isCancelled,
                      let (nextItem, nextJob) = state.admitNext() else { return nil }
                if case .sync = nextJob, hasWorkers { return (nextItem, nextJob) } // for a worker thread
                nextItem.runner = runner
                return (nextItem, nextJob)
            }
            guard let (nextItem, nextJob) = next else {
                drainCancelling() // what this task did not take (it may be stopping) starts elsewhere
                return
            }
            if case .sync = nextJob, hasWorkers {
                start(nextItem, nextJob, threadLimit: maxConcurrentCount)?.cancel()
                drainCancelling()
                return
            }
            item = nextItem
            job = nextJob
        }
    }

    /// Runs `work` on the current worker thread, then, while the next pending item is
    /// synchronous, runs it here too: a finishing worker takes the next item itself instead of
    /// handing it to another thread and going to sleep (a wake-up per item).
    private func runOnWorker(_ item: Item, _ work: @escaping @Sendable () -> Void) {
        var item = item
        var work = work
        while true {
            work()
            let next: (Item, Job)? = withLockNotifying { state in
                item.state = .finished
                state.running -= 1
                state.changes += 1
                return state.admitNext()
            }
            guard let (nextItem, job) = next else { return }
            guard case .sync(let nextWork) = job else {
                start(nextItem, job, threadLimit: 1)?.cancel()
                drainCancelling()
                return
            }
            item = nextItem
            work = nextWork
        }
    }

    /// Records `runner`'s task; answers whether it must be cancelled (asked for before it
    /// had its task). The caller cancels it outside every lock: cancelling runs the work's
    /// cancellation handlers, which may take the caller's locks.
    private func attach(_ task: Task<Void, Never>, to runner: Runner) -> Bool {
        state.withLock { _ in
            runner.task = task
            return runner.isCancellationRequested
        }
    }
}

extension ImageRequest.Priority {
    var taskPriority: TaskPriority {
        switch self {
        case .veryLow, .low: .low
        case .normal: .medium
        case .high, .veryHigh: .high
        }
    }
}
