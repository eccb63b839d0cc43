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
/// job starts a low-priority thread again. A waiter (``sync(_:)``, or an owner's flush that
/// queues its marker with ``async(cost:expedited:_:)``) hands over the same way. Jobs always
/// run one at a time, in order.
///
/// The thread ends after ``idleLifetime`` seconds without work and starts again with the next
/// job, so an unused queue holds no thread.
///
/// **Exit.** When the process exits normally (`exit`, or returning from `main`), the exit waits
/// for the job running, if any, and no other job starts: Swift code still running while the
/// runtime's static state is torn down can crash, so the jobs still waiting are dropped (call
/// the owner's flush first to keep them). A job queued during the exit runs on the caller's
/// thread.
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

    /// - Parameters:
    ///   - backlogLimit: the waiting jobs' summed cost above which they run at normal priority.
    ///   - idleLifetime: how long the thread waits for a next job before it ends, in seconds.
    init(name: String, backlogLimit: Int = 64 << 20, idleLifetime: TimeInterval = 1) {
        self.name = name
        self.backlogLimit = backlogLimit
        self.idleLifetime = idleLifetime
        _ = Self.exit.isExiting.load(ordering: .sequentiallyConsistent)  // initialised before any exit
        Self.exitHandler
    }

    /// Runs `job` after every job queued before it, and waits for it (at normal priority, as
    /// the jobs before it from now on). Never call it from a job.
    func sync(_ job: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        async(expedited: true) {
            job()
            done.signal()
        }
        done.wait()
    }

    /// Queues `job`; `cost` counts towards the backlog (bytes the job holds, say) until it runs.
    /// `expedited`: somebody waits for it (a flush), so it and the jobs before it run at normal
    /// priority, as for a backlog over the limit — decided with the queuing, in one critical
    /// section: a low-priority thread started for it first could take it before a later
    /// hand-over, and keep the waiter for as long as the machine stays saturated.
    func async(cost: Int = 0, expedited: Bool = false, _ job: @escaping @Sendable () -> Void) {
        if Self.exit.isExiting.load(ordering: .sequentiallyConsistent) {
            job()
            return
        }
        condition.lock()
        jobs.append((cost, job))
        backlog += cost
        // A thread to start, and whether at low priority.
        var start: Bool?
        if owner == nil {
            owner = (!expedited, nil)
            start = !expedited
        } else if owner!.lowered && !handingOver && (expedited || backlog > backlogLimit) {
            handingOver = true
            start = false
        }
        condition.unlock()
        condition.broadcast()
        if let lowered = start { startThread(lowered: lowered) }
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
                condition.unlock()
                Self.exit.run(job)
                condition.lock()
                // The cost counts until the job ran: its bytes are held until then.
                backlog -= cost
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

    /// What the exit handler and the job threads share: plain atomics, so that the handler
    /// calls nothing that the runtime's teardown could have dismantled.
    final class ExitGate: Sendable {
        let isExiting = Atomic<Bool>(false)
        let runningJobs = Atomic<Int>(0)

        /// Runs `job` unless the process is exiting; then the thread stops here for good.
        func run(_ job: () -> Void) {
            runningJobs.add(1, ordering: .sequentiallyConsistent)
            if isExiting.load(ordering: .sequentiallyConsistent) {
                runningJobs.subtract(1, ordering: .sequentiallyConsistent)
                while true { pause() }
            }
            job()
            runningJobs.subtract(1, ordering: .sequentiallyConsistent)
            BackgroundQueue.exitHandlerAfterFirstJob
        }

        /// The exit handler: no job starts from now on; waits for those running.
        func close() {
            isExiting.store(true, ordering: .sequentiallyConsistent)
            while runningJobs.load(ordering: .sequentiallyConsistent) > 0 { usleep(100) }
        }
    }

    static let exit = ExitGate()

    /// Registers the exit handler, once, when the first queue is made: handlers run in the
    /// reverse order of registration, so it runs before the clean-up of the libraries the
    /// owner initialised first (as the disk cache does OpenSSL), and the job it waits for
    /// still finds them standing. Registered only after a first job ran, an exit during that
    /// job (or before it started) waited for nothing: the job went on, and the next one
    /// started, while OpenSSL was being torn down.
    private static let exitHandler: Void = {
        atexit { BackgroundQueue.exit.close() }
    }()

    /// Registers the exit handler once more, after a first job ran, so that it also runs
    /// before the clean-up of what that job set up (the runtime's state for the jobs). The
    /// second `close()` finds the gate closed and nothing running, and returns at once.
    private static let exitHandlerAfterFirstJob: Void = {
        atexit { BackgroundQueue.exit.close() }
    }()

    /// Gives the calling thread the lowest priority an unprivileged process may set. On Linux
    /// the nice value is per thread, and `who = 0` means the calling thread.
    private static func lowerCurrentThreadPriority() {
        #if os(Linux)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        #endif
    }
}
