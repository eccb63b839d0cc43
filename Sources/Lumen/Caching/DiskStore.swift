import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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

    /// Creates the directory (and missing parents) readable by the owner only: entries hold
    /// URLs, which may carry credentials or tokens, and the bytes of private images.
    func createDirectory() throws {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            // Foundation does not always carry the POSIX error (an existing file in the way):
            // the same mkdir made directly reports it.
            let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError
            var code = underlying.flatMap { $0.domain == NSPOSIXErrorDomain ? Int32($0.code) : nil }
            if code == nil, mkdir(directory, 0o700) != 0 { code = errno }
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
        // Owner-only, as the directory (see `createDirectory()`).
        var fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0, errno == ENOENT {
            try createDirectory()
            fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
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
        let fd = POSIXFile.openForReading(path(name))
        if fd < 0 {
            if errno == ENOENT || errno == ENOTDIR { return .missing }
            throw IOError("open \(path(name))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw IOError("fstat \(path(name))") }
        let inode = UInt64(st.st_ino)
        if POSIXFile.isSpecial(st) { return .invalid(.notARegularFile, inode: inode) }
        let size = Int(st.st_size)
        let modified = Self.modificationDate(st)
        let header: EntryFormat.Header
        do {
            header = try readHeader(fd, fileSize: size)
        } catch let invalid as EntryFormat.Invalid {
            return .invalid(invalid, inode: inode)
        }
        // Metadata and payload are adjacent: one read into one block, which the payload's
        // `Data` then owns (no zero-filling, no copy). The metadata is only looked at here.
        let bodyLength = header.metadataLength + header.payloadLength
        guard let block = malloc(max(1, bodyLength)) else { throw IOError("malloc", code: ENOMEM) }
        var ownsBlock = true
        defer { if ownsBlock { free(block) } }
        let body = UnsafeMutableRawBufferPointer(start: block, count: bodyLength)
        let got = try readFully(fd, into: body, at: EntryFormat.headerSize)
        guard got == bodyLength else {
            // Shrunk since `fstat`: replaced files are new inodes, so this one was truncated.
            return .invalid(.sizeMismatch(expected: EntryFormat.headerSize + bodyLength, actual: EntryFormat.headerSize + got), inode: inode)
        }
        let metadataBytes = UnsafeRawBufferPointer(rebasing: body[0..<header.metadataLength])
        let payloadBytes = UnsafeRawBufferPointer(rebasing: body[header.metadataLength...])
        let metadata: CacheMetadata
        do {
            metadata = try EntryFormat.validate(header: header, metadataBytes: metadataBytes, payload: payloadBytes, key: key)
        } catch let invalid {
            return .invalid(invalid, inode: inode)
        }
        let payload: Data
        if header.payloadLength == 0 {
            payload = Data()
        } else {
            ownsBlock = false
            payload = Data(
                bytesNoCopy: block + header.metadataLength, count: header.payloadLength,
                deallocator: .custom { _, _ in free(block) }
            )
        }
        if let now, now.timeIntervalSince(modified) >= touchInterval {
            // Best effort: a failed touch only makes the entry look older to the next sweep.
            try? self.stamp(path: path(name), stamp())
        }
        return .entry(payload, metadata, modified: modified)
    }

    /// Reads and parses the fixed header of the open file `fd` of `fileSize` bytes.
    private func readHeader(_ fd: Int32, fileSize: Int) throws -> EntryFormat.Header {
        var storage: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
        return try withUnsafeMutableBytes(of: &storage) { raw in
            assert(raw.count == EntryFormat.headerSize)
            let got = try readFully(fd, into: raw, at: 0)
            return try EntryFormat.decodeHeader(UnsafeRawBufferPointer(rebasing: raw[0..<got]), fileSize: fileSize)
        }
    }

    /// The fixed header of entry `name` (for sweeps: no payload read).
    func scanEntry(name: String) -> Result<EntryFile, EntryFormat.Invalid>? {
        let fd = POSIXFile.openForReading(path(name))
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        if POSIXFile.isSpecial(st) { return .failure(.notARegularFile) }
        do {
            let header = try readHeader(fd, fileSize: Int(st.st_size))
            return .success(EntryFile(name: name, size: Int(st.st_size), modified: Self.modificationDate(st), storedAt: header.storedAt))
        } catch let invalid as EntryFormat.Invalid {
            return .failure(invalid)
        } catch {
            return nil  // unreadable: the next read decides
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
        let code = errno
        if code == ENOENT || code == ENOTDIR { return false }
        if code == EISDIR || code == EPERM {
            // A directory under an entry's name is no entry, and while it stays, no write of
            // the key can land (a rename onto it fails): removed with what it holds.
            var st = stat()
            if lstat(path(name), &st) == 0, st.st_mode & S_IFMT == S_IFDIR {
                do {
                    try FileManager.default.removeItem(atPath: path(name))
                    return true
                } catch {
                    throw IOError("remove directory \(path(name))", code: EISDIR)
                }
            }
        }
        throw IOError("unlink \(path(name))", code: code)
    }

    /// Where `d_name` starts in a `dirent`.
    private static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!

    /// The names in the directory (empty when it is missing).
    func names() throws -> [String] {
        guard let dir = opendir(directory) else {
            if errno == ENOENT || errno == ENOTDIR { return [] }
            throw IOError("opendir \(directory)")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            // The name is read where it lies. `entry.pointee.d_name` would copy the whole
            // `dirent`, but readdir's records are only `d_reclen` long: the copy read past the
            // end of libc's buffer for the last entry in it (AddressSanitizer, heap-buffer-overflow).
            let name = String(cString: UnsafeRawPointer(entry).advanced(by: Self.nameOffset).assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    func fileStatus(_ path: String) -> (size: Int, modified: Date)? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return (Int(st.st_size), Self.modificationDate(st))
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
        var times = [Self.makeTimespec(date), Self.makeTimespec(date)]
        guard futimens(fd, &times) == 0 else { throw IOError("futimens") }
    }

    func stamp(path: String, _ date: Date) throws {
        var times = [Self.makeTimespec(date), Self.makeTimespec(date)]
        guard utimensat(AT_FDCWD, path, &times, 0) == 0 else { throw IOError("utimensat \(path)") }
    }

    static func makeTimespec(_ date: Date) -> timespec {
        let t = date.timeIntervalSince1970
        let seconds = t.rounded(.down)
        return timespec(tv_sec: Int(seconds), tv_nsec: Int(((t - seconds) * 1e9).rounded(.down)))
    }

    static func modificationDate(_ st: stat) -> Date {
        #if canImport(Darwin)
        let ts = st.st_mtimespec
        #else
        let ts = st.st_mtim
        #endif
        return Date(timeIntervalSince1970: Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9)
    }
}
