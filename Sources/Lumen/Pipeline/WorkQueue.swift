import Foundation

/// A bounded, priority-ordered queue for one stage of the pipeline.
///
/// At most ``maxConcurrentCount`` items run at once. Pending items start highest priority
/// first, FIFO within a priority level; a pending item can change priority (it moves to the
/// back of its new level) or be cancelled before it starts. With ``Execution-swift.enum/threads``
/// synchronous work runs on the queue's own worker threads (never on the cooperative pool);
/// with ``Execution-swift.enum/tasks`` each item runs in a detached Swift task that is
/// cancelled when the item is.
///
/// Share a queue between pipelines to share its limit. Set ``isSuspended`` to hold items
/// pending (tests use this to observe priorities).
public final class WorkQueue: @unchecked Sendable { // all mutable state is guarded by `lock`
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
        fileprivate(set) var priority: ImageRequest.Priority
        fileprivate var job: Job?
        fileprivate var state = State.pending
        fileprivate var sequence = 0
        fileprivate var task: Task<Void, Never>?
        fileprivate var isCancellationRequested = false

        fileprivate init(priority: ImageRequest.Priority, job: Job) {
            self.priority = priority
            self.job = job
        }
    }

    /// The queue's name, for diagnostics.
    public let name: String
    /// Where items run.
    public let execution: Execution

    private let lock = NSLock()
    private var _maxConcurrentCount: Int
    private var _isSuspended = false
    private var levels: [[(item: Item, sequence: Int)]]
    private var heads: [Int]
    private var pending = 0
    private var running = 0
    private var sequence = 0
    private let workers: WorkerThreads?

    /// Creates a queue running at most `maxConcurrentCount` items at once.
    public init(name: String, maxConcurrentCount: Int, execution: Execution) {
        precondition(maxConcurrentCount >= 1, "WorkQueue: maxConcurrentCount must be at least 1")
        self.name = name
        self.execution = execution
        self._maxConcurrentCount = maxConcurrentCount
        self.levels = Array(repeating: [], count: ImageRequest.Priority.allCases.count)
        self.heads = Array(repeating: 0, count: ImageRequest.Priority.allCases.count)
        self.workers = execution == .threads ? WorkerThreads(name: name) : nil
    }

    /// The most items running at once. Raising it starts pending items at once.
    public var maxConcurrentCount: Int {
        get { lock.withLock { _maxConcurrentCount } }
        set {
            precondition(newValue >= 1, "WorkQueue: maxConcurrentCount must be at least 1")
            lock.withLock { _maxConcurrentCount = newValue }
            drain()
        }
    }

    /// While `true`, no pending item starts (running items go on).
    public var isSuspended: Bool {
        get { lock.withLock { _isSuspended } }
        set {
            lock.withLock { _isSuspended = newValue }
            if !newValue { drain() }
        }
    }

    /// Items waiting to start.
    public var pendingCount: Int { lock.withLock { pending } }
    /// Items running now.
    public var runningCount: Int { lock.withLock { running } }

    /// The priorities of the pending items in the order they would start.
    public var pendingPriorities: [ImageRequest.Priority] {
        lock.withLock {
            var result: [ImageRequest.Priority] = []
            for level in levels.indices.reversed() {
                for entry in levels[level][heads[level]...] where entry.item.state == .pending && entry.item.sequence == entry.sequence {
                    result.append(entry.item.priority)
                }
            }
            return result
        }
    }

    // MARK: - Items

    /// Adds async work; it runs in a detached task that is cancelled if the item is.
    func enqueue(priority: ImageRequest.Priority, _ work: @escaping @Sendable () async -> Void) -> Item {
        enqueue(Item(priority: priority, job: .async(work)))
    }

    /// Adds synchronous work; it runs on a worker thread (or a detached task for a
    /// ``Execution-swift.enum/tasks`` queue).
    func enqueue(priority: ImageRequest.Priority, _ work: @escaping @Sendable () -> Void) -> Item {
        enqueue(Item(priority: priority, job: .sync(work)))
    }

    private func enqueue(_ item: Item) -> Item {
        lock.withLock { insert(item) }
        drain()
        return item
    }

    /// Moves a pending item to the back of its new priority level; a running item only records
    /// the new priority.
    func setPriority(_ item: Item, _ priority: ImageRequest.Priority) {
        lock.withLock {
            guard item.priority != priority else { return }
            item.priority = priority
            if item.state == .pending {
                pending -= 1
                insert(item)
            }
        }
    }

    /// Removes a pending item (it never runs); cancels the task of a running async item.
    func cancel(_ item: Item) {
        let task: Task<Void, Never>? = lock.withLock {
            switch item.state {
            case .pending:
                item.state = .cancelled
                item.job = nil
                pending -= 1
                return nil
            case .running:
                item.isCancellationRequested = true
                return item.task
            case .finished, .cancelled:
                return nil
            }
        }
        task?.cancel()
    }

    /// Must hold `lock`.
    private func insert(_ item: Item) {
        sequence += 1
        item.sequence = sequence
        levels[item.priority.rawValue].append((item, sequence))
        pending += 1
    }

    /// Must hold `lock`. The next valid pending item, highest level first.
    private func popNext() -> Item? {
        for level in levels.indices.reversed() {
            while heads[level] < levels[level].count {
                let entry = levels[level][heads[level]]
                heads[level] += 1
                if entry.item.state == .pending && entry.item.sequence == entry.sequence {
                    compact(level)
                    return entry.item
                }
            }
            compact(level)
        }
        return nil
    }

    /// Must hold `lock`. Drops consumed entries once they are most of the array.
    private func compact(_ level: Int) {
        let head = heads[level]
        if head == levels[level].count {
            levels[level].removeAll(keepingCapacity: true)
            heads[level] = 0
        } else if head > 64 && head * 2 > levels[level].count {
            levels[level].removeFirst(head)
            heads[level] = 0
        }
    }

    /// Starts pending items while there is room.
    private func drain() {
        while true {
            let next: (Item, Job)? = lock.withLock {
                guard !_isSuspended, running < _maxConcurrentCount, let item = popNext(), let job = item.job else { return nil }
                item.state = .running
                item.job = nil
                pending -= 1
                running += 1
                return (item, job)
            }
            guard let (item, job) = next else { return }
            start(item, job)
        }
    }

    private func start(_ item: Item, _ job: Job) {
        switch (job, workers) {
        case (.sync(let work), let workers?):
            workers.submit { [self] in
                work()
                finish(item)
            }
        case (.sync(let work), nil):
            let task = Task.detached(priority: item.priority.taskPriority) { [self] in
                work()
                finish(item)
            }
            attach(task, to: item)
        case (.async(let work), _):
            let task = Task.detached(priority: item.priority.taskPriority) { [self] in
                await work()
                finish(item)
            }
            attach(task, to: item)
        }
    }

    private func attach(_ task: Task<Void, Never>, to item: Item) {
        let cancel: Bool = lock.withLock {
            guard item.state == .running else { return false }
            item.task = task
            return item.isCancellationRequested
        }
        if cancel { task.cancel() }
    }

    private func finish(_ item: Item) {
        lock.withLock {
            item.state = .finished
            item.task = nil
            running -= 1
        }
        drain()
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
