import Synchronization

/// Wakes tasks waiting for "something changed" in a randomized model test: the UI model's
/// loads starting, ending or being cancelled, a model's observable state changing, a prefetch
/// or batch ending; the graph model's held calls and task outcomes. Waiters re-check their
/// condition.
final class ChangeSignal: Sendable {
    private struct State {
        var version = 0
        /// Waiting tasks by id (ids let a cancelled waiter find its continuation).
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    /// The current version; pass it to ``wait(after:)`` after checking a condition.
    var version: Int { state.withLock { $0.version } }

    /// Bumps the version and wakes every waiter.
    func ping() {
        let waiters = state.withLock { state in
            state.version += 1
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        waiters.forEach { $0.resume() }
    }

    /// Returns once the version differs from `version` (at once if it already does), or once
    /// the calling task is cancelled.
    func wait(after version: Int) async {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Cancellation is read under the lock: a cancel after this look finds the
                // waiter registered and resumes it.
                let isDue = state.withLock { state in
                    if state.version != version || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if isDue { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
