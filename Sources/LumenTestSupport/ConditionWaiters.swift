import Synchronization

/// Tasks waiting until a condition over some value holds — a count reaching a target, event
/// counts — kept in the mutex-guarded state that holds the value, so that a look at the value
/// and the registration are one critical section. The owner wakes the waiters a change
/// satisfies with ``takeSatisfied(by:)``, and waits with ``wait(in:_:value:until:)``, which also
/// returns when the waiting task is cancelled: a condition never met must not outlive a test's
/// time limit.
struct ConditionWaiters<Value> {
    private var entries: [Int: (condition: @Sendable (Value) -> Bool, continuation: CheckedContinuation<Void, Never>)] = [:]
    private var nextID = 0

    /// Removes and returns the waiters `value` satisfies (resume them after unlocking).
    mutating func takeSatisfied(by value: Value) -> [CheckedContinuation<Void, Never>] {
        let ready = entries.filter { $0.value.condition(value) }
        for id in ready.keys { entries[id] = nil }
        return ready.values.map(\.continuation)
    }

    /// Waits until `condition` holds for the value (at once if it does), or until the calling
    /// task is cancelled. `waiters` and `value` reach this instance and the value inside the
    /// state `mutex` guards.
    static func wait<State>(
        in mutex: borrowing Mutex<State>,
        _ waiters: WritableKeyPath<State, ConditionWaiters> & Sendable,
        value: KeyPath<State, Value> & Sendable,
        until condition: @escaping @Sendable (Value) -> Bool
    ) async {
        let id = mutex.withLock { state in
            state[keyPath: waiters].nextID += 1
            return state[keyPath: waiters].nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Cancellation is read under the lock: a cancel after this look finds the waiter.
                let isDue = mutex.withLock { state in
                    if Task.isCancelled || condition(state[keyPath: value]) { return true }
                    state[keyPath: waiters].entries[id] = (condition, continuation)
                    return false
                }
                if isDue { continuation.resume() }
            }
        } onCancel: {
            mutex.withLock { $0[keyPath: waiters].entries.removeValue(forKey: id) }?.continuation.resume()
        }
    }
}
