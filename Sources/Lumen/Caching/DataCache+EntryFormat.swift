import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call: the operation and `errno`.
struct IOError: Error {
    var operation: String
    var code: Int32

    init(_ operation: String, code: Int32 = errno) {
        self.operation = operation
        self.code = code
    }

    var message: String { "\(operation): \(String(cString: strerror(code)))" }
}

/// The on-disk layout of one entry, and why a file is not a valid entry.
///
/// ```
/// offset  size  field
///      0     4  magic "LMNC"
///      4     2  format version (2), little-endian
///      6     2  reserved (0)
///      8     4  metadata length m, little-endian
///     12     4  reserved (0)
///     16     8  payload length p, little-endian
///     24     8  storedAt, seconds since 1970 as IEEE 754 bits, little-endian
///     32     8  checksum, little-endian (see below)
///     40    24  reserved (0)
///     64     m  metadata: the key and its CacheMetadata (see below)
///   64+m     p  payload: the cached bytes
/// ```
///
/// The checksum is ``EntryChecksum`` chained over three pieces: the 64-byte header with the
/// checksum field zeroed, then the metadata, then the payload (each piece's result seeds the
/// next; the first seed is 0).
///
/// The metadata is binary, all integers little-endian, each string a 4-byte UTF-8 length and
/// its bytes:
/// ```
/// key                      string
/// storedAt                 8 bytes: seconds since 2001 (Date's reference) as IEEE 754 bits
/// flags                    1 byte: 1 etag, 2 lastModified, 4 contentType, 8 maxAge,
///                          16 no-store, 32 no-cache, 64 immutable; bit 7 must be 0
/// maxAge                   8 bytes, signed, only with flag 8
/// etag, lastModified,      strings, each only with its flag, in this order
/// contentType
/// ```
/// and must be consumed exactly.
///
/// The file size must be exactly `64 + m + p`, so a truncated or extended file is rejected
/// before its checksum is even computed; the checksum catches everything else. Version 1
/// (SHA-256 checksum, JSON metadata) entries are rejected as unsupported: a miss, removed, and
/// fetched again.
enum EntryFormat {
    static let magic: [UInt8] = Array("LMNC".utf8)
    static let version: UInt16 = 2
    static let headerSize = 64
    static let checksumOffset = 32
    /// Metadata beyond this is not something Lumen wrote.
    static let maxMetadataLength = 1 << 20

    struct Header {
        var metadataLength: Int
        var payloadLength: Int
        var storedAt: Date
        var checksum: UInt64
        /// The header's 64 bytes with the checksum field zeroed: the checksum's first piece.
        var checksumSeed: UInt64
    }

    enum Invalid: Error, CustomStringConvertible {
        case tooShort(Int)
        case badMagic
        case unsupportedVersion(UInt16)
        case sizeMismatch(expected: Int, actual: Int)
        case checksumMismatch
        case undecodableMetadata
        case keyMismatch
        /// A FIFO, socket or device under an entry's name: never read (a FIFO's reader would
        /// wait for a writer forever).
        case notARegularFile

        var description: String {
            switch self {
            case .tooShort(let n): "file too short for a header (\(n) bytes)"
            case .badMagic: "not a Lumen cache entry (bad magic)"
            case .unsupportedVersion(let v): "unsupported entry version \(v)"
            case .sizeMismatch(let e, let a): "size \(a) bytes, header says \(e) (torn or truncated)"
            case .checksumMismatch: "checksum mismatch"
            case .undecodableMetadata: "metadata is not a valid record"
            case .keyMismatch: "entry belongs to another key"
            case .notARegularFile: "not a regular file (a FIFO, socket or device)"
            }
        }
    }

