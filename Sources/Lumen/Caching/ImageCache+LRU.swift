import Foundation

/// The memory cache's state: a dictionary from key to slot, and an intrusive doubly linked
/// list threaded through parallel arrays of slots, most recently used at `head`.
///
/// The links, costs and stamps live in plain `Int`/`Double` arrays apart from the entries, so
/// moving an entry to the head touches no reference counts; slots are reused through a free
/// list, so steady-state lookups allocate nothing. Only ever touched under ``ImageCache``'s
/// lock.
struct LRUList: ~Copyable {
    struct Entry {
        var key: ImageCacheKey
        var value: ImageContainer
    }

    var costLimit: Int
    var countLimit: Int
    var entryCostLimit: Double
    private(set) var totalCost = 0
    var metrics = ImageCache.Metrics()

    private var index: [ImageCacheKey: Int] = [:]
    private var entries: [Entry?] = []
    private var costs: [Int] = []
    /// When each entry was stored, as `timeIntervalSinceReferenceDate` (0 when no TTL is set).
    private var storedAt: [Double] = []
    private var previous: [Int] = []  // towards head (more recent), -1 for none
    private var next: [Int] = []      // towards tail (less recent), -1 for none
    private var freeSlots: [Int] = []
    private var head = -1
    private var tail = -1

    init(costLimit: Int, countLimit: Int, entryCostLimit: Double) {
        self.costLimit = costLimit
        self.countLimit = countLimit
        self.entryCostLimit = entryCostLimit
    }

    var count: Int { index.count }

    /// The value for `key` without touching anything: not moved, not counted; `nil` for an
    /// entry stored at or before `threshold` (left for a lookup to expire).
    /// - Complexity: O(1).
    func peek(_ key: ImageCacheKey, storedNoEarlierThan threshold: Double?) -> ImageContainer? {
        guard let slot = index[key] else { return nil }
        if let threshold, storedAt[slot] <= threshold { return nil }
        return entries[slot]?.value
    }

    /// The value for `key`, moved to the head; an entry stored at or before `threshold` (when
    /// given) is expired: removed and reported as a miss.
    mutating func lookup(_ key: ImageCacheKey, storedNoEarlierThan threshold: Double?) -> ImageContainer? {
        guard let slot = index[key] else {
            metrics.misses += 1
            return nil
        }
        if let threshold, storedAt[slot] <= threshold {
            free(slot, key: key)
            metrics.expirations += 1
            metrics.misses += 1
            return nil
        }
        moveToHead(slot)
        metrics.hits += 1
        return entries[slot]?.value
    }

    /// Stores `value` at the head and evicts to the limits; `false` (and nothing stored) when
    /// it costs more than the per-entry limit.
    mutating func store(_ value: ImageContainer, cost: Int, for key: ImageCacheKey, at now: Double) -> Bool {
        guard Double(cost) <= Double(costLimit) * entryCostLimit else {
            metrics.rejectedOversizeCount += 1
            _ = remove(key)
            return false
        }
        metrics.writes += 1
        if let slot = index[key] {
            totalCost += cost - costs[slot]
            entries[slot] = Entry(key: key, value: value)
            costs[slot] = cost
            storedAt[slot] = now
            moveToHead(slot)
        } else {
            let slot: Int
            if let reused = freeSlots.popLast() {
                slot = reused
                entries[slot] = Entry(key: key, value: value)
                costs[slot] = cost
                storedAt[slot] = now
            } else {
                slot = entries.count
                entries.append(Entry(key: key, value: value))
                costs.append(cost)
                storedAt.append(now)
                previous.append(-1)
                next.append(-1)
            }
            linkAtHead(slot)
            index[key] = slot
            totalCost += cost
        }
        evictToLimits()
        return true
    }

    /// Removes the entry for `key`; `true` when there was one.
    mutating func remove(_ key: ImageCacheKey) -> Bool {
        guard let slot = index[key] else { return false }
        free(slot, key: key)
        return true
    }

    mutating func removeAll() {
        index.removeAll()
        entries.removeAll()
        costs.removeAll()
        storedAt.removeAll()
        previous.removeAll()
        next.removeAll()
        freeSlots.removeAll()
        head = -1
        tail = -1
        totalCost = 0
    }

    mutating func evictToLimits() {
        trim(toCost: costLimit, toCount: countLimit)
    }

    /// Evicts from the tail until both bounds hold.
    mutating func trim(toCost cost: Int, toCount countBound: Int) {
        while tail >= 0, totalCost > cost || index.count > countBound {
            let slot = tail
            guard let key = entries[slot]?.key else { preconditionFailure("LRUList: linked slot \(slot) is empty") }
            free(slot, key: key)
            metrics.evictions += 1
        }
    }

    func keysByRecency() -> [ImageCacheKey] {
        var keys: [ImageCacheKey] = []
        var slot = head
        while slot >= 0 {
            if let key = entries[slot]?.key { keys.append(key) }
            slot = next[slot]
        }
        return keys
    }

    // MARK: List surgery

    private mutating func linkAtHead(_ slot: Int) {
        previous[slot] = -1
        next[slot] = head
        if head >= 0 { previous[head] = slot }
        head = slot
        if tail < 0 { tail = slot }
    }

    private mutating func moveToHead(_ slot: Int) {
        guard slot != head else { return }
        unlink(slot)
        linkAtHead(slot)
    }

    private mutating func unlink(_ slot: Int) {
        let before = previous[slot]
        let after = next[slot]
        if before >= 0 { next[before] = after } else { head = after }
        if after >= 0 { previous[after] = before } else { tail = before }
    }

    private mutating func free(_ slot: Int, key: ImageCacheKey) {
        unlink(slot)
        totalCost -= costs[slot]
        entries[slot] = nil
        freeSlots.append(slot)
        index[key] = nil
    }
}
