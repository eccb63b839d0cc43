import Foundation
import Synchronization

/// A disk cache of bytes with their response metadata, looked up by string key.
///
/// Implementations must be thread-safe and must never throw at the caller: a disk problem is
/// a miss (on read) or a dropped write, reported out of band.
public protocol DataCaching: Sendable {
    /// The bytes and metadata stored for `key`, or `nil` on a miss. Stale entries are returned
    /// too: freshness is the caller's decision (``CacheMetadata/isFresh(now:ttl:respectsHTTPCaching:heuristicFraction:maximumHeuristicLifetime:)``).
    func cachedData(for key: String) -> (data: Data, metadata: CacheMetadata)?
    /// Whether an entry exists for `key` (without validating or reading it).
    func containsData(for key: String) -> Bool
    /// Stores `data` with `metadata` for `key`, replacing any previous entry.
    func storeData(_ data: Data, metadata: CacheMetadata, for key: String)
    /// Replaces the metadata of the entry for `key` (after a `304 Not Modified`), keeping its
    /// bytes; nothing happens when there is no valid entry.
    func renew(key: String, metadata: CacheMetadata)
    /// Removes the entry for `key`, if any.
    func removeData(for key: String)
    /// Removes every entry.
    func removeAll()
}

/// Lumen's disk cache: one file per key in a directory, the filesystem as the index.
///
/// - **Names.** A key's file is named by the lowercase hex SHA-256 of the key's UTF-8 bytes
///   (libcrypto).
/// - **Format.** Each file holds a header (magic, version, lengths, the date stored, a 64-bit
///   checksum of header, metadata and bytes), the metadata (binary) and then the bytes. A file
///   whose size, header, version or checksum does not match is never served: the read is a
///   miss, the file is removed and a ``Failure/Kind/corruptEntryRemoved`` failure is reported.
///   The checksum detects corruption (any flipped bit or byte always, other damage with
///   probability about 1 − 2⁻⁶⁴), not tampering: anyone who can write to the directory can
///   already replace entries.
/// - **Atomic writes.** An entry is written to a temporary file in the same directory and
///   renamed over the old one, so a reader (in this process or another sharing the directory)
///   sees the old entry or the new one, never a torn file.
/// - **LRU.** A file's modification date is its LRU stamp: set when written, touched on read
///   when it is at least an hour old (so reads rarely write).
/// - **Budgets.** A sweep removes entries stored at least ``ttl`` ago, then, if the rest exceed
///   ``sizeLimit``, the least recently used down to 80% of it. An approximate running total
///   (from a scan at creation, then updated by each write and removal) triggers a sweep when a
///   write crosses the limit, so the limit holds while the program runs without a sweep per
///   write. Other processes' writes are only seen by the next full sweep.
/// - **Threads.** Reads run on the caller's thread (the pipeline calls them off its graph
///   owner). Writes, removals, renewals and sweeps are queued on a serial background queue
///   whose thread runs at the lowest CPU priority (nice 19 on Linux), so that on a busy machine
///   they wait for CPU time nothing else wants instead of slowing down decoding; more than
///   64 MB of writes waiting run at normal priority. Until an operation lands, reads in this
///   process already see its effect. ``flush()`` (or, from synchronous code, ``flushSynchronously()``)
///   waits for the queue; call it before the program exits to keep what is still queued (at exit, the write
///   running finishes and the rest are dropped).
/// - **Failures.** A missing directory is recreated by the next write. A read-only, full or
///   otherwise unusable directory drops the write and reports it through `onFailure`; nothing
///   is thrown at the caller.
public final class DataCache: DataCaching {
    /// A problem the cache handled by itself (the caller saw a miss or a dropped write).
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        /// The operation that failed.
        public enum Kind: Sendable, Hashable {
            /// A write was dropped (read-only or full directory, directory replaced by a file…).
            case writeFailed
            /// An entry could not be read; the read was a miss.
            case readFailed
            /// An entry was not a valid entry for its key (garbage, truncated, torn,
            /// checksum mismatch) and was removed; the read was a miss.
            case corruptEntryRemoved
            /// A file could not be removed (an explicit removal, an eviction or a corrupt entry).
            case removeFailed
            /// The directory could not be listed for a sweep.
            case sweepFailed
        }

        /// What went wrong.
        public var kind: Kind
        /// The key involved, when there is one.
        public var key: String?
        /// The file or directory involved.
        public var path: String
        /// `errno` of the failed system call, when there was one.
        public var errorCode: Int32?
        /// A human-readable reason.
        public var reason: String

