import Foundation
import Synchronization

/// A growing set of worker threads that run submitted closures. The owning ``WorkQueue``
/// bounds how many closures run at once; a thread is created only when no thread is idle and
/// fewer than that bound exist (a busy thread looks for submitted closures before it goes
/// idle, so a closure submitted while all are busy still runs). An idle thread exits after a
/// few seconds.
final class WorkerThreads: @unchecked Sendable { // mutable state is guarded by `condition`
    private let name: String
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var idle = 0
    private var threadCount = 0
    /// `jobs.count`, readable without the lock (see `run`).
    private let queued = Atomic<Int>(0)
    /// How long a thread that finished a job watches for the next one before it sleeps.
    static let spinNanos: UInt64 = 150_000

    init(name: String) { self.name = name }

    /// Runs `job` on a worker; `threadLimit` is the most threads this set may have.
    func submit(threadLimit: Int, _ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        queued.store(jobs.count, ordering: .relaxed)
        if jobs.count <= idle || threadCount >= threadLimit {
            let wakes = idle > 0
            condition.unlock()
            // Signalled after unlocking, so that the woken thread does not go straight back to
            // sleep on the lock this thread still holds.
            if wakes { condition.signal() }
            return
        }
        threadCount += 1
        let index = threadCount
        condition.unlock()
        let thread = Thread { [self] in run() }
        thread.name = "\(name).\(index)"
        thread.start()
    }

    private func run() {
        condition.lock()
        while true {
            if !jobs.isEmpty {
                let job = jobs.removeFirst()
                queued.store(jobs.count, ordering: .relaxed)
                condition.unlock()
                job()
                // Work comes in chains (a caller resumed by this job often submits the next one
                // a few tens of microseconds later: the next disk hit, the next cell's decode).
                // Watching for it briefly costs at most `spinNanos` of CPU each time the queue
                // runs dry, and spares the chain a sleep and a wake-up, which on a virtual
                // machine can cost more than a small decode. `lumen bench cache` measures it.
                let end = DispatchTime.now().uptimeNanoseconds + Self.spinNanos
                var polls = 0
                while queued.load(ordering: .relaxed) == 0 {
                    polls += 1
                    if polls & 63 == 0 && DispatchTime.now().uptimeNanoseconds > end { break }
                }
                condition.lock()
                continue
            }
            idle += 1
            let signalled = condition.wait(until: Date(timeIntervalSinceNow: 5))
            idle -= 1
            if !signalled && jobs.isEmpty {
                threadCount -= 1
                condition.unlock()
                return
            }
        }
    }
}
