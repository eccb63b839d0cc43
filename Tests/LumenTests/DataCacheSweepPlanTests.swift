import Foundation
import Testing
@testable import Lumen

/// The sweep's decision as a pure function: entries in, removals out.
@Suite(.timeLimit(.minutes(1)))
struct DataCacheSweepPlanTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// An entry named `name`, `size` bytes, last used `usedAgo` seconds ago, stored
    /// `storedAgo` seconds ago.
    func entry(_ name: String, size: Int = 100, usedAgo: TimeInterval, storedAgo: TimeInterval = 0) -> EntryFile {
        EntryFile(name: name, size: size, modified: now - usedAgo, storedAt: now - storedAgo)
    }

    @Test func underTheLimitOnlyExpiredEntriesGo() {
        let entries = [entry("a", usedAgo: 5, storedAgo: 100), entry("b", usedAgo: 50, storedAgo: 10), entry("c", usedAgo: 1, storedAgo: 99.9)]
        let plan = sweepPlan(entries, now: now, ttl: 100, sizeLimit: 1000)
        #expect(plan.expired.map(\.name) == ["a"])
        #expect(plan.evicted.isEmpty)
        #expect(plan.remainingSize == 200)
    }

    @Test func overTheLimitTheLeastRecentlyUsedGoDownTo80Percent() {
        // 10 entries of 100 bytes, limit 900: down to 720, so 3 go (700 left), oldest first.
        let entries = (0..<10).map { entry("e\($0)", usedAgo: TimeInterval(100 - $0)) }.shuffled()
        let plan = sweepPlan(entries, now: now, ttl: 1000, sizeLimit: 900)
        #expect(plan.expired.isEmpty)
        #expect(plan.evicted.map(\.name) == ["e0", "e1", "e2"])
        #expect(plan.remainingSize == 700)
    }

    @Test func expiredEntriesCountBeforeTheSizeBudget() {
        // Removing the expired entries alone brings the rest under the limit: no LRU eviction,
        // even though the expired one was the most recently used.
        let entries = [entry("fresh1", usedAgo: 30), entry("fresh2", usedAgo: 20), entry("stale", size: 500, usedAgo: 1, storedAgo: 5000)]
        let plan = sweepPlan(entries, now: now, ttl: 3600, sizeLimit: 600)
        #expect(plan.expired.map(\.name) == ["stale"])
        #expect(plan.evicted.isEmpty)
        #expect(plan.remainingSize == 200)
    }

    @Test func exactlyAtTheLimitIsNotOver() {
        let entries = (0..<5).map { entry("e\($0)", usedAgo: TimeInterval($0)) }
        #expect(sweepPlan(entries, now: now, ttl: 1000, sizeLimit: 500).evicted.isEmpty)
        #expect(sweepPlan(entries, now: now, ttl: 1000, sizeLimit: 499).evicted.map(\.name) == ["e4", "e3"])
    }

    @Test func tiesInTheStampAreBrokenByName() {
        let entries = ["c", "a", "b"].map { entry($0, usedAgo: 10) }
        #expect(sweepPlan(entries, now: now, ttl: 1000, sizeLimit: 150).evicted.map(\.name) == ["a", "b"])
    }
}
