import LumenTestSupport
import Testing
@testable import Lumen

/// One shared task's bookkeeping, event in, action out (subscribers are plain strings here): the
/// rules `SharedTask` performs, without a graph, a queue or a lock.
@Suite(.timeLimit(.minutes(1)))
struct SharedTaskStateTests {
    typealias State = SharedTaskState<String>
    typealias Priority = ImageRequest.Priority

    private func names(_ recipients: State.Recipients?) -> [String]? {
        guard let recipients else { return nil }
        var names: [String] = []
        recipients.forEach { names.append($0) }
        return names
    }

    @Test func theFirstSubscriberStartsTheWorkAtItsPriorityAndLaterOnesJoin() {
        var state = State()
        #expect(state.phase == .waiting)
        let (first, start) = state.subscribe("a", priority: .low)
        #expect(first != nil && start == .start(.low))
        #expect(state.phase == .running && state.priority == .low)

        let (second, join) = state.subscribe("b", priority: .veryLow)
        #expect(second != nil && second != first)
        #expect(join == .join(raisedTo: nil, replay: nil)) // lower than the task: nothing to push
        #expect(state.subscriberCount == 2 && state.priority == .low)

        let (_, raise) = state.subscribe("c", priority: .high)
        #expect(raise == .join(raisedTo: .high, replay: nil))
        #expect(state.priority == .high)
    }

    @Test func aLateSubscriberIsReplayedTheProgressSoFar() {
        var state = State()
        _ = state.subscribe("a", priority: .normal)
        #expect(names(state.progress(.init(completed: 10, total: 100))) == ["a"])
        let (_, join) = state.subscribe("b", priority: .normal)
        #expect(join == .join(raisedTo: nil, replay: .init(completed: 10, total: 100)))
        #expect(names(state.progress(.init(completed: 50, total: 100))) == ["a", "b"])
    }

    @Test func leavingLowersThePriorityOnlyWhenTheHighestSubscriberLeaves() {
        var state = State()
        let (low, _) = state.subscribe("low", priority: .low)
        let (high, _) = state.subscribe("high", priority: .veryHigh)
        let (alsoHigh, _) = state.subscribe("alsoHigh", priority: .veryHigh)
        #expect(state.unsubscribe(low!) == .none) // the others keep it at veryHigh
        #expect(state.unsubscribe(high!) == .none) // one veryHigh subscriber is left
        let (normal, _) = state.subscribe("normal", priority: .normal)
        #expect(state.unsubscribe(alsoHigh!) == .lowerPriority(.normal))
        #expect(state.priority == .normal)
        #expect(state.unsubscribe(normal!) == .cancel)
        #expect(state.isEnded && state.subscriberCount == 0)
    }

    @Test func theLastSubscriberLeavingCancelsAndNothingIsAcceptedAfterwards() {
        var state = State()
        let (only, _) = state.subscribe("a", priority: .normal)
        #expect(state.unsubscribe(only!) == .cancel)
        #expect(state.unsubscribe(only!) == .none) // leaving twice changes nothing
        let (late, arrival) = state.subscribe("late", priority: .veryHigh)
        #expect(late == nil && arrival == .refused)
        #expect(names(state.progress(.init(completed: 1, total: 2))) == nil)
        #expect(names(state.previewRecipients()) == nil)
        #expect(names(state.finish()) == nil) // a result arriving after the cancel is dropped
    }

    @Test func finishingDeliversToEveryLiveSubscriberOnce() {
        var state = State()
        let (a, _) = state.subscribe("a", priority: .normal)
        _ = state.subscribe("b", priority: .normal)
        _ = state.subscribe("c", priority: .high)
        _ = state.unsubscribe(a!)
        #expect(names(state.finish()) == ["b", "c"])
        #expect(state.isEnded)
        #expect(names(state.finish()) == nil) // a second outcome (a failure racing a value) is dropped
        #expect(state.setPriority(.veryHigh, for: a!) == nil)
    }

    @Test func aStaleTokenDoesNotReachTheSubscriberNowInItsSlot() {
        var state = State()
        _ = state.subscribe("keeper", priority: .normal)
        let (gone, _) = state.subscribe("gone", priority: .low)
        _ = state.unsubscribe(gone!)
        let (reuser, _) = state.subscribe("reuser", priority: .low)
        #expect(reuser!.slot == gone!.slot && reuser!.id != gone!.id) // the slot was reused
        #expect(state.setPriority(.veryHigh, for: gone!) == nil)
        #expect(state.unsubscribe(gone!) == .none)
        #expect(state.subscriberCount == 2 && state.priority == .normal)
        #expect(state.setPriority(.veryHigh, for: reuser!) == .veryHigh)
    }

    @Test func changingAPriorityAnswersTheTasksNewPriorityOnlyWhenItMoves() {
        var state = State()
        let (a, _) = state.subscribe("a", priority: .normal)
        let (b, _) = state.subscribe("b", priority: .low)
        #expect(state.setPriority(.normal, for: a!) == nil) // unchanged
        #expect(state.setPriority(.high, for: b!) == .high)
        #expect(state.setPriority(.veryLow, for: a!) == nil) // b keeps it high
        #expect(state.setPriority(.low, for: b!) == .low)
        #expect(state.priority == .low)
    }

    /// Random events against a plain model (a dictionary of live subscribers): the task's
    /// priority is always the highest live one, it ends exactly when the last one leaves, and
    /// a delivery reaches exactly the live subscribers.
    @Test(arguments: 0..<20) func randomEventsAgreeWithAModel(seed: Int) {
        var generator = SplitMix64(seed: UInt64(seed))
        var state = State()
        var live: [String: (token: State.Token, priority: Priority)] = [:]
        var left: [State.Token] = []
        var ended = false
        var name = 0
        for _ in 0..<300 where !ended {
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<4:
                name += 1
                let priority = Priority.allCases.randomElement(using: &generator)!
                let before = state.priority
                let (token, arrival) = state.subscribe("s\(name)", priority: priority)
                let expected: State.Arrival = live.isEmpty && name == 1
                    ? .start(priority)
                    : .join(raisedTo: priority > before ? priority : nil, replay: nil)
                #expect(arrival == expected)
                live["s\(name)"] = (token!, priority)
            case 4..<7 where !live.isEmpty:
                let key = live.keys.sorted().randomElement(using: &generator)!
                let before = state.priority
                let token = live.removeValue(forKey: key)!.token
                let departure = state.unsubscribe(token)
                left.append(token)
                if live.isEmpty {
                    #expect(departure == .cancel)
                    ended = true
                } else {
                    let highest = live.values.map(\.priority).max()!
                    #expect(departure == (highest == before ? .none : .lowerPriority(highest)))
                }
            case 7..<9 where !live.isEmpty:
                let key = live.keys.sorted().randomElement(using: &generator)!
                let priority = Priority.allCases.randomElement(using: &generator)!
                let before = state.priority
                let changed = state.setPriority(priority, for: live[key]!.token)
                live[key]!.priority = priority
                let highest = live.values.map(\.priority).max()!
                #expect(changed == (highest == before ? nil : highest))
            default:
                if let stale = left.randomElement(using: &generator) {
                    #expect(state.unsubscribe(stale) == .none)
                }
            }
            if !ended {
                #expect(state.priority == live.values.map(\.priority).max() ?? state.priority)
                #expect(state.subscriberCount == live.count)
                #expect(Set(names(state.previewRecipients()) ?? []) == Set(live.keys))
            }
            left = Array(left.suffix(5))
        }
        if !ended { #expect(Set(names(state.finish()) ?? []) == Set(live.keys)) }
        #expect(state.isEnded)
    }
}