    /// The header and metadata bytes for an entry (the payload follows them in the file).
    static func encodePrefix(key: String, metadata: CacheMetadata, payload: Data) -> [UInt8]? {
        var record: [UInt8] = []
        encodeRecord(key: key, metadata: metadata, into: &record)
        guard record.count <= maxMetadataLength else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(headerSize + record.count)
        bytes += magic
        append(&bytes, UInt64(version), width: 2)
        append(&bytes, 0, width: 2)
        append(&bytes, UInt64(record.count), width: 4)
        append(&bytes, 0, width: 4)
        append(&bytes, UInt64(payload.count), width: 8)
        append(&bytes, metadata.storedAt.timeIntervalSince1970.bitPattern, width: 8)
        bytes += repeatElement(0, count: headerSize - bytes.count)
        assert(bytes.count == headerSize)
        var checksum = bytes.withUnsafeBytes { EntryChecksum.hash($0) }
        checksum = record.withUnsafeBytes { EntryChecksum.hash($0, seed: checksum) }
        checksum = payload.withUnsafeBytes { EntryChecksum.hash($0, seed: checksum) }
        for i in 0..<8 { bytes[checksumOffset + i] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(i))) }
        bytes += record
        return bytes
    }

    /// Parses the fixed header of a file of `fileSize` bytes.
    static func decodeHeader(_ bytes: ArraySlice<UInt8>, fileSize: Int) throws(Invalid) -> Header {
        let result = bytes.withUnsafeBytes { raw -> Result<Header, Invalid> in
            do throws(Invalid) {
                return .success(try decodeHeader(raw, fileSize: fileSize))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Parses the fixed header (the first `min(64, file size)` bytes of the file) of a file of
    /// `fileSize` bytes.
    static func decodeHeader(_ bytes: UnsafeRawBufferPointer, fileSize: Int) throws(Invalid) -> Header {
        guard bytes.count >= headerSize, fileSize >= headerSize else { throw .tooShort(fileSize) }
        guard bytes.prefix(4).elementsEqual(magic) else { throw .badMagic }
        let version = UInt16(read(bytes, at: 4, width: 2))
        guard version == Self.version else { throw .unsupportedVersion(version) }
        let metadataLength = read(bytes, at: 8, width: 4)
        let payloadLength = read(bytes, at: 16, width: 8)
        guard metadataLength <= UInt64(maxMetadataLength), payloadLength <= UInt64(Int.max / 2) else {
            throw .sizeMismatch(expected: Int.max, actual: fileSize)
        }
        let expected = headerSize + Int(metadataLength) + Int(payloadLength)
        guard expected == fileSize else { throw .sizeMismatch(expected: expected, actual: fileSize) }
        let storedAt = Date(timeIntervalSince1970: Double(bitPattern: read(bytes, at: 24, width: 8)))
        // The header with its checksum field zeroed, hashed: the checksum's first piece.
        var zeroed: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
        let seed = withUnsafeMutableBytes(of: &zeroed) { copy in
            copy.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[0..<headerSize]))
            for i in 0..<8 { copy[checksumOffset + i] = 0 }
            return EntryChecksum.hash(UnsafeRawBufferPointer(copy))
        }
        return Header(
            metadataLength: Int(metadataLength),
            payloadLength: Int(payloadLength),
            storedAt: storedAt,
            checksum: read(bytes, at: checksumOffset, width: 8),
            checksumSeed: seed
        )
    }

    /// Checks the checksum, decodes the metadata and checks that the entry is `key`'s.
    static func validate(header: Header, metadataBytes: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, key: String) throws(Invalid) -> CacheMetadata {
        var checksum = EntryChecksum.hash(metadataBytes, seed: header.checksumSeed)
        checksum = EntryChecksum.hash(payload, seed: checksum)
        guard checksum == header.checksum else { throw .checksumMismatch }
        return try decodeRecord(metadataBytes, key: key)
    }

    // MARK: The metadata record

    private enum Flag {
        static let etag: UInt8 = 1
        static let lastModified: UInt8 = 2
        static let contentType: UInt8 = 4
        static let maxAge: UInt8 = 8
        static let noStore: UInt8 = 16
        static let noCache: UInt8 = 32
        static let immutable: UInt8 = 64
    }

    static func encodeRecord(key: String, metadata: CacheMetadata, into bytes: inout [UInt8]) {
        func appendString(_ string: String) {
            append(&bytes, UInt64(string.utf8.count), width: 4)
            bytes += string.utf8
        }
        let control = metadata.cacheControl
        var flags: UInt8 = 0
        if metadata.etag != nil { flags |= Flag.etag }
        if metadata.lastModified != nil { flags |= Flag.lastModified }
        if metadata.contentType != nil { flags |= Flag.contentType }
        if control.maxAge != nil { flags |= Flag.maxAge }
        if control.noStore { flags |= Flag.noStore }
        if control.noCache { flags |= Flag.noCache }
        if control.immutable { flags |= Flag.immutable }
        appendString(key)
        append(&bytes, metadata.storedAt.timeIntervalSinceReferenceDate.bitPattern, width: 8)
        bytes.append(flags)
        if let maxAge = control.maxAge { append(&bytes, UInt64(bitPattern: Int64(maxAge)), width: 8) }
        if let etag = metadata.etag { appendString(etag) }
        if let lastModified = metadata.lastModified { appendString(lastModified) }
        if let contentType = metadata.contentType { appendString(contentType) }
    }

    /// Decodes a metadata record, checking first (before building any string) that it is
    /// `key`'s.
    static func decodeRecord(_ bytes: UnsafeRawBufferPointer, key: String) throws(Invalid) -> CacheMetadata {
        var offset = 0
        func integer(_ width: Int) throws(Invalid) -> UInt64 {
            guard bytes.count - offset >= width else { throw .undecodableMetadata }
            defer { offset += width }
            return read(bytes, at: offset, width: width)
        }
        func stringBytes() throws(Invalid) -> UnsafeRawBufferPointer {
            let length = Int(try integer(4))
            guard bytes.count - offset >= length else { throw .undecodableMetadata }
            defer { offset += length }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + length)])
        }
        func string() throws(Invalid) -> String {
            let raw = try stringBytes()
            guard let string = String(validating: raw, as: UTF8.self) else {
                throw .undecodableMetadata
            }
            return string
        }
        let storedKey = try stringBytes()
        guard storedKey.elementsEqual(key.utf8) else { throw .keyMismatch }
        let storedAt = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try integer(8)))
        guard offset < bytes.count else { throw .undecodableMetadata }
        let flags = bytes[offset]
        offset += 1
        guard flags & 0x80 == 0 else { throw .undecodableMetadata }
        var metadata = CacheMetadata(storedAt: storedAt)
        if flags & Flag.maxAge != 0 {
            let value = Int64(bitPattern: try integer(8))
            guard let maxAge = Int(exactly: value) else { throw .undecodableMetadata }
            metadata.cacheControl.maxAge = maxAge
        }
        metadata.cacheControl.noStore = flags & Flag.noStore != 0
        metadata.cacheControl.noCache = flags & Flag.noCache != 0
        metadata.cacheControl.immutable = flags & Flag.immutable != 0
        if flags & Flag.etag != 0 { metadata.etag = try string() }
        if flags & Flag.lastModified != 0 { metadata.lastModified = try string() }
        if flags & Flag.contentType != 0 { metadata.contentType = try string() }
        guard offset == bytes.count else { throw .undecodableMetadata }
        return metadata
    }

    private static func append(_ bytes: inout [UInt8], _ value: UInt64, width: Int) {
        for i in 0..<width { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) }
    }

    private static func read(_ bytes: UnsafeRawBufferPointer, at offset: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for i in 0..<width { value |= UInt64(bytes[offset + i]) << (8 * UInt64(i)) }
        return value
    }
}

