// Lumen's concurrency helpers, shared by every module of the package (`package` access: not
// part of any product's public API).
//
// `PThreadMutex`: a `Mutex` that ThreadSanitizer can see. On Linux, `Synchronization.Mutex`
// locks with raw futex system calls, which TSan does not intercept; it then sees no ordering
// between two critical sections of one lock and reports every access inside `withLock` as a
// race, burying the real ones. Under `-Xswiftc -DLUMEN_TSAN_MUTEX` (scripts/check-sanitizers.sh
// thread) each module's `TSanMutex.swift` makes its unqualified `Mutex` this type; in every
// other build `Mutex` is `Synchronization.Mutex` and this type is unused.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A lock around a value, with the part of `Synchronization.Mutex`'s API that Lumen's modules
/// use, backed by a `pthread_mutex_t` so that ThreadSanitizer sees every lock and unlock.
///
/// A class rather than a noncopyable struct: a `pthread_mutex_t` must not move once it is
/// initialised, so it lives in its own heap allocation that this object owns.
///
/// `@unchecked Sendable` is sound for the same reasons `Synchronization.Mutex` is `Sendable`:
/// the value is reached only under the lock; it comes in as `sending` (no other reference to
/// it stays with the caller), and `body` gets it as `inout sending` and returns a `sending`
/// result, so that no non-`Sendable` part of it can stay reachable once the lock is released.
package final class PThreadMutex<Value: ~Copyable>: @unchecked Sendable { // `value` is only read or written while `lock` is held
    /// The lock, allocated once and never moved; destroyed in `deinit`.
    private let lock: UnsafeMutablePointer<pthread_mutex_t>
    /// The protected value. Reached only through `withLock`, under `lock`.
    private var value: Value

    /// Creates a lock around `initialValue`, which the caller gives up (as with
    /// `Synchronization.Mutex`, so a non-`Sendable` value cannot stay reachable outside).
    package init(_ initialValue: consuming sending Value) {
        lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        lock.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(lock, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = initialValue
    }

    deinit {
        pthread_mutex_destroy(lock)
        lock.deinitialize(count: 1)
        lock.deallocate()
    }

    /// Runs `body` with the value while holding the lock, and returns what it returns.
    /// The lock is not recursive: calling `withLock` on the same mutex from `body` deadlocks.
    package func withLock<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return try body(&value)
    }
}
