import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A serial queue for work nobody waits on (the disk cache's writes), run on a thread of its
/// own at the lowest CPU priority a process may set without privileges: nice 19 on Linux, the
/// background quality of service on Apple platforms. A busy machine gives the jobs only the
/// CPU time nothing else wants, so they never slow down decoding; an idle one runs them at
/// full speed.
///
/// **Backlog.** A niced thread still gets a small share of a saturated CPU, but a server that
/// stays saturated could queue jobs faster than that share runs them. When the cost of the
/// jobs waiting (their bytes, as the caller counts them) exceeds ``backlogLimit``, the queue
/// hands over to a thread at normal priority, which runs until the queue is empty; the next
/// job starts a low-priority thread again. Jobs always run one at a time, in order.
///
/// The thread ends after ``idleLifetime`` seconds without work and starts again with the next
/// job, so an unused queue holds no thread.
///
/// **Exit.** When the process exits normally (`exit`, or returning from `main`), the jobs still
/// waiting run on the exiting thread before the libraries are torn down: nothing queued is
/// lost, and no job is still running while the process dismantles itself.
final class BackgroundQueue: @unchecked Sendable { // mutable state is guarded by `condition`
    private let name: String
    private let backlogLimit: Int
    private let idleLifetime: TimeInterval
    private let condition = NSCondition()
    private var jobs: [(cost: Int, job: @Sendable () -> Void)] = []
    private var head = 0
    /// The summed cost of the jobs waiting.
    private var backlog = 0
    /// Who runs the jobs: set when a thread is started for them (`thread` is filled in once it
    /// runs), `nil` when no thread does.
    private var owner: (lowered: Bool, thread: pthread_t?)?
    /// A normal-priority thread was started to take over from the low-priority one.
    private var handingOver = false
    /// A thread is running a job (outside the lock).
    private var isRunningJob = false
    /// The process is exiting: the exiting thread runs what is left, threads take no more jobs.
    private var isExiting = false

    /// - Parameters:
    ///   - backlogLimit: the waiting jobs' summed cost above which they run at normal priority.
    ///   - idleLifetime: how long the thread waits for a next job before it ends, in seconds.
    init(name: String, backlogLimit: Int = 64 << 20, idleLifetime: TimeInterval = 1) {
        self.name = name
        self.backlogLimit = backlogLimit
        self.idleLifetime = idleLifetime
        Self.exitHandler
        Self.live.withLock { $0[ObjectIdentifier(self)] = Weak(queue: self) }
    }

    deinit {
        Self.live.withLock { $0[ObjectIdentifier(self)] = nil }
    }

    /// Queues `job`; `cost` counts towards the backlog (bytes the job holds, say) until it runs.
    func async(cost: Int = 0, _ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if isExiting {
            condition.unlock()
            job()
            return
        }
        jobs.append((cost, job))
        backlog += cost
        // A thread to start, and whether at low priority.
        var start: Bool?
        if owner == nil {
            owner = (true, nil)
            start = true
        } else if owner!.lowered && !handingOver && backlog > backlogLimit {
            handingOver = true
            start = false
        }
        condition.unlock()
        condition.broadcast()
        if let lowered = start { startThread(lowered: lowered) }
    }

    /// Runs `job` after every job queued before it, and waits for it. Never call it from a job.
    func sync(_ job: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        async {
            job()
            done.signal()
        }
        done.wait()
    }

    /// Whether the calling thread is the one running this queue's jobs.
    var isCurrent: Bool {
        condition.lock()
        defer { condition.unlock() }
        return owner?.thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false
    }

    /// Whether the thread running jobs now runs at low priority (`nil`: no thread) (tests).
    var runsLowered: Bool? {
        condition.lock()
        defer { condition.unlock() }
        return owner?.lowered
    }

    private static let done: @Sendable () -> Void = {}

    private func startThread(lowered: Bool) {
        let thread = Thread { [self] in run(lowered: lowered) }
        thread.name = name
        if lowered { thread.qualityOfService = .background }
        thread.start()
    }

    private func run(lowered: Bool) {
        if lowered { Self.lowerCurrentThreadPriority() }
        condition.lock()
        if !lowered {
            // A takeover: wait until the low-priority thread finished its job and stepped down.
            while owner?.lowered == true { condition.wait() }
            handingOver = false
        }
        owner = (lowered, pthread_self())
        while true {
            if isExiting {
                // Never to run again: the exiting thread took over.
                while true { condition.wait() }
            }
            if lowered && handingOver {
                owner = (false, nil)  // kept for the normal-priority thread
                condition.unlock()
                condition.broadcast()
                return
            }
            if head < jobs.count {
                let (cost, job) = jobs[head]
                jobs[head] = (0, Self.done)  // lets go of what the job captured
                head += 1
                if head == jobs.count {
                    jobs.removeAll(keepingCapacity: true)
                    head = 0
                }
                isRunningJob = true
                condition.unlock()
                job()
                condition.lock()
                isRunningJob = false
                // The cost counts until the job ran: its bytes are held until then.
                backlog -= cost
                if isExiting { condition.broadcast() }
                continue
            }
            // Out of work: a normal-priority thread ends at once, a low-priority one after
            // `idleLifetime` without a new job.
            let woken = lowered && condition.wait(until: Date(timeIntervalSinceNow: idleLifetime))
            if !woken && head == jobs.count && !handingOver {
                owner = nil
                condition.unlock()
                return
            }
        }
    }

    // MARK: Exit

    private struct Weak { weak var queue: BackgroundQueue? }

    /// Every queue alive, for the exit handler.
    private static let live = Mutex<[ObjectIdentifier: Weak]>([:])

    /// Registers the exit handler, once.
    private static let exitHandler: Void = {
        atexit { BackgroundQueue.drainAllForExit() }
    }()

    private static func drainAllForExit() {
        let queues = live.withLock { $0.values.compactMap(\.queue) }
        for queue in queues { queue.drainForExit() }
    }

    /// Waits for the running job (unless it is the one exiting), then runs the waiting ones on
    /// the calling thread.
    private func drainForExit() {
        condition.lock()
        isExiting = true
        let exitingFromAJob = owner?.thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false
        while isRunningJob && !exitingFromAJob { condition.wait() }
        owner = (false, pthread_self())  // the jobs may check that they run on the queue
        let remaining = jobs[head...].map(\.job)
        jobs.removeAll()
        head = 0
        backlog = 0
        condition.unlock()
        condition.broadcast()
        for job in remaining { job() }
    }

    /// Gives the calling thread the lowest priority an unprivileged process may set. On Linux
    /// the nice value is per thread, and `who = 0` means the calling thread.
    private static func lowerCurrentThreadPriority() {
        #if os(Linux)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        #endif
    }
}
