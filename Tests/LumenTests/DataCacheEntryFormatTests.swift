import Foundation
import Testing
@testable import Lumen
import LumenTestSupport

/// The entry file layout (format version 2), byte by byte, and its checksum.
@Suite(.timeLimit(.minutes(1)))
struct DataCacheEntryFormatTests {
    func integer(_ bytes: some Collection<UInt8>) -> UInt64 {
        bytes.enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
    }

    /// The checksum as its documentation states it, written plainly (byte by byte, no unsafe
    /// loads) to catch endianness, alignment and tail mistakes in the fast one.
    func referenceChecksum(_ bytes: [UInt8], seed: UInt64) -> UInt64 {
        let k1: UInt64 = 0x9e37_79b9_7f4a_7c15, k2: UInt64 = 0xbf58_476d_1ce4_e5b9, k3: UInt64 = 0x94d0_49bb_1331_11eb
        func rotl(_ x: UInt64, _ r: UInt64) -> UInt64 { (x << r) | (x >> (64 - r)) }
        func step(_ s: UInt64, _ w: UInt64) -> UInt64 { rotl(s &+ w &* k2, 31) &* k1 }
        func word(_ at: Int) -> UInt64 { integer(bytes[at..<min(at + 8, bytes.count)]) }
        var h: UInt64
        var offset = 0
        if bytes.count >= 32 {
            var lanes = [seed &+ k1 &+ k2, seed &+ k2, seed, seed &- k1]
            while offset + 32 <= bytes.count {
                for lane in 0..<4 { lanes[lane] = step(lanes[lane], word(offset + 8 * lane)) }
                offset += 32
            }
            h = rotl(lanes[0], 1) &+ rotl(lanes[1], 7) &+ rotl(lanes[2], 12) &+ rotl(lanes[3], 18)
        } else {
            h = seed &+ k3
        }
        h &+= UInt64(bytes.count)
        while offset + 8 <= bytes.count {
            h = rotl(h ^ step(0, word(offset)), 27) &* k1 &+ k3
            offset += 8
        }
        if offset < bytes.count { h = rotl(h ^ step(0, word(offset)), 23) &* k2 &+ k1 }
        h = (h ^ (h >> 30)) &* k2
        h = (h ^ (h >> 27)) &* k3
        return h ^ (h >> 31)
    }

    @Test func headerFieldsAreWhereTheLayoutSays() throws {
        let storedAt = Date(timeIntervalSince1970: 1_800_000_000.5)
        let payload = Data([1, 2, 3, 4, 5])
        let prefix = try #require(EntryFormat.encodePrefix(key: "k", metadata: CacheMetadata(storedAt: storedAt), payload: payload))
        #expect(Array(prefix[0..<4]) == Array("LMNC".utf8))
        #expect(prefix[4] == 2 && prefix[5] == 0)
        #expect(prefix[6] == 0 && prefix[7] == 0)
        let metadataLength = Int(integer(prefix[8..<12]))
        #expect(metadataLength == prefix.count - 64)
        #expect(prefix[12..<16].allSatisfy { $0 == 0 })
        #expect(prefix[16] == 5 && prefix[17..<24].allSatisfy { $0 == 0 })
        #expect(Double(bitPattern: integer(prefix[24..<32])) == storedAt.timeIntervalSince1970)
        #expect(prefix[40..<64].allSatisfy { $0 == 0 })
        // The checksum chains header (checksum field zeroed), metadata and payload.
        var header = Array(prefix[0..<64])
        for i in 32..<40 { header[i] = 0 }
        var expected = referenceChecksum(header, seed: 0)
        expected = referenceChecksum(Array(prefix[64...]), seed: expected)
        expected = referenceChecksum(Array(payload), seed: expected)
        #expect(integer(prefix[32..<40]) == expected)
        let decoded = try EntryFormat.decodeHeader(prefix.prefix(64), fileSize: prefix.count + payload.count)
        #expect(decoded.payloadLength == 5 && decoded.metadataLength == metadataLength && decoded.storedAt == storedAt)
        #expect(decoded.checksum == expected)
    }

