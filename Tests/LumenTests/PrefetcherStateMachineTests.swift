import Foundation
import Testing
@testable import Lumen

/// The prefetcher's state machine, event in, action out (handles are plain strings here).
@Suite(.timeLimit(.minutes(1)))
struct PrefetcherStateMachineTests {
    typealias Machine = PrefetchStateMachine<String>

    private func item(_ name: String) -> (key: ImageCacheKey, request: ImageRequest) {
        (ImageCacheKey(imageID: name), ImageRequest(url: URL(string: "https://example.com/\(name)")!, priority: .veryHigh))
    }

    private func attachAll(_ starts: [Machine.Start], to machine: inout Machine) {
        for start in starts {
            #expect(machine.attach(start.key.imageID, key: start.key, token: start.token) == .keep)
        }
    }

    @Test func startsUpToTheLimitInFIFOOrderAtTheMachinesPriority() {
        var machine = Machine(maxConcurrentCount: 2, priority: .low)
        let starts = machine.enqueue(["a", "b", "c", "d"].map(item))
        #expect(starts.map(\.key.imageID) == ["a", "b"])
        #expect(starts.allSatisfy { $0.request.priority == .low }) // the request's own priority is replaced
        #expect(machine.pendingCount == 2)
        attachAll(starts, to: &machine)

        let (next, idle) = machine.finish(key: starts[1].key, token: starts[1].token, succeeded: true)
        #expect(next.map(\.key.imageID) == ["c"])
        #expect(!idle)
    }

    @Test func duplicatesOfPendingOrRunningKeysAreSkipped() {
        var machine = Machine(maxConcurrentCount: 1, priority: .low)
        let first = machine.enqueue(["a", "b", "a"].map(item))
        #expect(first.map(\.key.imageID) == ["a"])
        #expect(machine.enqueue(["a", "b"].map(item)).isEmpty)
        #expect(machine.pendingCount == 1 && machine.runningCount == 1)
    }

    @Test func stoppingFreesSlotsAndReturnsAttachedHandlesToCancel() {
        var machine = Machine(maxConcurrentCount: 1, priority: .low)
        let starts = machine.enqueue(["a", "b", "c"].map(item))
        attachAll(starts, to: &machine)
        let (cancel, next, idle) = machine.stop([item("a").key, item("b").key])
        #expect(cancel == ["a"])
        #expect(next.map(\.key.imageID) == ["c"]) // b was pending: dropped
        #expect(!idle)
        // A late finish for the stopped prefetch changes nothing.
        #expect(machine.finish(key: starts[0].key, token: starts[0].token, succeeded: true).starts.isEmpty)
        #expect(machine.succeededCount == 0)
    }

    @Test func aPrefetchStoppedBeforeItsHandleIsAttachedIsCancelledOnAttach() {
        var machine = Machine(maxConcurrentCount: 1, priority: .low)
        let start = machine.enqueue([item("a")])[0]
        let (cancel, _, idle) = machine.stop([start.key])
        #expect(cancel.isEmpty && idle)
        #expect(machine.attach("a", key: start.key, token: start.token) == .cancel)
    }

    @Test func aReEnqueuedKeyGetsANewTokenSoStaleEventsAreIgnored() {
        var machine = Machine(maxConcurrentCount: 1, priority: .low)
        let old = machine.enqueue([item("a")])[0]
        _ = machine.stop([old.key])
        let new = machine.enqueue([item("a")])[0]
        #expect(new.token != old.token)
        #expect(machine.attach("old", key: old.key, token: old.token) == .cancel)
        #expect(machine.attach("new", key: new.key, token: new.token) == .keep)
        #expect(machine.finish(key: old.key, token: old.token, succeeded: true).starts.isEmpty)
        #expect(machine.runningCount == 1)
    }

    @Test func pausingHoldsPendingAndResumingStartsThem() {
        var machine = Machine(maxConcurrentCount: 2, priority: .low)
        #expect(machine.setPaused(true).isEmpty)
        #expect(machine.enqueue(["a", "b", "c"].map(item)).isEmpty)
        #expect(!machine.isIdle)
        #expect(machine.setPaused(false).map(\.key.imageID) == ["a", "b"])
    }

    @Test func aPriorityChangeReachesAttachedHandlesAndHandlesStillStarting() {
        var machine = Machine(maxConcurrentCount: 2, priority: .low)
        let starts = machine.enqueue(["a", "b", "c"].map(item))
        #expect(machine.attach("a", key: starts[0].key, token: starts[0].token) == .keep)
        #expect(machine.setPriority(.high) == ["a"])
        #expect(machine.setPriority(.high).isEmpty) // no change, nothing to do
        // b started at .low and attaches after the change: it must be raised.
        #expect(machine.attach("b", key: starts[1].key, token: starts[1].token) == .setPriority(.high))
        // c, still pending, starts at the new priority.
        let next = machine.finish(key: starts[0].key, token: starts[0].token, succeeded: false).starts
        #expect(next.map(\.request.priority) == [.high])
        #expect(machine.failedCount == 1)
    }

    @Test func becomesIdleWhenTheLastFinishesOrEverythingStops() {
        var machine = Machine(maxConcurrentCount: 2, priority: .low)
        let starts = machine.enqueue(["a", "b"].map(item))
        #expect(!machine.finish(key: starts[0].key, token: starts[0].token, succeeded: true).becameIdle)
        #expect(machine.finish(key: starts[1].key, token: starts[1].token, succeeded: true).becameIdle)
        #expect(machine.isIdle)
        #expect(!machine.stopAll().becameIdle) // already idle: no second signal
        _ = machine.enqueue([item("c")])
        #expect(machine.stopAll().becameIdle)
    }
}
