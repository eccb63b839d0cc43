import Foundation

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

    init(name: String) { self.name = name }

    /// Runs `job` on a worker; `threadLimit` is the most threads this set may have.
    func submit(threadLimit: Int, _ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
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
                condition.unlock()
                job()
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
