import Foundation

/// The memory cache's state: a dictionary from key to slot, and an intrusive doubly linked
/// list threaded through an array of slots, most recently used at `head`.
///
/// Slots are reused through a free list, so steady-state lookups and stores allocate nothing
/// beyond what `Dictionary` does. Only ever touched under ``ImageCache``'s lock.
struct LRUList: ~Copyable {
    struct Node {
        var key: ImageCacheKey
        var value: ImageContainer
        var cost: Int
        /// When it was stored, as `timeIntervalSinceReferenceDate` (0 when no TTL is set).
        var storedAt: Double
        var previous: Int  // towards head (more recent), -1 for none
        var next: Int      // towards tail (less recent), -1 for none
    }

    var costLimit: Int
    var countLimit: Int
    var entryCostLimit: Double
    private(set) var totalCost = 0
    var metrics = ImageCache.Metrics()

    private var index: [ImageCacheKey: Int] = [:]
    private var slots: [Node?] = []
    private var freeSlots: [Int] = []
    private var head = -1
    private var tail = -1

    init(costLimit: Int, countLimit: Int, entryCostLimit: Double) {
        self.costLimit = costLimit
        self.countLimit = countLimit
        self.entryCostLimit = entryCostLimit
    }

    var count: Int { index.count }

    /// The value for `key`, moved to the head; an entry stored before `threshold` (when given)
    /// is expired: removed and reported as a miss.
    mutating func lookup(_ key: ImageCacheKey, storedNoEarlierThan threshold: Double?) -> ImageContainer? {
        guard let slot = index[key] else {
            metrics.misses += 1
            return nil
        }
        if let threshold, slots[slot]!.storedAt <= threshold {
            unlinkAndFree(slot, key: key)
            metrics.expirations += 1
            metrics.misses += 1
            return nil
        }
        moveToHead(slot)
        metrics.hits += 1
        return slots[slot]!.value
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
            totalCost += cost - slots[slot]!.cost
            slots[slot]!.value = value
            slots[slot]!.cost = cost
            slots[slot]!.storedAt = now
            moveToHead(slot)
        } else {
            let node = Node(key: key, value: value, cost: cost, storedAt: now, previous: -1, next: head)
            let slot: Int
            if let reused = freeSlots.popLast() {
                slot = reused
                slots[slot] = node
            } else {
                slot = slots.count
                slots.append(node)
            }
            if head >= 0 { slots[head]!.previous = slot }
            head = slot
            if tail < 0 { tail = slot }
            index[key] = slot
            totalCost += cost
        }
        evictToLimits()
        return true
    }

    /// Removes the entry for `key`; `true` when there was one.
    mutating func remove(_ key: ImageCacheKey) -> Bool {
        guard let slot = index[key] else { return false }
        unlinkAndFree(slot, key: key)
        return true
    }

    mutating func removeAll() {
        index.removeAll()
        slots.removeAll()
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
            unlinkAndFree(slot, key: slots[slot]!.key)
            metrics.evictions += 1
        }
    }

    func keysByRecency() -> [ImageCacheKey] {
        var keys: [ImageCacheKey] = []
        var slot = head
        while slot >= 0 {
            keys.append(slots[slot]!.key)
            slot = slots[slot]!.next
        }
        return keys
    }

    // MARK: List surgery

    private mutating func moveToHead(_ slot: Int) {
        guard slot != head else { return }
        unlink(slot)
        slots[slot]!.previous = -1
        slots[slot]!.next = head
        if head >= 0 { slots[head]!.previous = slot }
        head = slot
        if tail < 0 { tail = slot }
    }

    private mutating func unlink(_ slot: Int) {
        let previous = slots[slot]!.previous
        let next = slots[slot]!.next
        if previous >= 0 { slots[previous]!.next = next } else { head = next }
        if next >= 0 { slots[next]!.previous = previous } else { tail = previous }
    }

    private mutating func unlinkAndFree(_ slot: Int, key: ImageCacheKey) {
        unlink(slot)
        totalCost -= slots[slot]!.cost
        slots[slot] = nil
        freeSlots.append(slot)
        index[key] = nil
    }
}
