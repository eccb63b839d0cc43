import Synchronization

extension WorkQueue {
    /// Runs `work` as one item of this queue, at `priority`, and returns its result: for
    /// stages outside the pipeline that share its bounded, priority-ordered workers (the
    /// server's encode stage). Cancelling the calling task withdraws a pending item at once
    /// (it never runs) and throws `CancellationError`; a running one finishes and its result
    /// is dropped.
    package func run<T: Sendable>(
        priority: ImageRequest.Priority = .normal, _ work: @escaping @Sendable () throws -> T
    ) async throws -> T {
        let pending = Mutex<(continuation: CheckedContinuation<T, any Error>?, item: Item?, isCancelled: Bool)>((nil, nil, false))
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let alreadyCancelled = pending.withLock { state -> Bool in
                    state.continuation = continuation
                    return state.isCancelled
                }
                if alreadyCancelled {
                    pending.withLock { $0.continuation = nil }
                    continuation.resume(throwing: CancellationError())
                    return
                }
                let item = enqueue(priority: priority) {
                    guard pending.withLock({ $0.continuation != nil }) else { return }
                    let result = Result { try work() }
                    pending.withLock { state in
                        defer { state.continuation = nil }
                        return state.continuation
                    }?.resume(with: result)
                }
                pending.withLock { $0.item = item }
            }
        } onCancel: {
            let (continuation, item) = pending.withLock { state in
                state.isCancelled = true
                defer { state.continuation = nil }
                return (state.continuation, state.item)
            }
            if let item { cancel(item) }
            continuation?.resume(throwing: CancellationError())
        }
    }
}
