import Foundation
import Testing
@testable import Lumen
import LumenTestSupport

@Suite(.timeLimit(.minutes(1)))
struct ImageCacheTests {
    @Test func storesAndReturnsByKey() {
        let cache = ImageCache(costLimit: 1000)
        cache[cacheKey("a")] = cacheTestImage(cost: 40, fill: 7)
        #expect(cache[cacheKey("a")]?.image.pixels.first == 7)
        #expect(cache[cacheKey("b")] == nil)
        #expect(cache.totalCost == 40)
        #expect(cache.totalCount == 1)
        let m = cache.metrics
        #expect((m.hits, m.misses, m.writes) == (1, 1, 1))
    }

    @Test func replacingAnEntryAdjustsTheTotalCost() {
        let cache = ImageCache(costLimit: 1000)
        cache[cacheKey("a")] = cacheTestImage(cost: 40)
        cache[cacheKey("a")] = cacheTestImage(cost: 80, fill: 2)
        #expect(cache.totalCost == 80)
        #expect(cache.totalCount == 1)
        #expect(cache[cacheKey("a")]?.image.pixels.first == 2)
    }

    @Test func settingNilRemoves() {
        let cache = ImageCache(costLimit: 1000)
        cache[cacheKey("a")] = cacheTestImage(cost: 40)
        cache[cacheKey("a")] = nil
        #expect(cache[cacheKey("a")] == nil)
        #expect(cache.totalCost == 0)
        cache[cacheKey("b")] = cacheTestImage(cost: 40)
        cache.removeValue(forKey: cacheKey("b"))
        #expect(cache.totalCount == 0)
    }

    @Test func evictsLeastRecentlyUsedFirst() {
        let cache = ImageCache(costLimit: 400, entryCostLimit: 1)
        for id in ["a", "b", "c", "d"] { cache[cacheKey(id)] = cacheTestImage(cost: 100) }
        #expect(cache.keysByRecency.map(\.imageID) == ["d", "c", "b", "a"])
        _ = cache[cacheKey("a")]  // a becomes most recent; b is now least recent
        #expect(cache.keysByRecency.map(\.imageID) == ["a", "d", "c", "b"])
        cache[cacheKey("e")] = cacheTestImage(cost: 100)
        #expect(cache[cacheKey("b")] == nil)
        #expect(Set(cache.keysByRecency.map(\.imageID)) == ["a", "c", "d", "e"])
        #expect(cache.metrics.evictions == 1)
        #expect(cache.totalCost == 400)
    }

    /// Model check: a random sequence of operations against a naive array-based LRU.
    @Test(arguments: [1, 2, 3, 4])
    func matchesANaiveLRUModel(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        let costLimit = 1000
        let countLimit = 7
        let cache = ImageCache(costLimit: costLimit, countLimit: countLimit, entryCostLimit: 0.5)
        var model: [(id: String, cost: Int)] = []  // most recent first
        for _ in 0..<3000 {
            let id = "k\(rng.next() % 15)"
            switch rng.next() % 4 {
            case 0, 1:
                let cost = Int(rng.next() % 160 + 1) * 4
                let stored = cache.storeValue(cacheTestImage(cost: cost), forKey: cacheKey(id))
                model.removeAll { $0.id == id }
                #expect(stored == (cost <= costLimit / 2))
                if stored {
                    model.insert((id, cost), at: 0)
                    while model.reduce(0, { $0 + $1.cost }) > costLimit || model.count > countLimit { model.removeLast() }
                }
            case 2:
                let hit = cache[cacheKey(id)] != nil
                if let i = model.firstIndex(where: { $0.id == id }) {
                    #expect(hit)
                    model.insert(model.remove(at: i), at: 0)
                } else {
                    #expect(!hit)
                }
            default:
                cache.removeValue(forKey: cacheKey(id))
                model.removeAll { $0.id == id }
            }
            #expect(cache.keysByRecency.map(\.imageID) == model.map(\.id))
        }
        #expect(cache.totalCost == model.reduce(0) { $0 + $1.cost })
    }

    @Test func countLimitEvicts() {
        let cache = ImageCache(costLimit: 10_000, countLimit: 2)
        for id in ["a", "b", "c"] { cache[cacheKey(id)] = cacheTestImage(cost: 4) }
        #expect(cache.keysByRecency.map(\.imageID) == ["c", "b"])
    }

    @Test func oversizeEntryIsRejectedAndCounted() {
        let cache = ImageCache(costLimit: 1000)  // default per-entry limit: 10% = 100 bytes
        #expect(cache.storeValue(cacheTestImage(cost: 100), forKey: cacheKey("fits")))
        #expect(!cache.storeValue(cacheTestImage(cost: 104), forKey: cacheKey("big")))
        #expect(cache[cacheKey("big")] == nil)
        #expect(cache.metrics.rejectedOversizeCount == 1)
        #expect(cache.totalCost == 100)
    }