/// One entry file as a sweep sees it.
struct EntryFile {
    var name: String
    var size: Int
    /// The LRU stamp.
    var modified: Date
    var storedAt: Date
}

/// Which entries a sweep removes: every expired one (stored at least `ttl` ago), then the
/// least recently used (oldest modification date; name breaks ties) until the rest fit in
/// `fraction × sizeLimit`, but only if they exceed `sizeLimit`. A pure function of its input.
func sweepPlan(
    _ entries: [EntryFile], now: Date, ttl: TimeInterval, sizeLimit: Int, fraction: Double = 0.8
) -> (expired: [EntryFile], evicted: [EntryFile], remainingSize: Int) {
    var expired: [EntryFile] = []
    var live: [EntryFile] = []
    for entry in entries {
        if now.timeIntervalSince(entry.storedAt) >= ttl { expired.append(entry) } else { live.append(entry) }
    }
    var total = live.reduce(0) { $0 + $1.size }
    var evicted: [EntryFile] = []
    if total > sizeLimit {
        let target = Int(Double(sizeLimit) * fraction)
        live.sort { $0.modified != $1.modified ? $0.modified < $1.modified : $0.name < $1.name }
        for entry in live where total > target {
            evicted.append(entry)
            total -= entry.size
        }
    }
    return (expired, evicted, total)
}
