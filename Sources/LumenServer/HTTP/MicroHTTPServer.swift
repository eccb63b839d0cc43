import CLumenHTTPD
import CMicroHTTPD
import Foundation
import Synchronization

/// The HTTP layer on libmicrohttpd: an epoll thread pool whose connections are suspended
/// while the pipeline works and resumed when the answer is ready, so no HTTP thread waits on
/// a download or a decode.
///
/// libmicrohttpd parses and bounds the request (line and headers within `headerMemory`,
/// connections within `maximumConnections`, idle or trickling clients closed after
/// `clientTimeout`); this class turns each request into an ``HTTPRequest`` for its handler.
/// It is an API violation to stop the daemon with a connection suspended, so ``stop()``
/// answers every suspended request first.
final class MicroHTTPServer: HTTPServing, Sendable {
    /// What the C callbacks reach through their context pointer; retained by the daemon
    /// (released once it has stopped).
    private let core: Core
    /// The daemon; `nil` once stopped.
    private let daemon: Mutex<Daemon?>
    let port: Int
    struct Daemon: @unchecked Sendable { let pointer: OpaquePointer } // libmicrohttpd's handle: thread-safe calls only

    /// Starts listening. Throws when the address cannot be used.
    init(settings: HTTPSettings, handler: any HTTPHandling) throws {
        var storage = sockaddr_storage()
        guard Self.socketAddress(host: settings.host, port: settings.port, into: &storage) != nil else {
            throw ServerError.invalidListenAddress("\(settings.host):\(settings.port)")
        }
        let core = Core(handler: handler)
        let context = Unmanaged.passRetained(core).toOpaque()
        let started: OpaquePointer? = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                var s = lumen_httpd_settings(
                    address: address, threads: UInt32(max(1, settings.threads)),
                    connection_limit: UInt32(max(1, settings.maximumConnections)),
                    client_timeout: UInt32(max(0, settings.clientTimeout)),
                    connection_memory_limit: max(4096, settings.headerMemory))
                return lumen_httpd_start(&s, microAccess, context, microCompleted, context)
            }
        }
        guard let started else {
            let code = errno
            Unmanaged<Core>.fromOpaque(context).release()
            throw ServerError.cannotListen("\(settings.host):\(settings.port)", errno: code)
        }
        self.core = core
        self.daemon = Mutex(Daemon(pointer: started))
        self.port = Int(lumen_httpd_port(started))
    }

    var inFlightCount: Int { core.state.withLock { $0.inFlight } }

    func stopAccepting() {
        daemon.withLock { daemon in
            guard let daemon else { return }
            let socket = MHD_quiesce_daemon(daemon.pointer)
            if socket >= 0 { close(socket) }
        }
    }

    func stop() {
        guard let stopped = daemon.withLock({ d -> Daemon? in defer { d = nil }; return d }) else { return }
        core.answerEverySuspended()
        MHD_stop_daemon(stopped.pointer)
        // No callback runs after MHD_stop_daemon returns.
        Unmanaged.passUnretained(core).release()
    }

    deinit { stop() }
}

extension MicroHTTPServer {
    /// One request from its first callback to its completion.
    final class Exchange: Sendable {
        let request: HTTPRequest
        let started: Double
        let connection: Connection
        /// The answer, once there is one.
        let response = Mutex<HTTPResponse?>(nil)
        init(request: HTTPRequest, connection: Connection) {
            self.request = request
            self.connection = connection
            self.started = monotonicNow()
        }
    }

    /// libmicrohttpd's connection handle: used only while the connection is open, which the
    /// library guarantees until the completion callback (a suspended connection never closes).
    struct Connection: @unchecked Sendable { let pointer: OpaquePointer }

    /// The per-daemon state the callbacks share.
    final class Core: Sendable {
    let handler: any HTTPHandling
    init(handler: any HTTPHandling) { self.handler = handler }

