import CHiredis
import Foundation
import Synchronization

/// Where a Redis server is: `redis://[:PASSWORD@]HOST:PORT[/DB]` (`[::1]` for IPv6). The
/// password is sent with `AUTH` and appears in no description, log line or error.
public struct RedisAddress: Sendable, CustomStringConvertible {
    public let host: String
    public let port: Int
    public let database: Int
    let password: String?

    /// Parses a `redis://` URL.
    /// - Throws: ``ServerError/invalidConfiguration(_:)`` naming what is wrong (never the password).
    public init(_ text: String) throws(ServerError) {
        guard let components = URLComponents(string: text), components.scheme == "redis",
              let host = components.host, !host.isEmpty
        else { throw .invalidConfiguration("--redis takes redis://HOST:PORT[/DB]") }
        let path = components.path.drop(while: { $0 == "/" })
        guard let database = path.isEmpty ? 0 : Int(path), database >= 0 else {
            throw .invalidConfiguration("--redis: the database is a number (redis://HOST:PORT/DB)")
        }
        let port = components.port ?? 6379
        guard (1...65535).contains(port) else { throw .invalidConfiguration("--redis: the port is 1…65535") }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = port
        self.database = database
        self.password = components.password.flatMap { $0.removingPercentEncoding ?? $0 }
    }

    public var description: String {
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        return "redis://\(host):\(port)/\(database)"
    }
}

/// One Redis reply, copied out of hiredis's reply object.
enum RedisReply: Sendable, Equatable {
    case string(Data)
    case integer(Int)
    case null
    case status(String)
    case error(String)
    case array([RedisReply])
}

/// A small, blocking-underneath Redis client: a few worker threads, each owning one hiredis
/// connection, run commands from one queue; callers await the reply. No command ever runs on
/// Swift's cooperative threads, so a slow Redis stalls nothing but its own requests.
///
/// Up and down: a command that cannot be sent or answered within ``timeout`` marks Redis down;
/// while down, commands return `nil` at once (the caller serves without Redis) and a monitor
/// thread reconnects in the background every ``retryInterval``. Each change of state is
/// reported once through `onStateChange`.
final class RedisClient: Sendable {
    let address: RedisAddress
    /// The longest a connect or a command may take, in seconds.
    let timeout: Double
    /// Seconds between reconnection attempts while Redis is down.
    let retryInterval: Double

    private struct Job {
        let arguments: [Data]
        let done: @Sendable (RedisReply?) -> Void
    }
    private struct State {
        var jobs: [Job] = []
        var isUp = false
        /// Bumped on every reconnection, so that workers drop connections made before it.
        var generation = 0
        var isClosed = false
        var isMonitoring = false
    }
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    private let workers: Int
    private let onStateChange: @Sendable (_ isUp: Bool, _ reason: String) -> Void

    /// Connects once before returning (so that a reachable Redis is used from the first
    /// request); when that fails, reconnects in the background.
    init(address: RedisAddress, timeout: Double = 0.5, retryInterval: Double = 0.5, workers: Int = 4,
         onStateChange: @escaping @Sendable (_ isUp: Bool, _ reason: String) -> Void) {
        self.address = address
        self.timeout = timeout
        self.retryInterval = retryInterval
        self.workers = workers
        self.onStateChange = onStateChange
        for index in 0..<workers {
            let thread = Thread { [self] in work() }
            thread.name = "lumen.redis.\(index)"
            thread.start()
        }
        switch probe() {
        case nil: setUp(true, reason: "connected to \(address)")
        case let failure?: setUp(false, reason: failure)
        }
    }

    var isUp: Bool { state.withLock { $0.isUp } }

    /// Runs one command (binary-safe arguments). `nil` when Redis is down or the command
    /// failed on the connection; `.error` when Redis answered with an error.
    func command(_ arguments: [Data]) async -> RedisReply? {
        await withCheckedContinuation { (continuation: CheckedContinuation<RedisReply?, Never>) in
            let accepted = state.withLock { state -> Bool in
                guard state.isUp, !state.isClosed else { return false }
                state.jobs.append(Job(arguments: arguments, done: { continuation.resume(returning: $0) }))
                return true
            }
            if accepted { wake.signal() } else { continuation.resume(returning: nil) }
        }
    }

    func command(_ arguments: String...) async -> RedisReply? {
        await command(arguments.map { Data($0.utf8) })
    }

    /// Stops the workers and the monitor; commands waiting are answered `nil`.
    func close() {
        let waiting = state.withLock { state -> [Job] in
            state.isClosed = true
            defer { state.jobs = [] }
            return state.jobs
        }
        for job in waiting { job.done(nil) }
        for _ in 0..<workers { wake.signal() }
    }

    // MARK: - Workers

    private func work() {
        var connection: UnsafeMutablePointer<redisContext>?
        var connectionGeneration = -1
        defer { if let connection { redisFree(connection) } }
        while true {
            wake.wait()
            let next = state.withLock { state -> (Job, Int)? in
                if state.isClosed || state.jobs.isEmpty { return nil }
                return (state.jobs.removeFirst(), state.generation)
            }
            guard let (job, generation) = next else {
                if state.withLock({ $0.isClosed }) { return }
                continue
            }
            if connection != nil && connectionGeneration != generation {
                redisFree(connection)
                connection = nil
            }
            if connection == nil {
                switch connect() {
                case .success(let made):
                    connection = made
                    connectionGeneration = generation
                case .failure(let reason):
                    job.done(nil)
                    setUp(false, reason: reason)
                    continue
                }
            }
            guard let context = connection else { continue }
            if let reply = Self.run(context, job.arguments) {
                job.done(reply)
            } else {
                let reason = Self.errorText(context)
                redisFree(context)
                connection = nil
                job.done(nil)
                setUp(false, reason: reason)
            }
        }
    }

