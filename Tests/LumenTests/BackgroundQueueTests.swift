import Foundation
import Synchronization
import Testing
@testable import Lumen
#if canImport(Glibc)
import Glibc
#endif

/// The disk cache's background queue: serial, in order, at the lowest CPU priority, handing
/// over to normal priority when its backlog grows too large.
@Suite(.timeLimit(.minutes(1)))
struct BackgroundQueueTests {
    /// The calling thread's nice value.
    static func niceness() -> Int32 {
        #if os(Linux)
        errno = 0
        return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        #else
        return 0
        #endif
    }

    /// Records the order jobs ran in, the most that ran at once, and each job's nice value.
    final class Log: Sendable {
        private let state = Mutex((order: [Int](), running: 0, peak: 0, niceness: [Int32]()))
        func begin() { state.withLock { $0.running += 1; $0.peak = max($0.peak, $0.running) } }
        func end(_ index: Int) {
            let nice = BackgroundQueueTests.niceness()
            state.withLock { $0.running -= 1; $0.order.append(index); $0.niceness.append(nice) }
        }
        var snapshot: (order: [Int], peak: Int, niceness: [Int32]) { state.withLock { ($0.order, $0.peak, $0.niceness) } }
    }

    @Test func jobsRunOneAtATimeInOrderOnALoweredThread() {
        let queue = BackgroundQueue(name: "test")
        let log = Log()
        let isCurrent = Mutex([Bool]())
        for i in 0..<200 {
            queue.async(cost: 1) {
                log.begin()
                isCurrent.withLock { $0.append(queue.isCurrent) }
                log.end(i)
            }
        }
        // Waited for without `sync`, which would hand the queue to a normal-priority thread.
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        done.wait()
        let (order, peak, niceness) = log.snapshot
        #expect(order == Array(0..<200))
        #expect(peak == 1)
        #expect(isCurrent.withLock { $0.allSatisfy { $0 } })
        #expect(!queue.isCurrent)
        #if os(Linux)
        #expect(niceness.allSatisfy { $0 == 19 }, "niceness seen by the jobs: \(Set(niceness))")
        #endif
    }

    /// Jobs waiting beyond the backlog limit run at normal priority, still in order and one
    /// at a time; once the queue is empty, the next job runs lowered again.
    @Test func aLargeBacklogHandsOverToANormalPriorityThread() {
        let queue = BackgroundQueue(name: "test", backlogLimit: 100)
        let log = Log()
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        queue.async(cost: 10) {
            log.begin()
            started.signal()
            gate.wait()  // holds the low-priority thread while the backlog builds
            log.end(0)
        }
        started.wait()
        #expect(queue.runsLowered == true)
        // 10 jobs of cost 10 stay within the limit (100); the 11th goes over it.
        for i in 1...11 {
            queue.async(cost: 10) {
                log.begin()
                log.end(i)
            }
        }
        gate.signal()
        queue.sync {}
        let (order, peak, niceness) = log.snapshot
        #expect(order == Array(0...11))
        #expect(peak == 1)
        #if os(Linux)
        #expect(niceness.first == 19)
        #expect(niceness.last == Self.niceness(), "the jobs after the handover run at the test's priority: \(niceness)")
        #endif
        // The normal-priority thread ends with the backlog (just after its last job signalled
        // the test); the next job then starts a lowered one.
        var spins = 0
        while queue.runsLowered != nil && spins < 10_000_000 {
            sched_yield()
            spins += 1
        }
        #expect(queue.runsLowered == nil, "the normal-priority thread ends once the queue is empty")
        let later = Mutex<Int32?>(nil)
        let ran = DispatchSemaphore(value: 0)
        queue.async {
            later.withLock { $0 = Self.niceness() }
            ran.signal()
        }
        ran.wait()  // not `sync`: a waiter would hand over again
        #if os(Linux)
        #expect(later.withLock { $0 } == 19)
        #endif
    }

    /// Somebody waiting for the queue (a flush) has the jobs queued so far run at normal
    /// priority: on a saturated machine the niced thread could keep the waiter indefinitely.
    @Test func aWaiterHasTheQueuedJobsRunAtNormalPriority() {
        let queue = BackgroundQueue(name: "test")
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        queue.async {
            started.signal()
            gate.wait()  // holds the low-priority thread
        }
        started.wait()
        #expect(queue.runsLowered == true)
        let niceness = Mutex<Int32?>(nil)
        queue.async { niceness.withLock { $0 = Self.niceness() } }
        queue.async(expedited: true) {} // a waiter's marker, as `DataCache.flush() async` queues
        gate.signal()
        queue.sync {}
        #if os(Linux)
        #expect(niceness.withLock { $0 } == Self.niceness(), "the job queued before the waiter ran at the waiter's priority")
        #endif
        #expect(queue.runsLowered != true)
    }

    /// A waiter on an idle queue starts no low-priority thread at all: its job runs at normal
    /// priority from the start (a niced thread started first could take the job before the
    /// hand-over, and keep the waiter for as long as the machine stays saturated).
    @Test func aWaiterOnAnIdleQueueRunsItsJobAtNormalPriority() {
        let queue = BackgroundQueue(name: "test")
        for _ in 0..<20 {
            let niceness = Mutex<Int32?>(nil)
            let lowered = Mutex<Bool?>(nil)
            queue.sync {
                niceness.withLock { $0 = Self.niceness() }
                lowered.withLock { $0 = queue.runsLowered }
            }
            #if os(Linux)
            #expect(niceness.withLock { $0 } == Self.niceness())
            #endif
            #expect(lowered.withLock { $0 } == false)
        }
    }

    /// What a job captured is let go once it ran, not when the queue next empties.
    @Test func aJobsCapturesAreReleasedOnceItRan() {
        final class Token: Sendable {}
        let queue = BackgroundQueue(name: "test")
        weak var weakToken: Token?
        do {
            let token = Token()
            weakToken = token
            queue.async { _ = token }
        }
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        queue.async {
            started.signal()
            gate.wait()
        }
        queue.async {}
        started.wait()
        // The first job ran; the second holds the queue with a third waiting.
        #expect(weakToken == nil)
        gate.signal()
        queue.sync {}
    }
}
