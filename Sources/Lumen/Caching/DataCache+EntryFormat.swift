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
///      4     2  format version (1), little-endian
///      6     2  reserved (0)
///      8     4  metadata length m, little-endian
///     12     4  reserved (0)
///     16     8  payload length p, little-endian
///     24     8  storedAt, seconds since 1970 as IEEE 754 bits, little-endian
///     32    32  SHA-256 of (metadata bytes ‖ payload bytes)
///     64     m  metadata: JSON of the key and its CacheMetadata
///   64+m     p  payload: the cached bytes
/// ```
/// The file size must be exactly `64 + m + p`, so a truncated or extended file is rejected
/// before its checksum is even computed; the checksum catches everything else.
enum EntryFormat {
    static let magic: [UInt8] = Array("LMNC".utf8)
    static let version: UInt16 = 1
    static let headerSize = 64
    /// Metadata beyond this is not something Lumen wrote.
    static let maxMetadataLength = 1 << 20

    struct Record: Codable {
        var key: String
        var metadata: CacheMetadata
    }

    struct Header {
        var metadataLength: Int
        var payloadLength: Int
        var storedAt: Date
        var checksum: [UInt8]
    }

    enum Invalid: Error, CustomStringConvertible {
        case tooShort(Int)
        case badMagic
        case unsupportedVersion(UInt16)
        case sizeMismatch(expected: Int, actual: Int)
        case checksumMismatch
        case undecodableMetadata
        case keyMismatch

        var description: String {
            switch self {
            case .tooShort(let n): "file too short for a header (\(n) bytes)"
            case .badMagic: "not a Lumen cache entry (bad magic)"
            case .unsupportedVersion(let v): "unsupported entry version \(v)"
            case .sizeMismatch(let e, let a): "size \(a) bytes, header says \(e) (torn or truncated)"
            case .checksumMismatch: "checksum mismatch"
            case .undecodableMetadata: "metadata is not valid JSON"
            case .keyMismatch: "entry belongs to another key"
            }
        }
    }

    /// The header and metadata bytes for an entry (the payload follows them in the file).
    static func encodePrefix(key: String, metadata: CacheMetadata, payload: Data) -> [UInt8]? {
        guard let json = try? JSONEncoder().encode(Record(key: key, metadata: metadata)),
              json.count <= maxMetadataLength else { return nil }
        var digest = SHA256Digest()
        digest.update(json)
        digest.update(payload)
        guard let checksum = digest.finalize() else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(headerSize + json.count)
        bytes += magic
        append(&bytes, UInt64(version), width: 2)
        append(&bytes, 0, width: 2)
        append(&bytes, UInt64(json.count), width: 4)
        append(&bytes, 0, width: 4)
        append(&bytes, UInt64(payload.count), width: 8)
        append(&bytes, metadata.storedAt.timeIntervalSince1970.bitPattern, width: 8)
        bytes += checksum
        assert(bytes.count == headerSize)
        bytes += json
        return bytes
    }

    /// Parses the fixed header of a file of `fileSize` bytes.
    static func decodeHeader(_ bytes: ArraySlice<UInt8>, fileSize: Int) throws(Invalid) -> Header {
        let bytes = Array(bytes)
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
        return Header(
            metadataLength: Int(metadataLength),
            payloadLength: Int(payloadLength),
            storedAt: storedAt,
            checksum: Array(bytes[32..<64])
        )
    }

    /// Checks the checksum and decodes the metadata.
    static func validate(header: Header, metadataBytes: Data, payload: Data, key: String) throws(Invalid) -> CacheMetadata {
        var digest = SHA256Digest()
        digest.update(metadataBytes)
        digest.update(payload)
        guard digest.finalize() == header.checksum else { throw .checksumMismatch }
        guard let record = try? JSONDecoder().decode(Record.self, from: metadataBytes) else {
            throw .undecodableMetadata
        }
        guard record.key == key else { throw .keyMismatch }
        return record.metadata
    }

    private static func append(_ bytes: inout [UInt8], _ value: UInt64, width: Int) {
        for i in 0..<width { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) }
    }

    private static func read(_ bytes: [UInt8], at offset: Int, width: Int) -> UInt64 {
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
