import Foundation
import Testing
@testable import Lumen
import LumenTestSupport

/// Behaviour of the disk cache on a healthy directory: real files in a temporary directory,
/// time from a manual clock.
@Suite(.timeLimit(.minutes(1)))
struct DataCacheTests {
    let clock = CacheTestClock()
    let failures = CacheTestRecorder<DataCache.Failure>()

    func makeCache(_ dir: borrowing CacheTestDirectory, sizeLimit: Int = 10_000_000, ttl: TimeInterval = 7 * 86_400) -> DataCache {
        let failures = failures
        let cache = DataCache(name: "test", directory: dir.url, sizeLimit: sizeLimit, ttl: ttl, clock: clock.cacheClock) {
            failures.record($0)
        }
        cache.flushSynchronously()  // the initial scan
        return cache
    }

    func bytes(_ count: Int, seed: UInt8 = 1) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
    }

    func metadata(etag: String = "\"1\"") -> CacheMetadata {
        CacheMetadata(etag: etag, lastModified: "Wed, 21 Oct 2015 07:28:00 GMT", cacheControl: CacheControl(maxAge: 60, immutable: true), contentType: "image/jpeg", storedAt: clock.now)
    }

    func entryNames(_ dir: borrowing CacheTestDirectory) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
    }

    func modificationDate(_ url: URL) throws -> Date {
        try #require(FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date)
    }

    func fileSize(_ url: URL) throws -> Int {
        try #require((FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue)
    }

    @Test func roundTripsBytesAndMetadata() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let data = bytes(5000)
        cache.storeData(data, metadata: metadata(), for: "https://example.com/a.jpg")
        // Visible in this process before the write lands…
        #expect(cache.cachedData(for: "https://example.com/a.jpg")?.data == data)
        cache.flushSynchronously()
        let hit = try #require(cache.cachedData(for: "https://example.com/a.jpg"))
        #expect(hit.data == data)
        #expect(hit.metadata == metadata())
        // …and on disk for a new cache over the same directory.
        let other = makeCache(dir)
        #expect(other.cachedData(for: "https://example.com/a.jpg")?.data == data)
        #expect(other.cachedData(for: "https://example.com/b.jpg") == nil)
        let m = cache.metrics
        #expect((m.lookups, m.hits, m.misses, m.writes) == (2, 2, 0, 1))
        #expect(failures.all.isEmpty)
    }

    @Test func emptyDataRoundTrips() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        cache.storeData(Data(), metadata: metadata(), for: "empty")
        cache.flushSynchronously()
        #expect(makeCache(dir).cachedData(for: "empty")?.data == Data())
    }

    @Test func fileNamesAreTheSHA256OfTheKey() throws {
        #expect(DataCache.filename(for: "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let keys = ["https://example.com/a.jpg?w=100", "ü/ß key with spaces", ""]
        for key in keys { cache.storeData(bytes(10), metadata: metadata(), for: key) }
        cache.flushSynchronously()
        let expected = try keys.map { try #require(cacheTestSHA256(Data($0.utf8))) }
        #expect(try entryNames(dir) == expected.sorted())
    }

    @Test func writesLeaveNoTemporaryFiles() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        for i in 0..<50 { cache.storeData(bytes(1000 + i), metadata: metadata(), for: "k\(i % 20)") }
        cache.renew(key: "k1", metadata: metadata(etag: "\"2\""))
        cache.flushSynchronously()
        let names = try entryNames(dir)
        #expect(names.count == 20)
        #expect(names.allSatisfy { $0.count == 64 && $0.allSatisfy(\.isHexDigit) })
    }

    /// Entries hold URLs (which may carry credentials) and private images: the directory the
    /// cache makes and every entry, renewed ones included, are the owner's alone.
    @Test func entriesAndTheDirectoryAreOwnerOnly() throws {
        let dir = try CacheTestDirectory()
        let nested = dir.url.appendingPathComponent("made/by/the/cache")
        let cache = DataCache(name: "test", directory: nested, clock: clock.cacheClock)
        cache.storeData(bytes(100), metadata: metadata(), for: "https://alice:secret@example.com/a.jpg")
        cache.storeData(bytes(100), metadata: metadata(), for: "k2")
        cache.renew(key: "k2", metadata: metadata(etag: "\"2\""))
        cache.flushSynchronously()
        func mode(_ path: String) throws -> Int {
            try #require((FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue)
        }
        #expect(try mode(nested.path) == 0o700)
        let names = try FileManager.default.contentsOfDirectory(atPath: nested.path)
        #expect(names.count == 2)
        for name in names {
            #expect(try mode(nested.appendingPathComponent(name).path) == 0o600, "\(name)")
        }
    }

    @Test func containsAndRemove() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        cache.storeData(bytes(10), metadata: metadata(), for: "a")
        cache.storeData(bytes(10), metadata: metadata(), for: "b")
        #expect(cache.containsData(for: "a"))
        cache.flushSynchronously()
        #expect(cache.containsData(for: "a"))
        cache.removeData(for: "a")
        #expect(!cache.containsData(for: "a"))
        #expect(cache.cachedData(for: "a") == nil)  // at once, before the file goes
        cache.flushSynchronously()
        #expect(!FileManager.default.fileExists(atPath: cache.url(for: "a").path))
        #expect(cache.cachedData(for: "b") != nil)
        cache.removeAll()
        #expect(cache.cachedData(for: "b") == nil)
        #expect(!cache.containsData(for: "b"))
        cache.storeData(bytes(10), metadata: metadata(), for: "c")  // after removeAll: kept
        cache.flushSynchronously()
        #expect(try entryNames(dir) == [DataCache.filename(for: "c")])
        #expect(cache.cachedData(for: "c") != nil)
    }

    @Test func noStoreAndOversizedEntriesAreNotWritten() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir, sizeLimit: 10_000)
        cache.storeData(bytes(10), metadata: CacheMetadata(headers: ["Cache-Control": "no-store"], now: clock.now), for: "secret")
        cache.storeData(bytes(20_000), metadata: metadata(), for: "huge")
        cache.flushSynchronously()
        #expect(cache.cachedData(for: "secret") == nil)
        #expect(cache.cachedData(for: "huge") == nil)
        #expect(try entryNames(dir).isEmpty)
    }

    @Test func renewReplacesMetadataAndKeepsBytesAtomically() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let data = bytes(4000)
        cache.storeData(data, metadata: metadata(etag: "\"v1\""), for: "a")
        cache.flushSynchronously()
        clock.advance(by: 600)
        let renewed = metadata(etag: "\"v1\"").renewed(withHeaders: ["ETag": "\"v2\""], now: clock.now)
        cache.renew(key: "a", metadata: renewed)
        #expect(cache.cachedData(for: "a")?.metadata == renewed)  // at once
        cache.flushSynchronously()
        let fresh = makeCache(dir)
        let hit = try #require(fresh.cachedData(for: "a"))
        #expect(hit.data == data)
        #expect(hit.metadata == renewed)
        #expect(hit.metadata.storedAt == clock.now)
        #expect(try entryNames(dir) == [DataCache.filename(for: "a")])
        #expect(cache.metrics.renewals == 1)
        // Renewing a missing entry creates nothing.
        cache.renew(key: "nothing", metadata: renewed)
        cache.flushSynchronously()
        #expect(fresh.cachedData(for: "nothing") == nil)
        #expect(try entryNames(dir).count == 1)
    }

    @Test func renewBeforeTheWriteLandsIsNotLost() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        cache.storeData(bytes(100), metadata: metadata(etag: "\"v1\""), for: "a")
        cache.renew(key: "a", metadata: metadata(etag: "\"v2\""))
        #expect(cache.cachedData(for: "a")?.metadata.etag == "\"v2\"")
        cache.flushSynchronously()
        #expect(makeCache(dir).cachedData(for: "a")?.metadata.etag == "\"v2\"")
    }

    @Test func aResponseThatCannotBeStoredRemovesTheOutdatedEntry() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir, sizeLimit: 10_000)
        cache.storeData(bytes(100), metadata: metadata(), for: "a")
        cache.storeData(bytes(100), metadata: metadata(), for: "b")
        cache.flushSynchronously()
        cache.storeData(bytes(100), metadata: CacheMetadata(headers: ["Cache-Control": "no-store"], now: clock.now), for: "a")
        cache.storeData(bytes(20_000), metadata: metadata(), for: "b")
        #expect(cache.cachedData(for: "a") == nil)
        #expect(cache.cachedData(for: "b") == nil)
        cache.flushSynchronously()
        #expect(try entryNames(dir).isEmpty)
    }

    @Test func readTouchesTheStampAtMostOnceAnHour() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let t0 = clock.now
        cache.storeData(bytes(100), metadata: metadata(), for: "a")
        cache.flushSynchronously()
        let url = cache.url(for: "a")
        #expect(abs(try modificationDate(url).timeIntervalSince(t0)) < 0.001)
        clock.advance(by: 3599)
        _ = cache.cachedData(for: "a")
        #expect(abs(try modificationDate(url).timeIntervalSince(t0)) < 0.001)  // under an hour: untouched
        clock.advance(by: 1)
        _ = cache.cachedData(for: "a")
        let t1 = clock.now
        #expect(abs(try modificationDate(url).timeIntervalSince(t1)) < 0.001)  // an hour old: touched
        clock.advance(by: 1800)
        _ = cache.cachedData(for: "a")
        #expect(abs(try modificationDate(url).timeIntervalSince(t1)) < 0.001)
    }

    @Test func sweepDropsExpiredEntriesEvenUnderTheLimit() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir, ttl: 86_400)
        cache.storeData(bytes(100), metadata: metadata(), for: "old")
        cache.flushSynchronously()
        clock.advance(by: 3600)
        cache.storeData(bytes(100), metadata: metadata(), for: "new")
        cache.flushSynchronously()
        clock.advance(by: 86_400 - 3600)  // "old" is exactly one TTL old, "new" is not
        cache.sweep()
        cache.flushSynchronously()
        #expect(try entryNames(dir) == [DataCache.filename(for: "new")])
        #expect(cache.metrics.evictions == 1)
    }

    @Test func sweepRemovesExpiredFirstThenLeastRecentlyUsedDownTo80Percent() throws {
        let dir = try CacheTestDirectory()
        let ttl: TimeInterval = 10 * 86_400
        let writer = makeCache(dir, ttl: ttl)
        writer.storeData(bytes(1000), metadata: metadata(), for: "expired")
        writer.flushSynchronously()
        clock.advance(by: 9 * 86_400)
        let keys = (1...6).map { "k\($0)" }
        for key in keys {
            clock.advance(by: 60)
            writer.storeData(bytes(1000), metadata: metadata(), for: key)
            writer.flushSynchronously()
        }
        clock.advance(by: 3600)
        #expect(writer.cachedData(for: "expired") != nil)  // touched: now the most recently used
        clock.advance(by: 86_400 - 6 * 60)  // "expired" is now past its TTL, the others are not
        let sizes = try keys.map { try fileSize(writer.url(for: $0)) }
        let limit = sizes.dropLast().reduce(0, +) - 1  // six entries do not fit; five almost do
        let sweeper = makeCache(dir, sizeLimit: limit, ttl: ttl)  // sweeps on creation
        let remaining = keys.filter { FileManager.default.fileExists(atPath: sweeper.url(for: $0).path) }
        #expect(!FileManager.default.fileExists(atPath: sweeper.url(for: "expired").path))
        // What is left is the most recently used suffix, within 80% of the limit, and the sweep
        // stopped as soon as it fit.
        let kept = remaining.count
        #expect(kept >= 1 && remaining == Array(keys.suffix(kept)))
        let keptSize = sizes.suffix(kept).reduce(0, +)
        #expect(Double(keptSize) <= Double(limit) * 0.8)
        #expect(Double(keptSize + sizes[keys.count - kept - 1]) > Double(limit) * 0.8)
        #expect(sweeper.metrics.evictions == 1 + (keys.count - kept))
        #expect(sweeper.approximateTotalSize == keptSize)
    }

    @Test func limitHoldsDuringARunOfWritesWithoutASweepPerWrite() throws {
        let dir = try CacheTestDirectory()
        let entrySize = 2000
        let limit = 20 * entrySize
        let cache = makeCache(dir, sizeLimit: limit)
        var maximum = 0
        for i in 0..<200 {
            cache.storeData(bytes(entrySize - 200, seed: UInt8(i % 256)), metadata: metadata(), for: "key-\(i)")
            if i % 10 == 9 {
                cache.flushSynchronously()
                let names = try entryNames(dir)
                let total = try names.reduce(0) { $0 + (try fileSize(dir.url.appendingPathComponent($1))) }
                maximum = max(maximum, total)
                #expect(total <= limit)
                #expect(cache.approximateTotalSize == total)
            }
        }
        let m = cache.metrics
        #expect(m.writes == 200)
        #expect(maximum > limit / 2)  // the cache was really used up to its limit
        #expect(m.sweeps > 1)
        #expect(m.sweeps <= 200 / 3)  // each sweep frees ~20% of the limit (~4 entries)
        // The most recent write survives.
        #expect(cache.cachedData(for: "key-199") != nil)
    }

    @Test func staleTemporaryFilesAreRemovedBySweeps() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let stale = dir.url.appendingPathComponent(".tmp-crashed-writer")
        let fresh = dir.url.appendingPathComponent(".tmp-writer-in-progress")
        try Data([1, 2, 3]).write(to: stale)
        try Data([1, 2, 3]).write(to: fresh)
        try FileManager.default.setAttributes([.modificationDate: clock.now - 7200], ofItemAtPath: stale.path)
        try FileManager.default.setAttributes([.modificationDate: clock.now - 60], ofItemAtPath: fresh.path)
        cache.sweep()
        cache.flushSynchronously()
        #expect(try entryNames(dir) == [".tmp-writer-in-progress"])
    }

    @Test func asyncFlushWaitsForWrites() async throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        for i in 0..<20 { cache.storeData(bytes(100), metadata: metadata(), for: "k\(i)") }
        await cache.flush()
        #expect(try entryNames(dir).count == 20)
    }

    @Test func concurrentCallersSeeOnlyWhatWasStored() async throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        func value(_ key: String, _ version: Int) -> Data { Data((key + "#\(version)").utf8) }
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var rng = SplitMix64(seed: UInt64(task))
                    for _ in 0..<300 {
                        let key = "k\(rng.next() % 20)"
                        switch rng.next() % 4 {
                        case 0: cache.storeData(value(key, Int(rng.next() % 5)), metadata: CacheMetadata(storedAt: Date()), for: key)
                        case 1: if rng.next() % 8 == 0 { cache.removeData(for: key) }
                        default:
                            if let hit = cache.cachedData(for: key) {
                                let text = String(decoding: hit.data, as: UTF8.self)
                                #expect(text.hasPrefix(key + "#"), "\(key) answered \(text)")
                            }
                        }
                    }
                }
            }
        }
        await cache.flush()
        let m = cache.metrics
        #expect(m.lookups == m.hits + m.misses)
        #expect(m.corruptEntriesRemoved == 0 && m.writeFailures == 0)
        #expect(failures.all.isEmpty)
    }

    @Test func keysSeparateIdentityCredentialsAndVariants() {
        let plain = DataCache.key(imageID: "https://x/a.jpg")
        let alice = DataCache.key(imageID: "https://x/a.jpg", credentialFingerprint: "f1")
        let bob = DataCache.key(imageID: "https://x/a.jpg", credentialFingerprint: "f2")
        let thumb = DataCache.key(imageID: "https://x/a.jpg", variant: "resize(100)")
        let other = DataCache.key(imageID: "https://x/b.jpg")
        #expect(Set([plain, alice, bob, thumb, other]).count == 5)
        #expect(DataCache.key(imageID: "https://x/a.jpg", credentialFingerprint: "f1") == alice)
        // An identity crafted to contain another key's suffix does not collide with it.
        let crafted = DataCache.key(imageID: "https://x/a.jpg;cred2:f1;variant-")
        #expect(crafted != alice)
        #expect(DataCache.key(imageID: "a", variant: "") != DataCache.key(imageID: "a"))
    }

    @Test func defaultDirectoryFollowsXDG() {
        let home = URL(fileURLWithPath: "/home/someone", isDirectory: true)
        func directory(_ environment: [String: String]) -> String {
            DataCache.defaultDirectory(name: "img", environment: environment, home: home).path
        }
        #expect(directory(["XDG_CACHE_HOME": "/var/cache/me"]) == "/var/cache/me/lumen/img")
        #expect(directory([:]) == "/home/someone/.cache/lumen/img")
        #expect(directory(["XDG_CACHE_HOME": "relative/path"]) == "/home/someone/.cache/lumen/img")  // XDG: ignore relative
        #expect(directory(["XDG_CACHE_HOME": ""]) == "/home/someone/.cache/lumen/img")
        // `HOME` wins over the password database's home (a sandboxed or `sudo -H` process).
        #expect(directory(["HOME": "/tmp/elsewhere"]) == "/tmp/elsewhere/.cache/lumen/img")
        #expect(directory(["HOME": "/tmp/elsewhere", "XDG_CACHE_HOME": "/var/cache/me"]) == "/var/cache/me/lumen/img")
        #expect(directory(["HOME": "relative"]) == "/home/someone/.cache/lumen/img")
        // The public entry point reads this process's environment and home directory.
        let real = DataCache.defaultDirectory(name: "img").path
        #expect(real.hasSuffix("/lumen/img"))
    }
}
