import Foundation

/// A growing set of worker threads that run submitted closures. The owning ``WorkQueue``
/// bounds how many closures are submitted at once, so a thread is created only when all are
/// busy; an idle thread exits after a few seconds.
final class WorkerThreads: @unchecked Sendable { // mutable state is guarded by `condition`
    private let name: String
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var idle = 0
    private var threadCount = 0

    init(name: String) { self.name = name }

    func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        if jobs.count <= idle {
            condition.signal()
            condition.unlock()
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
