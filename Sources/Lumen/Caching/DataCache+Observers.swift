import Foundation
import Synchronization

extension DataCache {
    /// Internal listeners for the failures the cache absorbs, besides the `onFailure` given at
    /// creation: every pipeline using the cache registers one to forward failures to its own
    /// event hook and logger.
    final class FailureObservers: Sendable {
        private let observers = Mutex<(next: Int, handlers: [Int: @Sendable (Failure) -> Void])>((0, [:]))

        /// Adds `handler`; returns the token that removes it.
        func add(_ handler: @escaping @Sendable (Failure) -> Void) -> Int {
            observers.withLock {
                $0.next += 1
                $0.handlers[$0.next] = handler
                return $0.next
            }
        }

        func remove(_ token: Int) {
            _ = observers.withLock { $0.handlers.removeValue(forKey: token) }
        }

        /// Calls every handler, outside the lock.
        func notify(_ failure: Failure) {
            let handlers = observers.withLock { Array($0.handlers.values) }
            for handler in handlers { handler(failure) }
        }
    }
}

extension DataCache.Metrics: CustomStringConvertible {
    /// Every counter named, on one line:
    /// `DataCache.Metrics: 3 lookups, 1 hits, 2 misses, 2 writes, 0 write failures, …`.
    public var description: String {
        "DataCache.Metrics: \(lookups) lookups, \(hits) hits, \(misses) misses, \(writes) writes, \(writeFailures) write failures, "
            + "\(evictions) evictions, \(corruptEntriesRemoved) corrupt entries removed, \(renewals) renewals, \(sweeps) sweeps"
    }
}
