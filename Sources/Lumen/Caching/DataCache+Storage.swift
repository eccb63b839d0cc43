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

/// POSIX file operations on the cache directory. Stateless; every method may run on any
/// thread, and a failure is an ``IOError`` for the caller to report.
struct DiskStore: Sendable {
    let directory: String
    let syncsToDisk: Bool

    static let temporaryPrefix = ".tmp-"

    func path(_ name: String) -> String { directory + "/" + name }

    static func isEntryName(_ name: some StringProtocol) -> Bool {
        name.utf8.count == 64 && name.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    func createDirectory() throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            let code = ((error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError).map { Int32($0.code) }
            throw IOError("mkdir \(directory)", code: code ?? EIO)
        }
    }

    /// Writes a complete entry under a temporary name, stamps it with `now` and renames it
    /// over `name`, so readers (in this process or another) see the old file or the new one,
    /// never a mix. Recreates a missing directory once.
    ///
    /// - Returns: the new file's size and the size of the file it replaced, if any.
    func writeAtomically(name: String, prefix: [UInt8], payload: Data, now: Date) throws -> (size: Int, replaced: Int?) {
        let temporary = path(Self.temporaryPrefix + name + "-" + UUID().uuidString)
        var fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        if fd < 0, errno == ENOENT {
            try createDirectory()
            fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        }
        guard fd >= 0 else { throw IOError("open \(temporary)") }
        do {
            try prefix.withUnsafeBytes { (b) in try writeAll(fd, b) }
            try payload.withUnsafeBytes { (b) in try writeAll(fd, b) }
            if syncsToDisk, fsync(fd) != 0 { throw IOError("fsync") }
            try stamp(fd: fd, now)
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        if close(fd) != 0 {
            let failure = IOError("close \(temporary)")
            unlink(temporary)
            throw failure
        }
        let replaced = fileStatus(path(name))?.size
        guard rename(temporary, path(name)) == 0 else {
            let failure = IOError("rename \(temporary)")
            unlink(temporary)
            throw failure
        }
        return (prefix.count + payload.count, replaced)
    }

    /// Copies the payload of the valid entry `name` into a new file with a new prefix, then
    /// renames it into place (used to renew metadata without the caller re-supplying bytes).
    func rewritePrefix(name: String, key: String, metadata: CacheMetadata, now: Date) throws -> (size: Int, replaced: Int?)? {
        guard case .entry(let payload, _, _)? = try? readEntry(name: name, key: key, now: nil) else { return nil }
        guard let prefix = EntryFormat.encodePrefix(key: key, metadata: metadata, payload: payload) else { return nil }
        return try writeAtomically(name: name, prefix: prefix, payload: payload, now: now)
    }

    enum ReadResult {
        /// A valid entry; `modified` is its LRU stamp before this read.
        case entry(Data, CacheMetadata, modified: Date)
        /// No such file (or no directory).
        case missing
        /// The file exists but is not a valid entry for this key; `inode` identifies it.
        case invalid(EntryFormat.Invalid, inode: UInt64)
    }

    /// Reads and validates the entry `name`, touching its modification date (to `stamp()`) when
    /// it is at least `touchInterval` older than `now`; `now == nil` never touches.
    func readEntry(name: String, key: String, now: Date?, stamp: () -> Date = { Date() }, touchInterval: TimeInterval = 3600) throws -> ReadResult {
        let fd = open(path(name), O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT || errno == ENOTDIR { return .missing }
            throw IOError("open \(path(name))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw IOError("fstat \(path(name))") }
        let inode = UInt64(st.st_ino)
        let size = Int(st.st_size)
        let modified = Self.date(st.st_mtim)
        var headerBytes = [UInt8](repeating: 0, count: EntryFormat.headerSize)
        let got = try headerBytes.withUnsafeMutableBytes { (b) in try readFully(fd, into: b, at: 0) }
        let header: EntryFormat.Header
        do {
            header = try EntryFormat.decodeHeader(headerBytes.prefix(got), fileSize: size)
        } catch let invalid {
            return .invalid(invalid, inode: inode)
        }
        var metadataBytes = Data(count: header.metadataLength)
        var payload = Data(count: header.payloadLength)
        let gotMetadata = try metadataBytes.withUnsafeMutableBytes { (b) in
            try readFully(fd, into: b, at: EntryFormat.headerSize)
        }
        let gotPayload = try payload.withUnsafeMutableBytes { (b) in
            try readFully(fd, into: b, at: EntryFormat.headerSize + header.metadataLength)
        }
        guard gotMetadata == header.metadataLength, gotPayload == header.payloadLength else {
            return .invalid(.sizeMismatch(expected: header.payloadLength, actual: gotPayload), inode: inode)
        }
        let metadata: CacheMetadata
        do {
            metadata = try EntryFormat.validate(header: header, metadataBytes: metadataBytes, payload: payload, key: key)
        } catch let invalid {
            return .invalid(invalid, inode: inode)
        }
        if let now, now.timeIntervalSince(modified) >= touchInterval {
            // Best effort: a failed touch only makes the entry look older to the next sweep.
            try? self.stamp(path: path(name), stamp())
        }
        return .entry(payload, metadata, modified: modified)
    }

    /// The fixed header of entry `name` (for sweeps: no payload read).
    func scanEntry(name: String) -> Result<EntryFile, EntryFormat.Invalid>? {
        let fd = open(path(name), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        var headerBytes = [UInt8](repeating: 0, count: EntryFormat.headerSize)
        guard let got = try? headerBytes.withUnsafeMutableBytes({ (b) in try readFully(fd, into: b, at: 0) }) else {
            return nil
        }
        do {
            let header = try EntryFormat.decodeHeader(headerBytes.prefix(got), fileSize: Int(st.st_size))
            return .success(EntryFile(name: name, size: Int(st.st_size), modified: Self.date(st.st_mtim), storedAt: header.storedAt))
        } catch let invalid {
            return .failure(invalid)
        }
    }

    /// Removes `name` only if it is still the file with `inode` (another process may have
    /// replaced it with a good entry since it was read).
    func removeIfSame(name: String, inode: UInt64) throws {
        var st = stat()
        guard stat(path(name), &st) == 0, UInt64(st.st_ino) == inode else { return }
        try remove(name: name)
    }

    /// Removes `name`; a missing file is not an error.
    @discardableResult
    func remove(name: String) throws -> Bool {
        if unlink(path(name)) == 0 { return true }
        if errno == ENOENT || errno == ENOTDIR { return false }
        throw IOError("unlink \(path(name))")
    }

    /// The names in the directory (empty when it is missing).
    func names() throws -> [String] {
        guard let dir = opendir(directory) else {
            if errno == ENOENT || errno == ENOTDIR { return [] }
            throw IOError("opendir \(directory)")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    func fileStatus(_ path: String) -> (size: Int, modified: Date)? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return (Int(st.st_size), Self.date(st.st_mtim))
    }

    // MARK: Helpers

    private func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw IOError("write")
            }
            offset += n
        }
    }

    /// Reads up to `buffer.count` bytes at `offset`; fewer only at end of file.
    private func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw IOError("read")
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    private func stamp(fd: Int32, _ date: Date) throws {
        var times = [Self.timespec(date), Self.timespec(date)]
        guard futimens(fd, &times) == 0 else { throw IOError("futimens") }
    }

    func stamp(path: String, _ date: Date) throws {
        var times = [Self.timespec(date), Self.timespec(date)]
        guard utimensat(AT_FDCWD, path, &times, 0) == 0 else { throw IOError("utimensat \(path)") }
    }

    static func timespec(_ date: Date) -> Glibc.timespec {
        let t = date.timeIntervalSince1970
        let seconds = t.rounded(.down)
        return Glibc.timespec(tv_sec: Int(seconds), tv_nsec: Int(((t - seconds) * 1e9).rounded(.down)))
    }

    static func date(_ ts: Glibc.timespec) -> Date {
        Date(timeIntervalSince1970: Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9)
    }
}
