import Foundation
import Synchronization

/// A memory cache of decoded images, looked up synchronously.
///
/// Implementations must be thread-safe: the pipeline reads them from any thread, on the hit
/// path, without an actor hop.
public protocol ImageCaching: AnyObject, Sendable {
    /// The image stored for `key`, or `nil`; setting `nil` removes the entry.
    subscript(key: ImageCacheKey) -> ImageContainer? { get set }
    /// Removes the entry for `key`, if any.
    func removeValue(forKey key: ImageCacheKey)
    /// Removes every entry.
    func removeAll()
}

/// Lumen's memory cache: decoded images bounded by total cost (bytes of pixels), count and a
/// per-entry cost, evicted least-recently-used first, with an optional time to live.
///
/// Every operation takes one lock (`Synchronization.Mutex`) for a dictionary lookup and a few
/// pointer updates in an intrusive doubly linked list (indices into one array, so a hit
/// allocates nothing); no actor hop, no task. An entry whose cost is above
/// `entryCostLimit × costLimit` is not stored, and that is counted in
/// ``Metrics/rejectedOversizeCount``.
///
/// - Complexity: O(1) per lookup, store and removal (amortised, as for `Dictionary`); a store
///   or a lowered limit evicts in O(k) for the k entries it evicts.
public final class ImageCache: ImageCaching {
    /// Counters since the cache was created, and the current totals.
    public struct Metrics: Sendable, Hashable {
        /// Lookups that found a live entry.
        public var hits = 0
        /// Lookups that found nothing, or an entry past its TTL.
        public var misses = 0
        /// Values stored (new entries and replacements).
        public var writes = 0
        /// Entries removed to respect a limit (not explicit removals).
        public var evictions = 0
        /// Entries found past their TTL and removed.
        public var expirations = 0
        /// Values not stored because their cost was above the per-entry limit.
        public var rejectedOversizeCount = 0
        /// Bytes of pixels held now.
        public var totalCost = 0
        /// Entries held now.
        public var totalCount = 0
    }

    /// The default total cost limit: 15% of physical memory, at most 512 MB.
    public static var defaultCostLimit: Int {
        let fraction = Double(ProcessInfo.processInfo.physicalMemory) * 0.15
        return Int(min(fraction, 512 * 1024 * 1024))
    }

    /// The time to live of an entry, from the moment it was stored; `nil` keeps entries until
    /// they are evicted.
    public let ttl: TimeInterval?

    private let clock: CacheClock
    private let state: Mutex<LRUList>

    /// Creates a memory cache.
    ///
    /// - Parameters:
    ///   - costLimit: the most bytes of pixels held at once (default ``defaultCostLimit``).
    ///   - countLimit: the most entries held at once (default unlimited).
    ///   - entryCostLimit: an entry costing more than this fraction of `costLimit` is not
    ///     stored (default 0.1).
    ///   - ttl: how long an entry stays valid after it is stored (default: forever).
    ///   - clock: the time source for the TTL (default wall-clock time).
    public init(
        costLimit: Int = ImageCache.defaultCostLimit,
        countLimit: Int = .max,
        entryCostLimit: Double = 0.1,
        ttl: TimeInterval? = nil,
        clock: CacheClock = .system
    ) {
        precondition(costLimit >= 0 && countLimit >= 0, "ImageCache: limits must not be negative")
        precondition(entryCostLimit >= 0, "ImageCache: entryCostLimit must not be negative")
        precondition(ttl.map { $0 > 0 } ?? true, "ImageCache: ttl must be positive")
        self.ttl = ttl
        self.clock = clock
        self.state = Mutex(LRUList(costLimit: costLimit, countLimit: countLimit, entryCostLimit: entryCostLimit))
    }

    // MARK: Limits

    /// The most bytes of pixels held at once. Lowering it evicts at once.
    ///
    /// - Complexity: O(k) for the k entries evicted.
    public var costLimit: Int {
        get { state.withLock { $0.costLimit } }
        set {
            precondition(newValue >= 0, "ImageCache: costLimit must not be negative")
            state.withLock {
                $0.costLimit = newValue
                $0.evictToLimits()
            }
        }
    }

    /// The most entries held at once. Lowering it evicts at once.
    ///
    /// - Complexity: O(k) for the k entries evicted.
    public var countLimit: Int {
        get { state.withLock { $0.countLimit } }
        set {
            precondition(newValue >= 0, "ImageCache: countLimit must not be negative")
            state.withLock {
                $0.countLimit = newValue
                $0.evictToLimits()
            }
        }
    }

