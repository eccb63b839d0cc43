import Foundation

/// The source of "now" for the caches' time-based behaviour: TTL expiry, LRU stamps on disk,
/// sweeps. Production code uses ``system``; tests inject a clock they advance by hand.
public struct CacheClock: Sendable {
    private let read: @Sendable () -> Date

    /// A clock that answers `read()` whenever the cache asks for the current time.
    public init(_ read: @escaping @Sendable () -> Date) {
        self.read = read
    }

    /// The current time.
    public var now: Date { read() }

    /// Wall-clock time (`Date()`).
    public static let system = CacheClock { Date() }
}
