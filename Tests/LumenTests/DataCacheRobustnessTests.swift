import Foundation
import Testing
@testable import Lumen

/// The disk cache on a hostile directory: garbage, truncated and foreign files, a directory
/// deleted or made unwritable mid-run. Never a throw, never wrong bytes; always reported.
@Suite(.timeLimit(.minutes(1)))
struct DataCacheRobustnessTests {
    let clock = CacheTestClock()
    let failures = CacheTestRecorder<DataCache.Failure>()

    func makeCache(_ dir: borrowing CacheTestDirectory) -> DataCache {
        let failures = failures
        let cache = DataCache(name: "test", directory: dir.url, clock: clock.cacheClock) { failures.record($0) }
        cache.flushSynchronously()
        return cache
    }

    func metadata() -> CacheMetadata { CacheMetadata(etag: "\"e\"", storedAt: clock.now) }

    let payload = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) })

    enum Corruption: String, CaseIterable, Sendable {
        case garbage, zeroBytes, truncatedPayload, truncatedHeader, flippedPayloadByte
        case flippedMetadataByte, appendedBytes, otherKeysEntry, futureVersion
    }

    @Test(arguments: Corruption.allCases)
    func corruptEntryIsAMissRemovedAndReported(_ corruption: Corruption) throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        cache.storeData(payload, metadata: metadata(), for: "victim")
        cache.storeData(Data(payload.reversed()), metadata: metadata(), for: "other")
        cache.flushSynchronously()
        let url = cache.url(for: "victim")
        var file = try Data(contentsOf: url)
        switch corruption {
        case .garbage: file = Data((0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 17) })
        case .zeroBytes: file = Data()
        case .truncatedPayload: file = file.prefix(file.count - 1)
        case .truncatedHeader: file = file.prefix(40)
        case .flippedPayloadByte: file[file.count - 100] ^= 0x01
        case .flippedMetadataByte: file[70] ^= 0x01
        case .appendedBytes: file.append(contentsOf: [0, 0, 0, 0])
        case .otherKeysEntry: file = try Data(contentsOf: cache.url(for: "other"))
        case .futureVersion: file[4] = UInt8(EntryFormat.version + 1)
        }
        try file.write(to: url)

        #expect(cache.cachedData(for: "victim") == nil)
        #expect(!FileManager.default.fileExists(atPath: url.path))
        #expect(cache.metrics.corruptEntriesRemoved == 1)
        #expect(cache.metrics.misses == 1)
        let reported = failures.all
        #expect(reported.count == 1)
        #expect(reported.first?.kind == .corruptEntryRemoved)
        #expect(reported.first?.key == "victim")
        // The neighbour is untouched and the key can be stored again.
        #expect(cache.cachedData(for: "other")?.data == Data(payload.reversed()))
        cache.storeData(payload, metadata: metadata(), for: "victim")
        cache.flushSynchronously()
        #expect(cache.cachedData(for: "victim")?.data == payload)
    }

    @Test func sweepRemovesInvalidEntriesAndLeavesForeignFilesAlone() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let garbageName = String(repeating: "ab", count: 32)
        try Data("not an entry".utf8).write(to: dir.url.appendingPathComponent(garbageName))
        try Data("notes".utf8).write(to: dir.url.appendingPathComponent("README"))
        cache.storeData(payload, metadata: metadata(), for: "good")
        cache.sweep()
        cache.flushSynchronously()
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        #expect(names == [DataCache.filename(for: "good"), "README"].sorted())
        #expect(cache.metrics.corruptEntriesRemoved == 1)
        #expect(failures.all.map(\.kind) == [.corruptEntryRemoved])
    }

    @Test func unreadableEntryIsAMissAndReported() throws {
        // A directory where the entry file should be: opening works, reading fails (EISDIR)
        // even for root, and it cannot be unlinked.
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        try FileManager.default.createDirectory(at: cache.url(for: "k"), withIntermediateDirectories: false)
        #expect(cache.cachedData(for: "k") == nil)
        let kinds = failures.all.map(\.kind)
        #expect(kinds.first == .readFailed)
        #expect(failures.all.first?.errorCode == EISDIR)
        #expect(cache.metrics.misses == 1)
    }

    /// A FIFO under an entry's name is no entry: a miss, removed and reported. (Opened with a
    /// blocking `open`, it waited for a writer forever: the read never returned.)
    @Test func fifoUnderAnEntryNameIsAMissNotAHang() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let url = cache.url(for: "k")
        #expect(mkfifo(url.path, 0o600) == 0)

        #expect(cache.cachedData(for: "k") == nil)
        #expect(!FileManager.default.fileExists(atPath: url.path))
        #expect(failures.all.map(\.kind) == [.corruptEntryRemoved])
        #expect(failures.all.first?.reason == "not a regular file (a FIFO, socket or device)")
        cache.storeData(payload, metadata: metadata(), for: "k")
        cache.flushSynchronously()
        #expect(cache.cachedData(for: "k")?.data == payload)
    }

    /// A sweep (one runs when every cache opens its directory) removes a FIFO under an entry's
    /// name instead of waiting on it: the background queue, and every `flush()`, went on
    /// waiting forever.
    @Test func sweepRemovesAFifoUnderAnEntryName() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        let fifo = dir.url.appendingPathComponent(String(repeating: "cd", count: 32))
        #expect(mkfifo(fifo.path, 0o600) == 0)
        cache.storeData(payload, metadata: metadata(), for: "good")

        cache.sweep()
        cache.flushSynchronously()
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        #expect(names == [DataCache.filename(for: "good")])
        #expect(failures.all.map(\.kind) == [.corruptEntryRemoved])
    }

    @Test func deletedDirectoryIsRecreatedByTheNextWrite() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        cache.storeData(payload, metadata: metadata(), for: "a")
        cache.flushSynchronously()
        try FileManager.default.removeItem(at: dir.url)
        #expect(cache.cachedData(for: "a") == nil)  // gone with the directory: a plain miss
        cache.storeData(payload, metadata: metadata(), for: "b")
        cache.flushSynchronously()
        #expect(FileManager.default.fileExists(atPath: cache.url(for: "b").path))
        #expect(cache.cachedData(for: "b")?.data == payload)
        #expect(failures.all.isEmpty)
        #expect(cache.metrics.writeFailures == 0)
    }

    /// Makes `dir` refuse new files and returns how: `"chmod 0555"` when permissions bind (a
    /// non-root user); as root they do not — and the tests run as root here and in CI — so the
    /// directory is replaced by a regular file instead (`"replaced by a file"`: writes fail
    /// with ENOTDIR, not EACCES), which is then the only case this suite exercises. The
    /// real read-only directory under root is covered by
    /// `PipelineCacheFailureTests.aReadOnlyDirectoryFailsNoRequestAndIsReported`, whose probe
    /// drops to an unprivileged uid.
    func makeUnwritable(_ dir: borrowing CacheTestDirectory) throws -> String {
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: dir.path)
        let probe = dir.url.appendingPathComponent("probe-write")
        if FileManager.default.createFile(atPath: probe.path, contents: Data()) {
            // Permissions do not bind (running as root).
            try FileManager.default.removeItem(at: probe)
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: dir.path)
            try FileManager.default.removeItem(at: dir.url)
            try Data("in the way".utf8).write(to: dir.url)
            return "replaced by a file"
        }
        return "chmod 0555"
    }

    /// A refused write is dropped before it is reported: whoever hears of the failure reads a
    /// miss, not the bytes that were never written. (It was reported first and dropped after,
    /// so a pipeline's event hook could still be served those bytes as a disk hit.)
    @Test func aRefusedWriteIsDroppedBeforeItIsReported() throws {
        let dir = try CacheTestDirectory()
        let inTheWay = dir.url.appendingPathComponent("in-the-way")
        try Data("in the way".utf8).write(to: inTheWay)
        let cache = DataCache(name: "test", directory: inTheWay, clock: clock.cacheClock)
        let readableWhenReported = CacheTestRecorder<Bool>()
        let token = cache.failureObservers.add { failure in
            guard failure.kind == .writeFailed, failure.key == "k" else { return }
            readableWhenReported.record(cache.cachedData(for: "k") != nil || cache.containsData(for: "k"))
        }
        defer { cache.failureObservers.remove(token) }
        cache.storeData(payload, metadata: metadata(), for: "k")
        cache.flushSynchronously()
        #expect(readableWhenReported.all == [false])
    }

    @Test func unwritableDirectoryDropsWritesAndReportsThem() throws {
        let dir = try CacheTestDirectory()
        let cache = makeCache(dir)
        cache.storeData(payload, metadata: metadata(), for: "before")
        cache.flushSynchronously()
        let method = try makeUnwritable(dir)

        cache.storeData(payload, metadata: metadata(), for: "after")
        cache.flushSynchronously()
        #expect(cache.cachedData(for: "after") == nil, "method: \(method)")
        #expect(cache.metrics.writeFailures == 1)
        let writeFailures = failures.all.filter { $0.kind == .writeFailed }
        #expect(writeFailures.count == 1)
        #expect(writeFailures.first?.key == "after")
        if method == "chmod 0555" {
            #expect(cache.cachedData(for: "before")?.data == payload)  // still readable
        } else {
            #expect(cache.cachedData(for: "before") == nil)  // never wrong bytes from the file in the way
        }
        // Renewals, removals and sweeps do not throw either.
        cache.renew(key: "before", metadata: metadata())
        cache.removeData(for: "before")
        cache.sweep()
        cache.flushSynchronously()

        // Once the directory is usable again, writes work again.
        if method == "chmod 0555" {
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: dir.path)
        } else {
            try FileManager.default.removeItem(at: dir.url)
        }
        cache.storeData(payload, metadata: metadata(), for: "again")
        cache.flushSynchronously()
        #expect(cache.cachedData(for: "again")?.data == payload)
    }
}