    /// The largest fraction of ``costLimit`` a single entry may cost; larger values are not
    /// stored. Changing it does not remove entries already stored.
    public var entryCostLimit: Double {
        get { state.withLock { $0.entryCostLimit } }
        set {
            precondition(newValue >= 0, "ImageCache: entryCostLimit must not be negative")
            state.withLock { $0.entryCostLimit = newValue }
        }
    }

    /// Bytes of pixels held now.
    public var totalCost: Int { state.withLock { $0.totalCost } }

    /// Entries held now.
    public var totalCount: Int { state.withLock { $0.count } }

    /// A snapshot of the counters and totals.
    public var metrics: Metrics {
        state.withLock {
            var m = $0.metrics
            m.totalCost = $0.totalCost
            m.totalCount = $0.count
            return m
        }
    }

    // MARK: Access

    /// The image stored for `key`, or `nil`; setting a value stores it (most recently used),
    /// setting `nil` removes the entry.
    ///
    /// - Complexity: O(1).
    public subscript(key: ImageCacheKey) -> ImageContainer? {
        get { value(forKey: key) }
        set {
            if let newValue {
                storeValue(newValue, forKey: key)
            } else {
                removeValue(forKey: key)
            }
        }
    }

    /// The image stored for `key`, marking it most recently used; `nil` on a miss or when the
    /// entry is past its TTL (then it is removed).
    ///
    /// - Complexity: O(1).
    public func value(forKey key: ImageCacheKey) -> ImageContainer? {
        // The clock is read outside the lock: it may be caller-supplied code.
        let expiry = ttl.map { clock.now.timeIntervalSinceReferenceDate - $0 }
        return state.withLock { $0.lookup(key, storedNoEarlierThan: expiry) }
    }

    /// The image stored for `key`, without marking it used or counting a lookup in
    /// ``metrics``: the pipeline asking on its own behalf (a larger decode to resample).
    /// - Complexity: O(1).
    func peekValue(forKey key: ImageCacheKey) -> ImageContainer? {
        let expiry = ttl.map { clock.now.timeIntervalSinceReferenceDate - $0 }
        return state.withLock { $0.peek(key, storedNoEarlierThan: expiry) }
    }

    /// Stores `value` for `key` as the most recently used entry, then evicts least recently
    /// used entries until the limits hold.
    ///
    /// - Returns: `false` when the value costs more than the per-entry limit and was not stored
    ///   (any previous entry for `key` is removed so that it cannot answer for the new value).
    /// - Complexity: O(1), plus O(k) for the k entries evicted.
    @discardableResult
    public func storeValue(_ value: ImageContainer, forKey key: ImageCacheKey) -> Bool {
        let now = ttl == nil ? 0 : clock.now.timeIntervalSinceReferenceDate
        return state.withLock { $0.store(value, cost: value.cost, for: key, at: now) }
    }

    /// Removes the entry for `key`, if any.
    ///
    /// - Complexity: O(1).
    public func removeValue(forKey key: ImageCacheKey) {
        _ = state.withLock { $0.remove(key) }
    }

    /// Removes every entry. Counters are kept.
    ///
    /// - Complexity: O(n).
    public func removeAll() {
        state.withLock { $0.removeAll() }
    }

    /// Evicts least recently used entries until the total cost is at most `cost`.
    ///
    /// - Complexity: O(k) for the k entries evicted.
    public func trim(toCost cost: Int) {
        state.withLock { $0.trim(toCost: cost, toCount: .max) }
    }

    /// Evicts least recently used entries until at most `count` remain.
    ///
    /// - Complexity: O(k) for the k entries evicted.
    public func trim(toCount count: Int) {
        state.withLock { $0.trim(toCost: .max, toCount: count) }
    }

    /// The keys from most to least recently used (for tests and diagnostics; does not touch
    /// the order).
    ///
    /// - Complexity: O(n).
    public var keysByRecency: [ImageCacheKey] {
        state.withLock { $0.keysByRecency() }
    }
}

extension ImageCache.Metrics: CustomStringConvertible {
    /// Every counter named, on one line:
    /// `ImageCache.Metrics: 1 hits, 2 misses, 2 writes, 0 evictions, …, 2 entries, 245760 bytes held`.
    public var description: String {
        "ImageCache.Metrics: \(hits) hits, \(misses) misses, \(writes) writes, \(evictions) evictions, \(expirations) expirations, "
            + "\(rejectedOversizeCount) rejected as oversize, \(totalCount) entries, \(totalCost) bytes held"
    }
}
