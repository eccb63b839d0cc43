import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension LoopbackServer {
    /// The server's state and threads. Threads capture the core, never the public
    /// `LoopbackServer`, so that dropping the last reference to the server stops it.
    final class Core: @unchecked Sendable { // reason: all mutable state lives in `state`, guarded by `condition`
        struct State {
            enum Phase { case idle, running, stopping, stopped }
            var phase = Phase.idle
            var listener: Int32 = -1
            var port: UInt16 = 0
            var routes: [String: Route] = [:]
            var heldPaths: Set<String> = []
            var heldBodies: Set<String> = []
            var connections: [Int: Int32] = [:]
            var nextConnectionID = 0
            var liveThreads = 0
            var stats = Statistics()
            var log: [RecordedRequest] = []
            var waiters: [Int: Waiter] = [:]
            var cancelledWaiters: Set<Int> = []
            var nextWaiterID = 0
        }

        struct Waiter {
            var condition: @Sendable (Statistics) -> Bool
            var continuation: CheckedContinuation<Void, any Swift.Error>
        }

        private let condition = NSCondition()
        private var state = State()

        var port: UInt16 { withState { $0.port } }

        // MARK: Locking

        /// Reads the state under the lock.
        func withState<R>(_ body: (State) -> R) -> R {
            condition.lock()
            defer { condition.unlock() }
            return body(state)
        }

        /// Changes the state under the lock, wakes threads waiting on it, and resumes the
        /// waits whose condition now holds (after unlocking).
        @discardableResult
        func update<R>(_ body: (inout State) -> R) -> R {
            condition.lock()
            let result = body(&state)
            let ready = takeSatisfiedWaiters()
            condition.broadcast()
            condition.unlock()
            for continuation in ready { continuation.resume() }
            return result
        }

        func updateRoute(_ path: String, _ body: (inout Route) -> Void) {
            let path = LoopbackServer.normalize(path)
            update { state in
                var route = state.routes[path] ?? Route()
                body(&route)
                state.routes[path] = route
            }
        }

        /// Waits on the condition until `keepWaiting` is false or `deadline` passes, checking
        /// `interrupt` (outside the lock) at least every `poll` seconds. Returns false when
        /// `interrupt` fired.
        func wait(
            until deadline: Date = .distantFuture,
            poll: TimeInterval = 0.02,
            while keepWaiting: (State) -> Bool,
            interrupt: () -> Bool
        ) -> Bool {
            while true {
                condition.lock()
                let waiting = keepWaiting(state) && Date() < deadline
                if waiting {
                    _ = condition.wait(until: min(deadline, Date(timeIntervalSinceNow: poll)))
                }
                condition.unlock()
                if !waiting { return true }
                if interrupt() { return false }
            }
        }

        private func takeSatisfiedWaiters() -> [CheckedContinuation<Void, any Swift.Error>] {
            guard !state.waiters.isEmpty else { return [] }
            var ready: [CheckedContinuation<Void, any Swift.Error>] = []
            for (id, waiter) in state.waiters where waiter.condition(state.stats) {
                ready.append(waiter.continuation)
                state.waiters[id] = nil
            }
            return ready
        }

        // MARK: Waiting from async code

        func waitUntil(_ satisfied: @escaping @Sendable (Statistics) -> Bool) async throws {
            let id = update { state -> Int in
                state.nextWaiterID += 1
                return state.nextWaiterID
            }
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Swift.Error>) in
                    enum Outcome { case wait, ready, cancelled, stopped }
                    let outcome = update { state -> Outcome in
                        if state.cancelledWaiters.remove(id) != nil { return .cancelled }
                        if satisfied(state.stats) { return .ready }
                        if state.phase == .stopping || state.phase == .stopped { return .stopped }
                        state.waiters[id] = Waiter(condition: satisfied, continuation: continuation)
                        return .wait
                    }
                    switch outcome {
                    case .wait: break
                    case .ready: continuation.resume()
                    case .cancelled: continuation.resume(throwing: CancellationError())
                    case .stopped: continuation.resume(throwing: LoopbackServer.Error.stopped)
                    }
                }
            } onCancel: {
                let waiter = update { state -> Waiter? in
                    if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                    state.cancelledWaiters.insert(id)
                    return nil
                }
                waiter?.continuation.resume(throwing: CancellationError())
            }
        }

        // MARK: Start and stop

        func start() throws {
            condition.lock()
            defer { condition.unlock() }
            switch state.phase {
            case .running: return
            case .stopping, .stopped: throw LoopbackServer.Error.stopped
            case .idle: break
            }
            let (listener, port) = try Self.makeListener()
            state.listener = listener
            state.port = port
            state.phase = .running
            state.liveThreads += 1
            let thread = Thread { [self] in
                acceptLoop(listener)
                update { $0.liveThreads -= 1 }
            }
            thread.name = "LoopbackServer.accept"
            thread.start()
        }

        func stop() {
            let waiters = update { state -> [Waiter] in
                guard state.phase == .running || state.phase == .idle else { return [] }
                let wasRunning = state.phase == .running
                state.phase = .stopping
                if wasRunning {
                    // Wakes the blocked accept() (EINVAL on Linux) and every blocked recv().
                    _ = shutdown(state.listener, Int32(SHUT_RDWR))
                    for fd in state.connections.values { _ = shutdown(fd, Int32(SHUT_RDWR)) }
                }
                let waiters = Array(state.waiters.values)
                state.waiters.removeAll()
                return waiters
            }
            for waiter in waiters { waiter.continuation.resume(throwing: LoopbackServer.Error.stopped) }
            // Joins every server thread (they wake on the broadcast or on their socket).
            _ = wait(while: { $0.liveThreads > 0 }, interrupt: { false })
            update { state in
                guard state.phase == .stopping else { return }
                if state.listener >= 0 { _ = close(state.listener) }
                state.listener = -1
                state.phase = .stopped
            }
        }

        var isStopping: Bool { withState { $0.phase != .running } }

        private static func makeListener() throws -> (Int32, UInt16) {
            #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
            #endif
            guard fd >= 0 else { throw LoopbackServer.Error.socket(call: "socket", errno: errno) }
            var yes: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = 0
            address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                let error = errno
                close(fd)
                throw LoopbackServer.Error.socket(call: "bind", errno: error)
            }
            guard listen(fd, 128) == 0 else {
                let error = errno
                close(fd)
                throw LoopbackServer.Error.socket(call: "listen", errno: error)
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            guard named == 0 else {
                let error = errno
                close(fd)
                throw LoopbackServer.Error.socket(call: "getsockname", errno: error)
            }
            return (fd, UInt16(bigEndian: address.sin_port))
        }

        // MARK: Connections

        private func acceptLoop(_ listener: Int32) {
            while true {
                let fd = accept(listener, nil, nil)
                if fd < 0 {
                    let error = errno
                    if isStopping { return }
                    if error == EINTR || error == ECONNABORTED { continue }
                    // Out of descriptors or similar: back off briefly rather than spin.
                    _ = wait(until: Date(timeIntervalSinceNow: 0.05), while: { $0.phase == .running }, interrupt: { false })
                    continue
                }
                var yes: Int32 = 1
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
                let id = update { state -> Int? in
                    guard state.phase == .running else { return nil }
                    state.nextConnectionID += 1
                    let id = state.nextConnectionID
                    state.connections[id] = fd
                    state.liveThreads += 1
                    state.stats.totalConnections += 1
                    state.stats.openConnections += 1
                    state.stats.peakConnections = max(state.stats.peakConnections, state.stats.openConnections)
                    return id
                }
                guard let id else {
                    close(fd)
                    return
                }
                let thread = Thread { [self] in
                    var connection = Connection(fd: fd, core: self)
                    connection.run()
                    update { state in
                        // Removed under the lock before closing, so `stop()` never shuts down
                        // a descriptor number that was closed and reused.
                        state.connections[id] = nil
                        state.stats.openConnections -= 1
                        state.liveThreads -= 1
                    }
                    close(fd)
                }
                thread.name = "LoopbackServer.connection"
                thread.start()
            }
        }
    }
}