    @Test func metadataRecordIsLaidOutAsDocumented() throws {
        let storedAt = Date(timeIntervalSinceReferenceDate: 800_000_000.25)
        let metadata = CacheMetadata(
            etag: "\"e\"", lastModified: "Tue", cacheControl: CacheControl(maxAge: 60, noStore: false, noCache: true, immutable: true),
            contentType: "image/jpeg", storedAt: storedAt
        )
        let prefix = try #require(EntryFormat.encodePrefix(key: "kéy", metadata: metadata, payload: Data([9])))
        let record = Array(prefix[64...])
        var expected: [UInt8] = [4, 0, 0, 0] + Array("kéy".utf8)
        expected += withUnsafeBytes(of: storedAt.timeIntervalSinceReferenceDate.bitPattern.littleEndian) { Array($0) }
        expected += [1 | 2 | 4 | 8 | 32 | 64]
        expected += [60, 0, 0, 0, 0, 0, 0, 0]
        expected += [3, 0, 0, 0] + Array("\"e\"".utf8)
        expected += [3, 0, 0, 0] + Array("Tue".utf8)
        expected += [10, 0, 0, 0] + Array("image/jpeg".utf8)
        #expect(record == expected)
        let decoded = try record.withUnsafeBytes { try EntryFormat.decodeRecord($0, key: "kéy") }
        #expect(decoded == metadata)

        let bare = try #require(EntryFormat.encodePrefix(key: "k", metadata: CacheMetadata(storedAt: storedAt), payload: Data()))
        #expect(bare.count == 64 + 4 + 1 + 8 + 1 && bare.last == 0)
    }

