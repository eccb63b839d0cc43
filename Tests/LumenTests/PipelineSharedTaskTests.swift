import Foundation
import Testing
@testable import Lumen
import LumenTestSupport

/// The subscription state machine of ``SharedTask``, driven directly: events in, outcomes out.
@Suite(.timeLimit(.minutes(1)))
struct PipelineSharedTaskTests {
    /// A stage whose work is started and ended by the test, optionally depending on another.
    final class StubTask: SharedTask<Int>, @unchecked Sendable { // guarded by graph.lock
        var startCount = 0
        var below: StubTask?

        override func start() {
            startCount += 1
            if let below {
                dependency = below.subscribe(priority: priority) { [self] event in
                    if case .value(let v) = event { finish(with: v + 1) }
                    if case .failure(let e) = event { fail(e) }
                }
            }
        }
    }

    final class Inbox {
        var values: [Int] = []
        var errors: [ImagePipeline.Error.Code] = []
        var progress: [Int64] = []

        func handler(_ event: SharedTask<Int>.Event) {
            switch event {
            case .value(let v): values.append(v)
            case .failure(let e): errors.append(e.code)
            case .progress(let p): progress.append(p.completed)
            case .preview: break
            }
        }
    }

    let graph = WorkGraph(configuration: ImagePipeline.Configuration(dataLoader: MockDataLoader()))

    @Test func startsOnceAndDeliversToEverySubscriber() {
        let task = StubTask(graph: graph, stage: .decode)
        let a = Inbox(), b = Inbox()
        graph.sync {
            _ = task.subscribe(priority: .normal, a.handler)
            _ = task.subscribe(priority: .normal, b.handler)
            task.send(progress: .init(completed: 5, total: 10))
            task.finish(with: 42)
            task.finish(with: 43) // ignored: a task ends once
        }
        #expect(task.startCount == 1)
        #expect(a.values == [42] && b.values == [42])
        #expect(a.progress == [5] && b.progress == [5])
        #expect(graph.sync { task.subscribe(priority: .normal, a.handler) } == nil)
        let m = graph.metricsStore.snapshot.decode
        #expect(m.started == 1 && m.joined == 1 && m.completed == 1)
    }

    @Test func priorityIsTheMaximumOverSubscribersAndFallsBack() {
        let task = StubTask(graph: graph, stage: .fetch)
        let inbox = Inbox()
        graph.sync {
            let low = task.subscribe(priority: .low, inbox.handler)!
            #expect(task.priority == .low)
            let high = task.subscribe(priority: .high, inbox.handler)!
            let high2 = task.subscribe(priority: .high, inbox.handler)!
            #expect(task.priority == .high)
            high.unsubscribe()
            #expect(task.priority == .high) // another high subscriber remains
            high2.setPriority(.veryLow)
            #expect(task.priority == .low)
            low.setPriority(.veryHigh)
            #expect(task.priority == .veryHigh)
            low.unsubscribe()
            #expect(task.priority == .veryLow)
        }
    }

    @Test func theLastSubscriberLeavingCancelsAndCascadesOnlyWhereUnneeded() {
        let bottom = StubTask(graph: graph, stage: .fetch)
        let left = StubTask(graph: graph, stage: .decode)
        let right = StubTask(graph: graph, stage: .decode)
        left.below = bottom
        right.below = bottom
        let inbox = Inbox()
        graph.sync {
            let l = left.subscribe(priority: .high, inbox.handler)!
            let r = right.subscribe(priority: .low, inbox.handler)!
            #expect(bottom.priority == .high)
            l.unsubscribe()
            #expect(left.isDisposed)
            #expect(!bottom.isDisposed)
            #expect(bottom.priority == .low) // the cancelled chain's priority is gone
            r.unsubscribe()
            #expect(right.isDisposed && bottom.isDisposed)
        }
        #expect(inbox.values.isEmpty && inbox.errors.isEmpty) // leaving delivers nothing
        let m = graph.metricsStore.snapshot
        #expect(m.decode.cancelled == 2 && m.fetch.cancelled == 1)
    }

    @Test func aFailureReachesEverySubscriberUpTheChainAndLeavesThePool() {
        let bottom = StubTask(graph: graph, stage: .fetch)
        let top = StubTask(graph: graph, stage: .decode)
        top.below = bottom
        var removed = false
        bottom.onDisposed = { removed = true }
        let a = Inbox(), b = Inbox(), c = Inbox()
        graph.sync {
            _ = top.subscribe(priority: .normal, a.handler)
            _ = top.subscribe(priority: .normal, b.handler)
            _ = bottom.subscribe(priority: .normal, c.handler)
            bottom.fail(.dataIsEmpty)
        }
        #expect(removed)
        #expect(a.errors == [.dataIsEmpty] && b.errors == [.dataIsEmpty] && c.errors == [.dataIsEmpty])
        #expect(top.isDisposed)
    }

    @Test func valuesFlowUpTheChain() {
        let bottom = StubTask(graph: graph, stage: .fetch)
        let top = StubTask(graph: graph, stage: .process)
        top.below = bottom
        let inbox = Inbox()
        graph.sync {
            _ = top.subscribe(priority: .normal, inbox.handler)
            bottom.finish(with: 1)
        }
        #expect(inbox.values == [2])
        #expect(top.dependency == nil || top.isDisposed)
    }
}
