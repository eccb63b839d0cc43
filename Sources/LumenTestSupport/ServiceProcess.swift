import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A real service started for a test or a demo (redis-server, nginx, `lumen serve`): spawned
/// with every signal unblocked and at its default action (Foundation's `Process` passes on the
/// spawning thread's mask, and Dispatch's threads block SIGTERM, so a service started from one
/// would never see its stop signal), its output read line by line. Ready is a line the
/// service prints, never a sleep.
public final class ServiceProcess: Sendable {
    public let pid: pid_t
    public let name: String
    private let output: Int32
    private let state = Mutex((lines: [String](), exited: false, status: Int32(0)))
    private let changed = NSCondition()

    /// Starts `executable` (a path, or a name looked up in the usual system directories) with
    /// `arguments` and extra `environment` entries, in this process's working directory (give
    /// services absolute paths).
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        guard let path = executable.contains("/") ? executable : Self.find(executable) else {
            throw ServiceProcessError.missing(executable)
        }
        name = (path as NSString).lastPathComponent
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw ServiceProcessError.spawn(name, errno) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addclose(&actions, fds[1])
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, path, &actions, &attributes, argv, envp)
        close(fds[1])
        guard result == 0 else {
            close(fds[0])
            throw ServiceProcessError.spawn(name, result)
        }
        pid = child
        output = fds[0]
        let reader = Thread { [self] in readOutput() }
        reader.name = "lumen.service.\(name)"
        reader.start()
    }

    /// Waits until a line of output contains `text` (or the process exits: then throws).
    public func waitForLine(containing text: String) throws {
        changed.lock()
        defer { changed.unlock() }
        while true {
            let (found, exited) = state.withLock { state in (state.lines.contains { $0.contains(text) }, state.exited) }
            if found { return }
            if exited { throw ServiceProcessError.exited(name, outputText) }
            changed.wait()
        }
    }

    /// Everything it printed so far.
    public var outputText: String { state.withLock { $0.lines.joined(separator: "\n") } }

    public var isRunning: Bool { !state.withLock { $0.exited } }

    /// Sends `signal` and waits for the process to exit; returns its wait status.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM) -> Int32 {
        if isRunning { kill(pid, signal) }
        return waitForExit()
    }

    /// Waits for the process to exit; returns its wait status.
    @discardableResult
    public func waitForExit() -> Int32 {
        changed.lock()
        defer { changed.unlock() }
        while isRunning { changed.wait() }
        return state.withLock { $0.status }
    }

    deinit {
        if isRunning { kill(pid, SIGKILL) }
    }

    private func readOutput() {
        var pending = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(output, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            pending.append(contentsOf: buffer[0..<n])
            var lines: [String] = []
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                pending = Data(pending[pending.index(after: newline)...])
            }
            if !lines.isEmpty {
                state.withLock { state in
                    state.lines.append(contentsOf: lines)
                    if state.lines.count > 10_000 { state.lines.removeFirst(state.lines.count - 10_000) }
                }
                changed.lock()
                changed.broadcast()
                changed.unlock()
            }
        }
        close(output)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        state.withLock { state in
            if !pending.isEmpty { state.lines.append(String(decoding: pending, as: UTF8.self)) }
            state.exited = true
            state.status = status
        }
        changed.lock()
        changed.broadcast()
        changed.unlock()
    }

    /// `name` in /usr/bin, /usr/sbin, /usr/local/bin or /usr/local/sbin.
    public static func find(_ name: String) -> String? {
        for directory in ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"] {
            let path = directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    /// A port free on 127.0.0.1 right now (bound and released; the service binds it next).
    public static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

public enum ServiceProcessError: Error, CustomStringConvertible {
    case missing(String)
    case spawn(String, Int32)
    case exited(String, String)

    public var description: String {
        switch self {
        case .missing(let name): "\(name) is not installed (scripts/install-deps.sh installs it)"
        case .spawn(let name, let code): "cannot start \(name): \(String(cString: strerror(code)))"
        case .exited(let name, let output): "\(name) exited before it was ready:\n\(output)"
        }
    }
}
