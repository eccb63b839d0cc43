import Foundation
import Synchronization
import Testing
@_spi(Testing) @testable import Lumen

@Suite(.timeLimit(.minutes(1)))
struct WorkQueueTests {
    /// Runs `count` items enqueued by `enqueue` on a suspended single-slot queue and returns
    /// their labels in the order they ran.
    private func runOrder(_ execution: WorkQueue.Execution, _ setUp: (WorkQueue, LabelRecorder) -> Void) async -> [String] {
        let queue = WorkQueue(name: "test", maxConcurrentCount: 1, execution: execution)
        queue.isSuspended = true
        let recorder = LabelRecorder()
        setUp(queue, recorder)
        let expected = queue.pendingCount
        queue.isSuspended = false
        await recorder.wait(count: expected)
        return recorder.labels
    }

    @Test(arguments: [WorkQueue.Execution.tasks, .threads])
    func itemsRunByPriorityThenFIFO(execution: WorkQueue.Execution) async {
        let order = await runOrder(execution) { queue, recorder in
            for (label, priority) in [("l1", ImageRequest.Priority.low), ("h1", .high), ("n1", .normal), ("h2", .high), ("l2", .low), ("vh", .veryHigh)] {
                _ = queue.enqueue(priority: priority) { recorder.record(label) } as WorkQueue.Item
            }
            #expect(queue.pendingPriorities == [.veryHigh, .high, .high, .normal, .low, .low])
        }
        #expect(order == ["vh", "h1", "h2", "n1", "l1", "l2"])
    }

    @Test func changingPriorityMovesAnItemToTheBackOfItsNewLevel() async {
        let order = await runOrder(.threads) { queue, recorder in
            _ = queue.enqueue(priority: .normal) { recorder.record("n1") } as WorkQueue.Item
            let moved = queue.enqueue(priority: .low) { recorder.record("moved") } as WorkQueue.Item
            _ = queue.enqueue(priority: .normal) { recorder.record("n2") } as WorkQueue.Item
            queue.setPriority(moved, .normal)
            let demoted = queue.enqueue(priority: .veryHigh) { recorder.record("demoted") } as WorkQueue.Item
            queue.setPriority(demoted, .veryLow)
        }
        #expect(order == ["n1", "n2", "moved", "demoted"])
    }

    @Test func cancelledPendingItemsNeverRun() async {
        let order = await runOrder(.tasks) { queue, recorder in
            _ = queue.enqueue(priority: .normal) { recorder.record("a") } as WorkQueue.Item
            let b = queue.enqueue(priority: .high) { recorder.record("b") } as WorkQueue.Item
            _ = queue.enqueue(priority: .low) { recorder.record("c") } as WorkQueue.Item
            queue.cancel(b)
            #expect(queue.pendingCount == 2)
        }
        #expect(order == ["a", "c"])
    }

    @Test(arguments: [WorkQueue.Execution.tasks, .threads])
    func runningItemsNeverExceedTheLimit(execution: WorkQueue.Execution) async {
        let queue = WorkQueue(name: "test", maxConcurrentCount: 3, execution: execution)
        let recorder = LabelRecorder()
        let gauge = ConcurrencyGauge()
        let gate = DispatchSemaphore(value: 0)
        for i in 0..<24 {
            // Every job holds its slot until the gate opens, so the limit is really tested:
            // with ungated jobs a broken limit would rarely show.
            let job: @Sendable () async -> Void = {
                gauge.enter()
                await gate.waitOffThePool()
                gauge.leave()
                recorder.record("\(i)")
            }
            _ = queue.enqueue(priority: .normal, job) as WorkQueue.Item
        }
        await gauge.waitUntilCurrent(is: 3)
        #expect(queue.runningCount == 3)
        #expect(queue.pendingCount == 21)
        for _ in 0..<24 { gate.signal() }
        await recorder.wait(count: 24)
        #expect(gauge.peak == 3)
        // Every slot is given back (after each job's body returns): three new gated jobs all
        // get to run at once, and nothing is left pending.
        let again = ConcurrencyGauge()
        let secondGate = DispatchSemaphore(value: 0)
        for _ in 0..<3 {
            let job: @Sendable () async -> Void = {
                again.enter()
                await secondGate.waitOffThePool()
                again.leave()
            }
            _ = queue.enqueue(priority: .normal, job) as WorkQueue.Item
        }
        await again.waitUntilCurrent(is: 3)
        #expect(queue.pendingCount == 0)
        for _ in 0..<3 { secondGate.signal() }
    }