    @Test func oversizeReplacementRemovesTheOldValue() {
        let cache = ImageCache(costLimit: 1000)
        cache[cacheKey("a")] = cacheTestImage(cost: 40)
        cache[cacheKey("a")] = cacheTestImage(cost: 400)
        #expect(cache[cacheKey("a")] == nil)
        #expect(cache.metrics.rejectedOversizeCount == 1)
    }

    @Test func loweringLimitsEvictsAtOnce() {
        let cache = ImageCache(costLimit: 1000, entryCostLimit: 1)
        for i in 0..<10 { cache[cacheKey("\(i)")] = cacheTestImage(cost: 100) }
        cache.costLimit = 500
        #expect(cache.totalCost == 500)
        #expect(cache.keysByRecency.map(\.imageID) == ["9", "8", "7", "6", "5"])
        cache.countLimit = 2
        #expect(cache.keysByRecency.map(\.imageID) == ["9", "8"])
        #expect(cache.metrics.evictions == 8)
    }

    @Test func trimToCostAndCount() {
        let cache = ImageCache(costLimit: 1000, entryCostLimit: 1)
        for i in 0..<6 { cache[cacheKey("\(i)")] = cacheTestImage(cost: 100) }
        cache.trim(toCost: 350)
        #expect(cache.keysByRecency.map(\.imageID) == ["5", "4", "3"])
        cache.trim(toCount: 1)
        #expect(cache.keysByRecency.map(\.imageID) == ["5"])
        #expect(cache.costLimit == 1000)  // trimming does not change the limits
    }

    @Test func removeAllEmptiesButKeepsCounters() {
        let cache = ImageCache(costLimit: 1000)
        cache[cacheKey("a")] = cacheTestImage(cost: 40)
        cache[cacheKey("b")] = cacheTestImage(cost: 40)
        cache.removeAll()
        #expect(cache.totalCount == 0 && cache.totalCost == 0)
        #expect(cache[cacheKey("a")] == nil)
        #expect(cache.metrics.writes == 2)
        cache[cacheKey("c")] = cacheTestImage(cost: 40)  // still usable after removeAll
        #expect(cache[cacheKey("c")] != nil)
    }

    @Test func entriesExpireAfterTTL() {
        let clock = CacheTestClock()
        let cache = ImageCache(costLimit: 1000, ttl: 60, clock: clock.cacheClock)
        cache[cacheKey("a")] = cacheTestImage(cost: 40)
        clock.advance(by: 30)
        cache[cacheKey("b")] = cacheTestImage(cost: 40)
        clock.advance(by: 29.9)
        #expect(cache[cacheKey("a")] != nil)
        clock.advance(by: 0.1)  // a is now exactly 60 s old
        #expect(cache[cacheKey("a")] == nil)
        #expect(cache[cacheKey("b")] != nil)
        #expect(cache.metrics.expirations == 1)
        #expect(cache.totalCount == 1)
        cache[cacheKey("b")] = cacheTestImage(cost: 40)  // restoring restarts the TTL
        clock.advance(by: 59)
        #expect(cache[cacheKey("b")] != nil)
    }

    @Test func defaultCostLimitIsFifteenPercentOfMemoryCappedAt512MB() {
        let expected = min(Double(ProcessInfo.processInfo.physicalMemory) * 0.15, 512 * 1024 * 1024)
        #expect(ImageCache.defaultCostLimit == Int(expected))
        #expect(ImageCache().costLimit == ImageCache.defaultCostLimit)
    }

    @Test func concurrentAccessKeepsTotalsConsistent() async {
        let cache = ImageCache(costLimit: 40 * 64, entryCostLimit: 1)
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<16 {
                group.addTask {
                    var rng = SplitMix64(seed: UInt64(task))
                    for _ in 0..<2000 {
                        let id = "k\(rng.next() % 100)"
                        switch rng.next() % 3 {
                        case 0: cache[cacheKey(id)] = cacheTestImage(cost: 64)
                        case 1: _ = cache[cacheKey(id)]
                        default: if rng.next() % 10 == 0 { cache.removeValue(forKey: cacheKey(id)) } else { _ = cache[cacheKey(id)] }
                        }
                    }
                }
            }
        }
        let m = cache.metrics
        #expect(m.totalCost == m.totalCount * 64)
        #expect(m.totalCount <= 40)
        #expect(cache.keysByRecency.count == m.totalCount)
        #expect(m.hits + m.misses > 0)
        #expect(Set(cache.keysByRecency).count == m.totalCount)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ImageCacheKeyTests {
    @Test func credentialFingerprintIsNilWithoutCredentials() {
        #expect(ImageCacheKey.credentialFingerprint(for: [:]) == nil)
        #expect(ImageCacheKey.credentialFingerprint(for: ["User-Agent": "x", "X-Request-ID": "42"]) == nil)
        #expect(ImageCacheKey.credentialFingerprint(for: ["Authorization": "  "]) == nil)
    }

