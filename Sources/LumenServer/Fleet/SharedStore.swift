import CCrypto
import Foundation
import Synchronization

/// The fleet's shared second level in Redis: encoded results and original bytes, each framed
/// with a digest so that a value that comes back damaged or cut is a miss, and the origin
/// fetch lock that lets one node fetch a new source while the others wait for its bytes.
///
/// Every operation degrades to "not there": with Redis down, slow or full, a node serves from
/// its own caches and the origin, and no request fails because Redis did.
final class SharedStore: Sendable {
    let client: RedisClient
    /// Seconds a stored value lives.
    let ttl: Int
    /// The largest payload stored, in bytes.
    let maximumValueBytes: Int
    /// How long the origin fetch lock is held at most (a node that dies holding it delays the
    /// others by this much), in milliseconds.
    let lockMilliseconds: Int
    private let metrics: MetricsStore
    private let logger: (@Sendable (String) -> Void)?
    /// Whether the last write was refused (Redis full, read-only…), to log each change once.
    private let writesRefused = Mutex(false)

    init(client: RedisClient, ttl: Int, maximumValueBytes: Int, lockMilliseconds: Int,
         metrics: MetricsStore, logger: (@Sendable (String) -> Void)?) {
        self.client = client
        self.ttl = ttl
        self.maximumValueBytes = maximumValueBytes
        self.lockMilliseconds = lockMilliseconds
        self.metrics = metrics
        self.logger = logger
    }

    enum Kind: String { case original, result }

    /// A value as stored: a few named fields and the payload.
    struct Entry: Sendable, Equatable {
        var fields: [String: String]
        var payload: Data
    }

    /// The Redis key for an identity: a digest, so that no source URL (or a credential in it)
    /// is ever visible in Redis's key space.
    static func key(_ kind: Kind, _ identity: String) -> String {
        "lumen:v1:\(kind.rawValue):" + hex(digest(Data(identity.utf8)))
    }

    static func lockKey(_ key: String) -> String { key + ":lock" }

    // MARK: - Values

    func get(_ key: String, kind: Kind) async -> Entry? {
        guard let reply = await client.command([Data("GET".utf8), Data(key.utf8)]) else { return nil }
        switch reply {
        case .string(let data):
            guard let entry = Self.unframe(data) else {
                metrics.state.withLock { $0.redis.damaged += 1 }
                logger?("redis: a damaged \(kind.rawValue) value was ignored and removed")
                _ = await client.command([Data("DEL".utf8), Data(key.utf8)])
                return nil
            }
            metrics.state.withLock { $0.redis.hits[kind.rawValue, default: 0] += 1 }
            return entry
        case .null:
            metrics.state.withLock { $0.redis.misses[kind.rawValue, default: 0] += 1 }
            return nil
        default:
            metrics.state.withLock { $0.redis.errors += 1 }
            return nil
        }
    }

    /// Stores `entry` under `key` with the TTL; too large a payload is not stored.
    @discardableResult
    func put(_ entry: Entry, for key: String) async -> Bool {
        guard entry.payload.count <= maximumValueBytes else { return false }
        let arguments = [Data("SET".utf8), Data(key.utf8), Self.frame(entry), Data("EX".utf8), Data(String(ttl).utf8)]
        guard let reply = await client.command(arguments) else { return false }
        let refused: String? = if case .error(let message) = reply { message } else { nil }
        let changed = writesRefused.withLock { state -> Bool in
            defer { state = refused != nil }
            return state != (refused != nil)
        }
        if let refused {
            metrics.state.withLock { $0.redis.errors += 1 }
            // Redis's first word says why (OOM, READONLY, MISCONF…) and names no value.
            let why = refused.split(separator: " ").first.map(String.init) ?? "error"
            if changed { logger?("redis: refusing writes (\(why)); serving without storing") }
            return false
        }
        if changed { logger?("redis: accepting writes again") }
        metrics.state.withLock { $0.redis.stores += 1 }
        return true
    }

    // MARK: - The origin fetch lock

    enum Lock: Sendable {
        /// This node holds it: fetch, store, then ``release(_:token:)``.
        case acquired(token: String)
        /// Another node stored the value between the caller's miss and this lock (it fetched,
        /// stored and released meanwhile): use it, the lock is released again.
        case stored(Entry)
        /// Another node holds it: wait for its value.
        case heldElsewhere
        /// Redis cannot say: fetch without it.
        case unavailable
    }