    @Test func insertingReprioritisingWithdrawingAdmittingAndFinishingAreChanges() async {
        let queue = WorkQueue(name: "test", maxConcurrentCount: 1, execution: .tasks)
        queue.isSuspended = true
        let gate = DispatchSemaphore(value: 0)
        var count = queue.changeCount
        let held = queue.enqueue(priority: .normal) { await gate.waitOffThePool() } as WorkQueue.Item
        #expect(queue.changeCount > count, "inserted")
        count = queue.changeCount
        queue.setPriority(held, .high)
        #expect(queue.changeCount > count, "re-prioritised")
        count = queue.changeCount
        queue.setPriority(held, .high)
        #expect(queue.changeCount == count, "the same priority again changes nothing")
        let other = queue.enqueue(priority: .low) {} as WorkQueue.Item
        count = queue.changeCount
        queue.cancel(other)
        #expect(queue.changeCount > count, "withdrawn")
        count = queue.changeCount
        queue.isSuspended = false
        #expect(queue.changeCount > count, "admitted")
        #expect(queue.runningCount == 1)
        // The item's end wakes a waiter (without it this would wait until the time limit).
        gate.signal()
        while true {
            let version = queue.changeCount
            if queue.runningCount == 0 { break }
            await queue.waitForChange(after: version)
        }
        #expect(queue.pendingCount == 0)
    }

    @Test func waitingForAChangeReturnsAtOnceAfterOneAndWhenCancelled() async {
        let queue = WorkQueue(name: "test", maxConcurrentCount: 1, execution: .threads)
        queue.isSuspended = true
        let before = queue.changeCount
        _ = queue.enqueue(priority: .normal) {} as WorkQueue.Item
        await queue.waitForChange(after: before)
        // Nothing changes after this: only the cancellation can end the wait.
        let now = queue.changeCount
        let waiter = Task { await queue.waitForChange(after: now) }
        waiter.cancel()
        await waiter.value
        #expect(queue.changeCount == now)
    }
}

extension DispatchSemaphore {
    /// Waits on a thread of its own, so a held job never blocks the cooperative pool.
    func waitOffThePool() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                self.wait()
                continuation.resume()
            }
        }
    }
}

/// Records labels from any thread; lets a test wait for a number of them.
final class LabelRecorder: Sendable {
    private struct State {
        var labels: [String] = []
        var waiters: [(Int, CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())

    var labels: [String] { state.withLock { $0.labels } }

    func record(_ label: String) {
        let ready = state.withLock { state in
            state.labels.append(label)
            let count = state.labels.count
            let ready = state.waiters.filter { $0.0 <= count }.map(\.1)
            state.waiters.removeAll { $0.0 <= count }
            return ready
        }
        ready.forEach { $0.resume() }
    }

    func wait(count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state in
                if state.labels.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}

/// Tracks how many callers are inside a section at once.
final class ConcurrencyGauge: Sendable {
    private let state = Mutex((current: 0, peak: 0, waiters: [(Int, CheckedContinuation<Void, Never>)]()))
    func enter() {
        let ready = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.current += 1
            s.peak = max(s.peak, s.current)
            let current = s.current
            let ready = s.waiters.filter { $0.0 == current }.map(\.1)
            s.waiters.removeAll { $0.0 == current }
            return ready
        }
        ready.forEach { $0.resume() }
    }
    func leave() { state.withLock { $0.current -= 1 } }
    var peak: Int { state.withLock { $0.peak } }
    /// Returns once `count` jobs are inside at the same time.
    func waitUntilCurrent(is count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { s -> Bool in
                if s.current == count { return true }
                s.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}
