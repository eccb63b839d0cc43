import Foundation
import Synchronization

/// Runs `body(i)` for every `i` in `0..<count` on `concurrency` dedicated threads (not the
/// cooperative pool: this is blocking CPU work), and returns when all are done.
func parallelForEach(_ count: Int, concurrency: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let workers = max(1, min(concurrency, count))
    let done = DispatchSemaphore(value: 0)
    let counter = Counter()
    for _ in 0..<workers {
        let thread = Thread {
            while true {
                let i = counter.takeNext()
                if i >= count { break }
                body(i)
            }
            done.signal()
        }
        thread.stackSize = 8 << 20
        thread.start()
    }
    for _ in 0..<workers { done.wait() }
}

/// A shared index dispenser for ``parallelForEach``.
private final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func takeNext() -> Int { value.add(1, ordering: .relaxed).oldValue }
}