        /// The kind, the path, the key when there is one, and the reason, on one line.
        public var description: String {
            "DataCache \(kind) at \(path)\(key.map { " (key \($0))" } ?? ""): \(reason)"
        }
    }

    /// Counters since the cache was created.
    public struct Metrics: Sendable, Hashable {
        /// Calls to ``cachedData(for:)``.
        public var lookups = 0
        /// Lookups answered with bytes.
        public var hits = 0
        /// Lookups answered with `nil` (including corrupt entries).
        public var misses = 0
        /// Entries written to disk.
        public var writes = 0
        /// Writes (and renewals) dropped because the disk refused them.
        public var writeFailures = 0
        /// Entries removed by sweeps (expired or over the size limit).
        public var evictions = 0
        /// Invalid entries found and removed (on read or during a sweep).
        public var corruptEntriesRemoved = 0
        /// Entries whose metadata was renewed.
        public var renewals = 0
        /// Sweeps run.
        public var sweeps = 0
    }

    /// The directory holding the entries.
    public let directory: URL
    /// The size budget in bytes (headers included).
    public let sizeLimit: Int
    /// How long an entry is kept after it was stored (or renewed), in seconds.
    public let ttl: TimeInterval
    /// The time source for stamps, TTL and sweeps.
    public let clock: CacheClock

    let store: DiskStore
    let queue: BackgroundQueue
    let onFailure: (@Sendable (Failure) -> Void)?
    let failureObservers = FailureObservers()
    let state = Mutex(State())

    /// An operation queued but not yet on disk; reads in this process see it already.
    enum Pending {
        case store(Data, CacheMetadata)
        case renew(CacheMetadata)
        case remove
    }

    struct State {
        var pending: [String: (operation: Pending, generation: Int)] = [:]
        var generation = 0
        /// Queued `removeAll()` calls not yet done: until then, files on disk do not answer.
        var pendingRemoveAll = 0
        /// Bytes on disk as far as this process knows; `nil` until the first scan.
        var totalSize: Int?
        var metrics = Metrics()
        /// The last LRU stamp given out (see ``nextStamp()``).
        var lastStamp = Date.distantPast
    }

    /// The default directory for a cache named `name`: `$XDG_CACHE_HOME/lumen/<name>` when
    /// `XDG_CACHE_HOME` is an absolute path, else `$HOME/.cache/lumen/<name>` (`HOME` when it is
    /// an absolute path, else the user's home directory from the password database).
    public static func defaultDirectory(name: String) -> URL {
        defaultDirectory(name: name, environment: ProcessInfo.processInfo.environment, home: FileManager.default.homeDirectoryForCurrentUser)
    }

    /// `home`: the user's home directory from the password database, used when `HOME` is not
    /// an absolute path.
    static func defaultDirectory(name: String, environment: [String: String], home: URL) -> URL {
        let base: URL
        if let xdg = environment["XDG_CACHE_HOME"], xdg.hasPrefix("/") {
            base = URL(fileURLWithPath: xdg, isDirectory: true)
        } else if let homeVariable = environment["HOME"], homeVariable.hasPrefix("/") {
            base = URL(fileURLWithPath: homeVariable, isDirectory: true).appendingPathComponent(".cache", isDirectory: true)
        } else {
            base = home.appendingPathComponent(".cache", isDirectory: true)
        }
        return base.appendingPathComponent("lumen", isDirectory: true).appendingPathComponent(name, isDirectory: true)
    }

    /// Creates a disk cache and starts a background scan of its directory (which also sweeps).
    ///
    /// - Parameters:
    ///   - name: the cache's name: its folder under the default directory; a single path
    ///     component.
    ///   - directory: a directory to use instead of the default.
    ///   - sizeLimit: the size budget in bytes (default 150 MB).
    ///   - ttl: how long entries are kept after they are stored, in seconds (default 7 days).
    ///   - clock: the time source (default wall-clock time).
    ///   - syncsToDisk: `fsync` each entry before renaming it into place (default `false`:
    ///     atomic against other processes, not against power loss).
    ///   - onFailure: called, on an arbitrary thread and never under a lock, for each problem
    ///     the cache absorbed.
    public init(
        name: String,
        directory: URL? = nil,
        sizeLimit: Int = 150 * 1024 * 1024,
        ttl: TimeInterval = 7 * 24 * 3600,
        clock: CacheClock = .system,
        syncsToDisk: Bool = false,
        onFailure: (@Sendable (Failure) -> Void)? = nil
    ) {
        precondition(!name.isEmpty && !name.contains("/") && name != "." && name != "..", "DataCache: name must be one path component, got \"\(name)\"")
        precondition(sizeLimit > 0, "DataCache: sizeLimit must be positive")
        precondition(ttl > 0, "DataCache: ttl must be positive")
        let directory = directory ?? Self.defaultDirectory(name: name)
        self.directory = directory
        self.sizeLimit = sizeLimit
        self.ttl = ttl
        self.clock = clock
        self.onFailure = onFailure
        self.store = DiskStore(directory: directory.path, syncsToDisk: syncsToDisk)
        // OpenSSL sets itself up (and registers its clean-up at exit) on first use: done here,
        // before the queue's own exit handler, which must run while the writes' libraries
        // still stand (see `BackgroundQueue`).
        _ = Self.filename(for: name)
        self.queue = BackgroundQueue(name: "lumen.data-cache.\(name)")
        queue.async { [self] in
            do {
                try store.createDirectory()
            } catch {
                report(.writeFailed, key: nil, path: store.directory, error)
            }
            performSweep()
        }
    }

    // MARK: Names

    /// The file name for `key`: the lowercase hex SHA-256 of its UTF-8 bytes.
    public static func filename(for key: String) -> String {
        SHA256Digest.hexHash(key)
    }

    /// The file that holds (or would hold) the entry for `key`.
    public func url(for key: String) -> URL {
        directory.appendingPathComponent(Self.filename(for: key), isDirectory: false)
    }

    // MARK: Reading

    /// The bytes and metadata stored for `key`, or `nil` on a miss.
    ///
    /// Reads the file on the caller's thread and validates it completely (size, header,
    /// checksum, key) before answering; an invalid file is a miss, is removed and is reported.
    /// Touches the file's LRU stamp when it is at least an hour old. Stale entries are returned:
    /// check ``CacheMetadata/isFresh(now:ttl:respectsHTTPCaching:heuristicFraction:maximumHeuristicLifetime:)`` with this cache's ``ttl``.
    public func cachedData(for key: String) -> (data: Data, metadata: CacheMetadata)? {
        enum Source { case pending(Data, CacheMetadata), miss, disk(renewed: CacheMetadata?) }
        let source: Source = state.withLock {
            $0.metrics.lookups += 1
            switch $0.pending[key]?.operation {
            case .store(let data, let metadata)?: return .pending(data, metadata)
            case .remove?: return .miss
            case .renew(let metadata)?: return $0.pendingRemoveAll > 0 ? .miss : .disk(renewed: metadata)
            case nil: return $0.pendingRemoveAll > 0 ? .miss : .disk(renewed: nil)
            }
        }
        let result: (Data, CacheMetadata)?
        switch source {
        case .pending(let data, let metadata):
            result = (data, metadata)
        case .miss:
            result = nil
        case .disk(let renewed):
            result = readFromDisk(key).map { ($0.0, renewed ?? $0.1) }
        }
        state.withLock {
            if result == nil { $0.metrics.misses += 1 } else { $0.metrics.hits += 1 }
        }
        return result
    }

    func readFromDisk(_ key: String) -> (Data, CacheMetadata)? {
        let name = Self.filename(for: key)
        do {
            switch try store.readEntry(name: name, key: key, now: clock.now, stamp: nextStamp) {
            case .entry(let data, let metadata, _):
                return (data, metadata)
            case .missing:
                return nil
            case .invalid(let reason, let inode):
                removeCorrupt(name: name, inode: inode, key: key, reason: reason)
                return nil
            }
        } catch {
            // Unreadable (permissions, I/O error): a miss; try to remove it so it is fetched again.
            report(.readFailed, key: key, path: store.path(name), error)
            do {
                if try store.remove(name: name) { adjustTotal(by: nil) }
            } catch {
                report(.removeFailed, key: key, path: store.path(name), error)
            }
            return nil
        }
    }

    func removeCorrupt(name: String, inode: UInt64, key: String?, reason: EntryFormat.Invalid) {
        do {
            try store.removeIfSame(name: name, inode: inode)
            state.withLock { $0.metrics.corruptEntriesRemoved += 1 }
            adjustTotal(by: nil)
            report(.corruptEntryRemoved, key: key, path: store.path(name), reason: reason.description, code: nil)
        } catch {
            report(.removeFailed, key: key, path: store.path(name), error)
        }
    }

    /// Whether an entry for `key` exists (pending in this process or on disk). Does not read or
    /// validate the file: a later ``cachedData(for:)`` may still miss.
    public func containsData(for key: String) -> Bool {
        let answer: Bool? = state.withLock {
            switch $0.pending[key]?.operation {
            case .store?: return true
            case .remove?: return false
            case .renew?, nil: return $0.pendingRemoveAll > 0 ? false : nil
            }
        }
        if let answer { return answer }
        return access(store.path(Self.filename(for: key)), F_OK) == 0
    }

    // MARK: Writing

    /// Stores `data` with `metadata` for `key`, replacing any previous entry.
    ///
    /// Returns at once; the file is written on the background queue (``flush()`` waits
    /// for it), and reads in this process see the new entry meanwhile. Not written: metadata
    /// that says `no-store`, and entries larger than ``sizeLimit`` (those remove the previous
    /// entry for `key`, now outdated). A write the disk refuses is dropped and reported.
    public func storeData(_ data: Data, metadata: CacheMetadata, for key: String) {
        guard metadata.isStorable, EntryFormat.headerSize + data.count <= sizeLimit else {
            // A newer response that cannot be kept still makes the stored one outdated.
            removeData(for: key)
            return
        }
        let generation = enqueue(key, .store(data, metadata))
        queue.async(cost: data.count) { [self] in
            performStore(key: key, data: data, metadata: metadata, generation: generation)
        }
    }

    /// Replaces the metadata of the entry for `key` (after a `304 Not Modified`: typically
    /// ``CacheMetadata/renewed(with:now:)``), keeping its bytes.
    ///
    /// The renewal is atomic like a write: the stored bytes are copied with the new header into
    /// a temporary file renamed over the old one. Nothing happens when no valid entry exists.
    public func renew(key: String, metadata: CacheMetadata) {
        let generation: Int = state.withLock {
            $0.generation += 1
            switch $0.pending[key]?.operation {
            case .store(let data, _)?:
                // Not on disk yet: reads see the queued bytes with the new metadata; the
                // renewal job below runs after the write and rewrites its header.
                $0.pending[key] = (.store(data, metadata), $0.generation)
            case .remove?:
                break  // nothing left to renew
            case .renew?, nil:
                $0.pending[key] = (.renew(metadata), $0.generation)
            }
            return $0.generation
        }
        queue.async { [self] in
            performRenew(key: key, metadata: metadata)
            settle(key, generation)
        }
    }

    /// Removes the entry for `key`. Reads in this process miss at once; the file goes on the
    /// background queue.
    public func removeData(for key: String) {
        let generation = enqueue(key, .remove)
        queue.async { [self] in
            let name = Self.filename(for: key)
            let size = store.fileStatus(store.path(name))?.size
            do {
                if try store.remove(name: name), let size { adjustTotal(by: -size) }
            } catch {
                report(.removeFailed, key: key, path: store.path(name), error)
            }
            settle(key, generation)
        }
    }

    /// Removes every entry. Reads in this process miss at once; the files go on the
    /// background queue. Counters are kept.
    public func removeAll() {
        state.withLock {
            $0.pending.removeAll()
            $0.generation += 1
            $0.pendingRemoveAll += 1
        }
        queue.async { [self] in
            do {
                for name in try store.names() where DiskStore.isEntryName(name) {
                    do {
                        try store.remove(name: name)
                    } catch {
                        report(.removeFailed, key: nil, path: store.path(name), error)
                    }
                }
            } catch {
                report(.sweepFailed, key: nil, path: store.directory, error)
            }
            state.withLock {
                $0.totalSize = 0
                $0.pendingRemoveAll -= 1
            }
        }
    }

    // MARK: Sweeping and waiting

    /// Queues a sweep: expired entries first, then the least recently used down to 80% of
    /// ``sizeLimit`` if the rest exceed it. Stale temporary files (an hour old, left by a
    /// crashed writer) and invalid entries are removed too.
    public func sweep() {
        queue.async { [self] in performSweep() }
    }

    /// Blocks the calling thread until every write, removal, renewal and sweep queued so far
    /// is done; they run at normal priority meanwhile (the writes otherwise run at the
    /// lowest). For synchronous code (a command-line tool's last line, a `deinit`); in async
    /// code, `await` ``flush()`` suspends instead of holding a thread. Never call it from
    /// `onFailure`.
    ///
    /// A name of its own (not a synchronous overload of ``flush()``), so that `flush()` in
    /// async code, top-level code included, is always the suspending one, and a missing
    /// `await` is a compile error instead of a blocked thread.
    public func flushSynchronously() {
        queue.sync {}
    }

    /// Suspends until every write, removal, renewal and sweep queued so far is done; they run
    /// at normal priority meanwhile. Call it before the program exits to keep what is still
    /// queued (``flushSynchronously()`` does the same from synchronous code).
    public func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async(expedited: true) { continuation.resume() }
        }
    }

    /// A snapshot of the counters.
    public var metrics: Metrics { state.withLock { $0.metrics } }

    /// The bytes on disk as far as this process knows (headers included); `nil` before the
    /// first scan.
    public var approximateTotalSize: Int? { state.withLock { $0.totalSize } }
}