    @Test func credentialFingerprintDiffersByCredential() {
        let alice = ImageCacheKey.credentialFingerprint(for: ["Authorization": "Bearer alice"])
        let bob = ImageCacheKey.credentialFingerprint(for: ["Authorization": "Bearer bob"])
        let cookieA = ImageCacheKey.credentialFingerprint(for: ["Cookie": "session=1"])
        let cookieB = ImageCacheKey.credentialFingerprint(for: ["Cookie": "session=2"])
        let all = [alice, bob, cookieA, cookieB]
        #expect(all.allSatisfy { $0 != nil })
        #expect(Set(all).count == 4)
        // The header name is part of the fingerprint: the same value under another name differs.
        #expect(ImageCacheKey.credentialFingerprint(for: ["Cookie": "Bearer alice"]) != alice)
    }

    @Test func credentialFingerprintIgnoresNameCaseOrderAndOtherHeaders() {
        let a = ImageCacheKey.credentialFingerprint(for: ["Authorization": "Bearer t", "Cookie": "c=1", "X-Request-ID": "a"])
        let b = ImageCacheKey.credentialFingerprint(for: ["cookie": "c=1", "AUTHORIZATION": " Bearer t", "User-Agent": "u"])
        #expect(a != nil && a == b)
    }

    /// Part of an image (`Range`) or another format (`Accept`) is another answer from the
    /// server: keyed like credentials, case-insensitively.
    @Test func representationHeadersAreKeyed() {
        let plain = ImageCacheKey.credentialFingerprint(for: [:])
        var seen: Set<String?> = [plain]
        for (name, value) in [("Range", "bytes=0-3"), ("If-Range", "\"e\""), ("Accept", "image/webp"), ("Accept-Language", "fr")] {
            let fingerprint = ImageCacheKey.credentialFingerprint(for: [name: value])
            #expect(fingerprint != nil, "\(name)")
            #expect(seen.insert(fingerprint).inserted, "\(name)")
            #expect(ImageCacheKey.credentialFingerprint(for: [name.uppercased(): value]) == fingerprint)
        }
        #expect(ImageCacheKey.representationHeaderNames == ["range", "if-range", "accept", "accept-language"])
    }

    @Test func markedHeadersCountAsCredentials() {
        let headers = ["X-Api-Key": "secret1"]
        #expect(ImageCacheKey.credentialFingerprint(for: headers) == nil)
        let one = ImageCacheKey.credentialFingerprint(for: headers, markedHeaders: ["x-api-key"])
        let two = ImageCacheKey.credentialFingerprint(for: ["X-Api-Key": "secret2"], markedHeaders: ["X-API-KEY"])
        #expect(one != nil && two != nil && one != two)
    }

    @Test func fingerprintIsTheSHA256OfTheCanonicalForm() {
        // Independent check of the documented canonical form with `sha256sum`.
        let canonical = "lumen-credentials-v1\n13:authorization8:Bearer t6:cookie3:c=1"
        let fingerprint = ImageCacheKey.credentialFingerprint(for: ["Cookie": "c=1", "Authorization": "Bearer t"])
        #expect(fingerprint == cacheTestSHA256(Data(canonical.utf8)))
    }

    @Test func keysDifferByEveryPart() {
        struct Blur: Hashable, Sendable { var radius: Int }
        let base = ImageCacheKey(imageID: "img", decodeSize: .maxPixelSize(100), processors: [Blur(radius: 2)])
        let variants = [
            ImageCacheKey(imageID: "img2", decodeSize: .maxPixelSize(100), processors: [Blur(radius: 2)]),
            ImageCacheKey(imageID: "img", credentialFingerprint: "f", decodeSize: .maxPixelSize(100), processors: [Blur(radius: 2)]),
            ImageCacheKey(imageID: "img", decodeSize: .maxPixelSize(200), processors: [Blur(radius: 2)]),
            ImageCacheKey(imageID: "img", decodeSize: nil, processors: [Blur(radius: 2)]),
            ImageCacheKey(imageID: "img", decodeSize: .maxPixelSize(100), processors: [Blur(radius: 3)]),
            ImageCacheKey(imageID: "img", decodeSize: .maxPixelSize(100), processors: []),
            ImageCacheKey(imageID: "img", decodeSize: .maxPixelSize(100), processors: [Blur(radius: 2), Blur(radius: 2)]),
        ]
        for variant in variants { #expect(variant != base) }
        #expect(Set(variants + [base]).count == variants.count + 1)
        #expect(ImageCacheKey(imageID: "img", decodeSize: .maxPixelSize(100), processors: [Blur(radius: 2)]) == base)

        let cache = ImageCache(costLimit: 1000)
        cache[base] = cacheTestImage(cost: 40)
        for variant in variants { #expect(cache[variant] == nil) }
    }
}