    private enum Connected { case success(UnsafeMutablePointer<redisContext>), failure(String) }

    /// A new connection, authenticated and on the right database.
    private func connect() -> Connected {
        let tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1_000_000))
        guard let context = redisConnectWithTimeout(address.host, Int32(address.port), tv) else {
            return .failure("cannot allocate a connection")
        }
        if context.pointee.err != 0 {
            let reason = Self.errorText(context)
            redisFree(context)
            return .failure(reason)
        }
        _ = redisSetTimeout(context, tv)
        var setup: [[Data]] = []
        if let password = address.password { setup.append([Data("AUTH".utf8), Data(password.utf8)]) }
        if address.database != 0 { setup.append([Data("SELECT".utf8), Data(String(address.database).utf8)]) }
        setup.append([Data("PING".utf8)])
        for arguments in setup {
            switch Self.run(context, arguments) {
            case nil:
                let reason = Self.errorText(context)
                redisFree(context)
                return .failure(reason)
            case .error(let message)?:
                redisFree(context)
                // AUTH's error names no secret; keep only Redis's first word (WRONGPASS, NOAUTH…).
                return .failure("refused: \(message.split(separator: " ").first.map(String.init) ?? "error")")
            default:
                continue
            }
        }
        return .success(context)
    }

    /// `nil` when Redis is reachable, else why not.
    private func probe() -> String? {
        switch connect() {
        case .success(let context):
            redisFree(context)
            return nil
        case .failure(let reason):
            return reason
        }
    }

    private static func run(_ context: UnsafeMutablePointer<redisContext>, _ arguments: [Data]) -> RedisReply? {
        // hiredis copies the arguments into its output buffer before returning.
        let count = arguments.count
        let pointers = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: count)
        let lengths = UnsafeMutablePointer<Int>.allocate(capacity: count)
        var buffers: [UnsafeMutableRawPointer] = []
        defer {
            pointers.deallocate()
            lengths.deallocate()
            for buffer in buffers { buffer.deallocate() }
        }
        for (index, argument) in arguments.enumerated() {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(1, argument.count), alignment: 1)
            argument.withUnsafeBytes { bytes in
                if let base = bytes.baseAddress { buffer.copyMemory(from: base, byteCount: bytes.count) }
            }
            buffers.append(buffer)
            pointers[index] = UnsafePointer(buffer.assumingMemoryBound(to: CChar.self))
            lengths[index] = argument.count
        }
        guard let raw = redisCommandArgv(context, Int32(count), pointers, lengths) else { return nil }
        defer { freeReplyObject(raw) }
        return reply(raw.assumingMemoryBound(to: redisReply.self))
    }

    private static func reply(_ reply: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let value = reply.pointee
        func text() -> String {
            guard let str = value.str else { return "" }
            return String(decoding: UnsafeRawBufferPointer(start: str, count: value.len), as: UTF8.self)
        }
        switch value.type {
        case REDIS_REPLY_STRING:
            guard let str = value.str else { return .string(Data()) }
            return .string(Data(bytes: str, count: value.len))
        case REDIS_REPLY_INTEGER: return .integer(Int(value.integer))
        case REDIS_REPLY_NIL: return .null
        case REDIS_REPLY_STATUS: return .status(text())
        case REDIS_REPLY_ERROR: return .error(text())
        case REDIS_REPLY_ARRAY:
            var elements: [RedisReply] = []
            for index in 0..<value.elements {
                if let element = value.element[index] { elements.append(self.reply(element)) }
            }
            return .array(elements)
        default: return .error("unknown reply type \(value.type)")
        }
    }

    private static func errorText(_ context: UnsafeMutablePointer<redisContext>) -> String {
        let text = withUnsafeBytes(of: context.pointee.errstr) { bytes in
            String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        return text.isEmpty ? "connection lost" : text
    }

    // MARK: - Up and down

    private func setUp(_ isUp: Bool, reason: String) {
        let (changed, startMonitor) = state.withLock { state -> (Bool, Bool) in
            guard !state.isClosed else { return (false, false) }
            let changed = state.isUp != isUp || (!isUp && state.generation == 0 && !state.isMonitoring)
            if isUp && !state.isUp { state.generation += 1 }
            state.isUp = isUp
            guard !isUp, !state.isMonitoring else { return (changed, false) }
            state.isMonitoring = true
            return (changed, true)
        }
        if changed { onStateChange(isUp, reason) }
        if startMonitor {
            let thread = Thread { [self] in monitor() }
            thread.name = "lumen.redis.monitor"
            thread.start()
        }
    }

    /// Reconnects in the background until Redis answers again (or the client closes).
    private func monitor() {
        while true {
            Thread.sleep(forTimeInterval: retryInterval)
            if state.withLock({ $0.isClosed }) { return }
            if probe() == nil {
                state.withLock { $0.isMonitoring = false }
                setUp(true, reason: "connected to \(address)")
                return
            }
        }
    }
}