    struct State {
        /// Suspended exchanges and the tasks answering them.
        var suspended: [ObjectIdentifier: (exchange: Exchange, task: Task<Void, Never>?)] = [:]
        var inFlight = 0
        var isStopped = false
    }
    let state = Mutex(State())

    /// Cancels what is running and answers every suspended request (the daemon must not
    /// stop with a suspended connection); later answers are dropped.
    func answerEverySuspended() {
        let tasks = state.withLock { $0.suspended.values.compactMap(\.task) }
        tasks.forEach { $0.cancel() }
        state.withLock { state in
            state.isStopped = true
            for (_, entry) in state.suspended {
                entry.exchange.response.withLock { $0 = $0 ?? .error(503, "the server is stopping") }
                MHD_resume_connection(entry.exchange.connection.pointer)
            }
            state.suspended.removeAll()
        }
    }

    // MARK: - Callbacks (on libmicrohttpd's threads)

    func access(
        connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        uploadSize: UnsafeMutablePointer<Int>?, context: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
    ) -> MHD_Result {
        guard let context else { return MHD_Result.NO }
        let bareLF = UnsafeRawPointer(context.pointee) == lumen_httpd_bare_lf_marker()
        guard let raw = context.pointee, !bareLF else {
            // First call: the request line and headers are in.
            let exchange = Exchange(request: makeRequest(connection, url: url, method: method), connection: Connection(pointer: connection))
            context.pointee = Unmanaged.passRetained(exchange).toOpaque()
            state.withLock { $0.inFlight += 1 }
            if bareLF { return queue(.error(400, "the request line ends in a bare LF, not CR LF"), for: exchange) }
            if let refusal = Self.bodyRefusal(exchange.request) {
                return queue(refusal, for: exchange)
            }
            return MHD_Result.YES
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(raw).takeUnretainedValue()
        if let uploadSize, uploadSize.pointee > 0 {
            // A body nobody asked for (announced with neither header): dropped, then refused.
            uploadSize.pointee = 0
            exchange.response.withLock { $0 = $0 ?? .error(400, "a GET or HEAD request carries no body") }
            return MHD_Result.YES
        }
        if let ready = exchange.response.withLock({ $0 }) {
            return queue(ready, for: exchange)
        }
        let work: @Sendable () async -> HTTPResponse
        switch handler.respond(to: exchange.request) {
        case .now(let response): return queue(response, for: exchange)
        case .later(let later): work = later
        }
        let id = ObjectIdentifier(exchange)
        let suspended = state.withLock { state -> Bool in
            guard !state.isStopped else { return false }
            MHD_suspend_connection(connection)
            state.suspended[id] = (exchange, nil)
            return true
        }
        guard suspended else { return queue(.error(503, "the server is stopping"), for: exchange) }
        let task = Task { [weak self] in
            let response = await work()
            self?.resume(exchange, with: response)
        }
        state.withLock { state in
            if state.suspended[id] != nil { state.suspended[id]?.task = task }
        }
        return MHD_Result.YES
    }

    private func resume(_ exchange: Exchange, with response: HTTPResponse) {
        state.withLock { state in
            guard state.suspended.removeValue(forKey: ObjectIdentifier(exchange)) != nil else { return }
            exchange.response.withLock { $0 = response }
            MHD_resume_connection(exchange.connection.pointer)
        }
    }

    func completed(context: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) {
        guard let context, let raw = context.pointee else { return }
        context.pointee = nil
        // Refused by libmicrohttpd itself after the request line: no exchange was made.
        guard UnsafeRawPointer(raw) != lumen_httpd_bare_lf_marker() else { return }
        let exchange = Unmanaged<Exchange>.fromOpaque(raw).takeRetainedValue()
        let task: Task<Void, Never>? = state.withLock { state in
            state.inFlight -= 1
            // Closed while suspended (the daemon stopping): nobody will read the answer.
            return state.suspended.removeValue(forKey: ObjectIdentifier(exchange))?.task
        }
        task?.cancel()
        if let response = exchange.response.withLock({ $0 }) {
            handler.didRespond(to: exchange.request, with: response, seconds: monotonicNow() - exchange.started)
        }
    }

    private func queue(_ response: HTTPResponse, for exchange: Exchange) -> MHD_Result {
        exchange.response.withLock { $0 = response }
        let created: OpaquePointer? = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let created else { return MHD_Result.NO }
        defer { MHD_destroy_response(created) }
        for header in response.headers {
            _ = MHD_add_response_header(created, header.name, header.value)
        }
        return MHD_queue_response(exchange.connection.pointer, UInt32(response.status), created)
    }

    // MARK: - Parsing

    private func makeRequest(_ connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?) -> HTTPRequest {
        var headers = HeaderList()
        withUnsafeMutablePointer(to: &headers) { pointer in
            _ = MHD_get_connection_values(connection, .HEADER_KIND, { context, _, key, value in
                guard let context, let key else { return MHD_Result.YES }
                let list = context.assumingMemoryBound(to: HeaderList.self)
                list.pointee.items.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
                return MHD_Result.YES
            }, pointer)
        }
        var address = [CChar](repeating: 0, count: 64)
        lumen_httpd_client_address(connection, &address, address.count)
        return HTTPRequest(
            method: method.map { String(cString: $0) } ?? "",
            path: url.map { String(cString: $0) } ?? "",
            headers: headers.items,
            clientAddress: String(decoding: address.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    private struct HeaderList { var items: [(name: String, value: String)] = [] }

    /// A request that announces a body, or two lengths, is refused before any of it is read.
    private static func bodyRefusal(_ request: HTTPRequest) -> HTTPResponse? {
        if request.headerCount("Content-Length") > 1 {
            return .error(400, "more than one Content-Length header")
        }
        if request.header("Transfer-Encoding") != nil {
            return .error(400, "a GET or HEAD request carries no body (Transfer-Encoding given)")
        }
        if let length = request.header("Content-Length"), length.trimmingCharacters(in: .whitespaces) != "0" {
            return .error(400, "a GET or HEAD request carries no body (Content-Length: \(length.prefix(20)))")
        }
        return nil
    }

}
}

extension MicroHTTPServer {
    /// `host:port` as a socket address; `nil` when the host is not an IP address.
    static func socketAddress(host: String, port: Int, into storage: inout sockaddr_storage) -> Int? {
        guard (0...65535).contains(port) else { return nil }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return withUnsafeMutablePointer(to: &storage) { pointer -> Int? in
            var v4 = in_addr()
            if inet_pton(AF_INET, bare, &v4) == 1 {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in
                    a.pointee = sockaddr_in()
                    a.pointee.sin_family = sa_family_t(AF_INET)
                    a.pointee.sin_port = in_port_t(UInt16(port).bigEndian)
                    a.pointee.sin_addr = v4
                    return MemoryLayout<sockaddr_in>.size
                }
            }
            var v6 = in6_addr()
            if inet_pton(AF_INET6, bare, &v6) == 1 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in
                    a.pointee = sockaddr_in6()
                    a.pointee.sin6_family = sa_family_t(AF_INET6)
                    a.pointee.sin6_port = in_port_t(UInt16(port).bigEndian)
                    a.pointee.sin6_addr = v6
                    return MemoryLayout<sockaddr_in6>.size
                }
            }
            return nil
        }
    }
}

private let microAccess: MHD_AccessHandlerCallback = { core, connection, url, method, _, _, uploadSize, context in
    guard let core, let connection else { return MHD_Result.NO }
    return Unmanaged<MicroHTTPServer.Core>.fromOpaque(core).takeUnretainedValue()
        .access(connection: connection, url: url, method: method, uploadSize: uploadSize, context: context)
}

private let microCompleted: MHD_RequestCompletedCallback = { core, _, context, _ in
    guard let core else { return }
    Unmanaged<MicroHTTPServer.Core>.fromOpaque(core).takeUnretainedValue().completed(context: context)
}

/// Seconds on a monotonic clock.
func monotonicNow() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}