    @Test(arguments: [
        ("extra byte", [UInt8](repeating: 0, count: 1)),
        ("unknown flag", []),
        ("cut short", []),
        ("invalid UTF-8", []),
    ])
    func malformedRecordsAreRejected(_ name: String, _ extra: [UInt8]) throws {
        let metadata = CacheMetadata(etag: "x", storedAt: Date(timeIntervalSinceReferenceDate: 0))
        let prefix = try #require(EntryFormat.encodePrefix(key: "k", metadata: metadata, payload: Data()))
        var record = Array(prefix[64...]) + extra
        let flagsOffset = 4 + 1 + 8
        switch name {
        case "unknown flag": record[flagsOffset] |= 0x80
        case "cut short": record.removeLast()
        case "invalid UTF-8": record[record.count - 1] = 0xff  // the ETag's only byte
        default: break
        }
        #expect(throws: EntryFormat.Invalid.self) {
            try record.withUnsafeBytes { try EntryFormat.decodeRecord($0, key: "k") }
        }
        // The intact record is fine, and is another key's.
        let intact = Array(prefix[64...])
        let decoded = try intact.withUnsafeBytes { try EntryFormat.decodeRecord($0, key: "k") }
        #expect(decoded == metadata)
        #expect(throws: EntryFormat.Invalid.self) {
            try intact.withUnsafeBytes { try EntryFormat.decodeRecord($0, key: "j") }
        }
    }

    @Test func checksumMatchesItsPlainStatementForEveryLength() {
        var random = SplitMix64(seed: 7)
        let bytes = (0..<200).map { _ in UInt8.random(in: 0...255, using: &random) }
        for length in 0...bytes.count {
            let piece = Array(bytes[0..<length])
            let seed = UInt64(length) &* 0x1234_5678
            let fast = piece.withUnsafeBytes { EntryChecksum.hash($0, seed: seed) }
            #expect(fast == referenceChecksum(piece, seed: seed), "length \(length)")
        }
        // Unaligned starts read the same words.
        let unaligned = bytes.withUnsafeBytes { EntryChecksum.hash(UnsafeRawBufferPointer(rebasing: $0[3..<150])) }
        #expect(unaligned == referenceChecksum(Array(bytes[3..<150]), seed: 0))
    }

    @Test func everySingleBitFlipChangesTheChecksum() {
        var random = SplitMix64(seed: 11)
        let bytes = (0..<301).map { _ in UInt8.random(in: 0...255, using: &random) }
        let original = bytes.withUnsafeBytes { EntryChecksum.hash($0) }
        var seen: Set<UInt64> = [original]
        for bit in 0..<(bytes.count * 8) {
            var flipped = bytes
            flipped[bit / 8] ^= 1 << UInt8(bit % 8)
            seen.insert(flipped.withUnsafeBytes { EntryChecksum.hash($0) })
        }
        // Detected, and no two flips collide either.
        #expect(seen.count == bytes.count * 8 + 1)
        // Zero-padding of the tail is told apart by the length.
        let zeros = (0...16).map { n in [UInt8](repeating: 0, count: n).withUnsafeBytes { EntryChecksum.hash($0) } }
        #expect(Set(zeros).count == zeros.count)
    }

    /// A complete version-1 entry (SHA-256 checksum, JSON metadata), as Lumen wrote them before.
    func versionOneEntry(key: String, metadata: CacheMetadata, payload: Data) throws -> Data {
        struct Record: Codable { var key: String; var metadata: CacheMetadata }
        let json = try JSONEncoder().encode(Record(key: key, metadata: metadata))
        var digest = SHA256Digest()
        digest.update(json)
        digest.update(payload)
        let finalized = digest.finalize()
        let checksum = try #require(finalized)
        var bytes = Array("LMNC".utf8) + [1, 0, 0, 0]
        bytes += withUnsafeBytes(of: UInt32(json.count).littleEndian) { Array($0) } + [0, 0, 0, 0]
        bytes += withUnsafeBytes(of: UInt64(payload.count).littleEndian) { Array($0) }
        bytes += withUnsafeBytes(of: metadata.storedAt.timeIntervalSince1970.bitPattern.littleEndian) { Array($0) }
        bytes += checksum
        return Data(bytes) + json + payload
    }

    @Test func versionOneEntriesAreMissesRemovedAndStoredAgain() throws {
        let dir = try CacheTestDirectory()
        let clock = CacheTestClock()
        let failures = CacheTestRecorder<DataCache.Failure>()
        let cache = DataCache(name: "test", directory: dir.url, clock: clock.cacheClock) { failures.record($0) }
        cache.flushSynchronously()
        let payload = Data((0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        let file = try versionOneEntry(key: "old", metadata: CacheMetadata(storedAt: clock.now), payload: payload)
        try file.write(to: cache.url(for: "old"))

        #expect(cache.cachedData(for: "old") == nil)
        #expect(!FileManager.default.fileExists(atPath: cache.url(for: "old").path))
        #expect(failures.all.map(\.kind) == [.corruptEntryRemoved])
        #expect(failures.all.first?.reason.contains("version 1") == true)

        cache.storeData(payload, metadata: CacheMetadata(storedAt: clock.now), for: "old")
        cache.flushSynchronously()
        let stored = try Data(contentsOf: cache.url(for: "old"))
        #expect(stored[4] == 2)
        #expect(cache.cachedData(for: "old")?.data == payload)
    }

    @Test func sweepRemovesVersionOneEntries() throws {
        let dir = try CacheTestDirectory()
        let clock = CacheTestClock()
        let cache = DataCache(name: "test", directory: dir.url, clock: clock.cacheClock)
        cache.flushSynchronously()
        try versionOneEntry(key: "old", metadata: CacheMetadata(storedAt: clock.now), payload: Data([1, 2, 3]))
            .write(to: cache.url(for: "old"))
        cache.storeData(Data([4, 5, 6]), metadata: CacheMetadata(storedAt: clock.now), for: "new")
        cache.sweep()
        cache.flushSynchronously()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == [DataCache.filename(for: "new")])
        #expect(cache.metrics.corruptEntriesRemoved == 1)
    }
}