    /// Takes the fetch lock for the value under `key` (of `kind`), which the caller just
    /// missed. Once the lock is held the value is looked for again: a node that fetched, stored
    /// and released between that miss and this lock would otherwise be followed by a second
    /// fetch of the same source.
    func acquire(_ lockKey: String, for key: String, kind: Kind) async -> Lock {
        let token = Self.hex(Self.randomBytes(16))
        let reply = await client.command(
            [Data("SET".utf8), Data(lockKey.utf8), Data(token.utf8), Data("NX".utf8), Data("PX".utf8),
             Data(String(lockMilliseconds).utf8)])
        switch reply {
        case .status?:
            guard let entry = await peek(key) else { return .acquired(token: token) }
            metrics.state.withLock { $0.redis.hits[kind.rawValue, default: 0] += 1 }
            await release(lockKey, token: token)
            return .stored(entry)
        case .null?: return .heldElsewhere
        default: return .unavailable
        }
    }

    /// Deletes the lock if this node still holds it (a compare-and-delete script, so that a
    /// lock that expired and was taken by another node is left alone).
    func release(_ lockKey: String, token: String) async {
        let script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
        _ = await client.command([Data("EVAL".utf8), Data(script.utf8), Data("1".utf8), Data(lockKey.utf8), Data(token.utf8)])
    }

    /// Waits for another node's value under `key`, polling while its lock is held, bounded by
    /// the lock's lifetime. `nil` when the holder gave up without storing (or Redis went away):
    /// the caller then fetches for itself.
    func wait(for key: String, kind: Kind, lockKey: String) async throws -> Entry? {
        metrics.state.withLock { $0.redis.lockWaits += 1 }
        let deadline = monotonicNow() + Double(lockMilliseconds) / 1000
        var interval = 0.002
        while monotonicNow() < deadline {
            try await Task.sleep(for: .seconds(interval))
            interval = min(interval * 2, 0.05)
            if let entry = await peek(key) {
                metrics.state.withLock { $0.redis.hits[kind.rawValue, default: 0] += 1 }
                return entry
            }
            switch await client.command([Data("EXISTS".utf8), Data(lockKey.utf8)]) {
            case .integer(1)?: continue
            case .integer?: return await get(key, kind: kind) // released: stored, or given up
            default: return nil
            }
        }
        return nil
    }

    /// A read that counts nothing (the polls of a wait).
    private func peek(_ key: String) async -> Entry? {
        guard case .string(let data)? = await client.command([Data("GET".utf8), Data(key.utf8)]) else { return nil }
        return Self.unframe(data)
    }

    // MARK: - Framing

    /// `LMR1`, the SHA-256 of the body, the body's length (8 bytes, big-endian), then the body:
    /// the fields' length (4 bytes), the fields as `name\tvalue\n` lines, the payload.
    static func frame(_ entry: Entry) -> Data {
        let fields = entry.fields.sorted { $0.key < $1.key }.map { "\($0.key)\t\($0.value)\n" }.joined()
        var body = Data()
        body.append(bigEndian: UInt32(fields.utf8.count))
        body.append(Data(fields.utf8))
        body.append(entry.payload)
        var framed = Data("LMR1".utf8)
        framed.append(digest(body))
        framed.append(bigEndian: UInt64(body.count))
        framed.append(body)
        return framed
    }

    /// The entry in `data`, or `nil` when it is not one whole, intact frame.
    static func unframe(_ data: Data) -> Entry? {
        let bytes = [UInt8](data)
        let header = 4 + 32 + 8
        guard bytes.count >= header + 4, bytes[0..<4].elementsEqual("LMR1".utf8) else { return nil }
        let length = bytes[36..<44].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard length == UInt64(bytes.count - header) else { return nil }
        let body = Data(bytes[header...])
        guard digest(body).elementsEqual(bytes[4..<36]) else { return nil }
        let fieldsLength = Int(bytes[header..<header + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        guard fieldsLength <= bytes.count - header - 4 else { return nil }
        let fieldsStart = header + 4
        let text = String(decoding: bytes[fieldsStart..<fieldsStart + fieldsLength], as: UTF8.self)
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else { return nil }
            fields[String(parts[0])] = String(parts[1])
        }
        return Entry(fields: fields, payload: Data(bytes[(fieldsStart + fieldsLength)...]))
    }

    static func digest(_ data: Data) -> Data {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        data.withUnsafeBytes { bytes in
            _ = SHA256(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, &digest)
        }
        return Data(digest)
    }

    static func hex(_ data: some Sequence<UInt8>) -> String {
        data.map { String(format: "%02x", $0) }.joined()
    }

    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }
}

extension Data {
    mutating func append<T: FixedWidthInteger>(bigEndian value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }
}
