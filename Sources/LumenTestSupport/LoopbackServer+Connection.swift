import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension LoopbackServer {
    /// One client connection: reads requests one after another (keep-alive) and answers them,
    /// on the connection's own thread.
    struct Connection {
        let fd: Int32
        let core: Core
        private var buffer: [UInt8] = []

        /// The largest request head accepted.
        static let maximumHeadSize = 64 * 1024

        init(fd: Int32, core: Core) {
            self.fd = fd
            self.core = core
        }

        mutating func run() {
            while true {
                guard let head = readHead() else { return }
                guard var request = HTTPRequestHead(parsing: head) else {
                    core.update { $0.stats.badRequests += 1 }
                    _ = sendSimple(status: 400, keepAlive: false)
                    return
                }
                guard let body = readBody(of: request) else { return }
                request.body = body
                guard respond(to: request) else { return }
            }
        }

        // MARK: Reading

        /// Reads up to the blank line ending a request head; nil when the client closed the
        /// connection, the socket failed, or the head is too large or does not start like one
        /// (answered with 400).
        private mutating func readHead() -> [UInt8]? {
            var searchFrom = 0
            while true {
                if let end = Self.headEnd(in: buffer, from: searchFrom), end <= Self.maximumHeadSize {
                    let head = Array(buffer[..<end])
                    buffer.removeFirst(end + 4)
                    return head
                }
                searchFrom = max(0, buffer.count - 3)
                // Not HTTP at all (a TLS ClientHello starts with 0x16): answered at once, as
                // real servers do, instead of waiting for a blank line that never comes.
                if let first = buffer.first, !(UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(first) || buffer.count > Self.maximumHeadSize {
                    core.update { $0.stats.badRequests += 1 }
                    _ = sendSimple(status: 400, keepAlive: false)
                    return nil
                }
                guard receive() else { return nil }
            }
        }

        /// Appends what the socket has to `buffer`; false at end of stream or on error.
        private mutating func receive() -> Bool {
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n > 0 {
                    buffer.append(contentsOf: chunk[..<n])
                    return true
                }
                if n < 0 && errno == EINTR { continue }
                return false
            }
        }

        private static func headEnd(in bytes: [UInt8], from start: Int) -> Int? {
            guard bytes.count >= 4 else { return nil }
            var i = start
            while i + 3 < bytes.count {
                if bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
                    return i
                }
                i += 1
            }
            return nil
        }

        /// The largest request body kept (a larger one is answered with 413).
        static let maximumBodySize = 4 << 20

        /// Reads the request body (GET/HEAD rarely have one); nil if the connection ended or
        /// the body cannot be delimited or is too large (answered with 400 or 413).
        private mutating func readBody(of request: HTTPRequestHead) -> Data? {
            if request.header("transfer-encoding") != nil {
                core.update { $0.stats.badRequests += 1 }
                _ = sendSimple(status: 400, keepAlive: false)
                return nil
            }
            guard let lengthText = request.header("content-length") else { return Data() }
            guard let length = Int(lengthText.trimmingCharacters(in: .whitespaces)), length >= 0 else {
                core.update { $0.stats.badRequests += 1 }
                _ = sendSimple(status: 400, keepAlive: false)
                return nil
            }
            guard length <= Self.maximumBodySize else {
                core.update { $0.stats.badRequests += 1 }
                _ = sendSimple(status: 413, keepAlive: false)
                return nil
            }
            while buffer.count < length {
                guard receive() else { return nil }
            }
            let body = Data(buffer[..<length])
            buffer.removeFirst(length)
            return body
        }

        // MARK: Answering

        /// Answers one request; false when the connection must close.
        private func respond(to request: HTTPRequestHead) -> Bool {
            let path = request.path
            let arrivalRoute = core.update { state -> Route? in
                state.stats.totalRequests += 1
                state.log.append(request.recorded)
                if state.log.count > LoopbackServer.requestLogLimit { state.log.removeFirst(state.log.count / 2) }
                state.stats.requestsByPath[path, default: 0] += 1
                state.stats.inFlightRequests += 1
                state.stats.peakInFlightRequests = max(state.stats.peakInFlightRequests, state.stats.inFlightRequests)
                return state.routes[path]
            }
            defer { core.update { $0.stats.inFlightRequests -= 1 } }

            // Held: wait for release, noticing a client that gives up.
            if !waitWhileHeld({ $0.heldPaths.contains(path) }, counter: \.heldRequests) { return clientGone() }
            if core.isStopping { return false }

            // Latency: measured from arrival, so a held request is not delayed again.
            if let latency = arrivalRoute?.latency, latency > .zero {
                let seconds = Double(latency.components.seconds) + Double(latency.components.attoseconds) * 1e-18
                let deadline = request.arrival.addingTimeInterval(seconds)
                let waited = core.wait(until: deadline, while: { $0.phase == .running }, interrupt: isPeerClosed)
                if !waited { return clientGone() }
                if core.isStopping { return false }
            }

            // The route as it is now: a test may change it while the request waits.
            let route = core.withState { $0.routes[path] }
            let keepAlive = request.wantsKeepAlive
            guard request.method == "GET" || request.method == "HEAD" || route?.extraMethods.contains(request.method) == true else {
                let allowed = ["GET", "HEAD"] + (route?.extraMethods.sorted() ?? [])
                return sendSimple(status: 405, keepAlive: keepAlive, extraHeaders: ["Allow": allowed.joined(separator: ", ")])
            }
            guard let route else { return sendSimple(status: 404, keepAlive: keepAlive, isHead: request.method == "HEAD") }
            if let raw = route.rawResponse {
                // As given, then a clean close (the caller closes the socket).
                _ = write(raw)
                return false
            }
            if let interim = route.informationalStatus {
                // An interim response has no body and no framing headers; the real one follows.
                let head = "HTTP/1.1 \(interim) \(HTTPStatus.reason(interim))\r\nLink: </hint.css>; rel=preload\r\n\r\n"
                guard write(Data(head.utf8)) else { return clientGone() }
            }
            if let redirect = route.redirect {
                return sendSimple(status: redirect.status, keepAlive: keepAlive, extraHeaders: ["Location": redirect.location])
            }
            if let status = route.statusOverride {
                return sendSimple(status: status, keepAlive: keepAlive, isHead: request.method == "HEAD", extraHeaders: route.statusOverrideHeaders)
            }
            guard let data = route.data else { return sendSimple(status: 404, keepAlive: keepAlive, isHead: request.method == "HEAD") }

            var headers: [(String, String)] = []
            if let etag = route.etag { headers.append(("ETag", etag)) }
            if let lastModified = route.lastModified { headers.append(("Last-Modified", lastModified)) }
            if let cacheControl = route.cacheControl { headers.append(("Cache-Control", cacheControl)) }
            for (name, value) in route.headers.sorted(by: { $0.key < $1.key }) { headers.append((name, value)) }

            if Self.isNotModified(request, route) {
                core.update { $0.stats.notModifiedResponses += 1 }
                return send(status: 304, headers: headers, keepAlive: keepAlive)
            }

            headers.append(("Content-Type", route.contentType))
            var status = 200
            var content = data
            if route.rangeSupport != .ignored {
                headers.append(("Accept-Ranges", "bytes"))
                if let start = Self.rangeStart(request), Self.ifRangeMatches(request, route) {
                    let length = content.count
                    guard start < length else {
                        return sendSimple(status: 416, keepAlive: keepAlive, extraHeaders: ["Content-Range": "bytes */\(length)"])
                    }
                    var first = start
                    if case .misplaced(let offset) = route.rangeSupport { first = min(length - 1, start + offset) }
                    status = 206
                    headers.append(("Content-Range", "bytes \(first)-\(length - 1)/\(length)"))
                    content = content.subdata(in: first..<length)
                }
            }
            let truncateAfter = core.update { state -> Int? in
                guard let after = state.routes[path]?.truncateAfter else { return nil }
                guard let times = state.routes[path]?.truncateTimes else { return after }
                guard times > 0 else { return nil }
                state.routes[path]?.truncateTimes = times - 1
                return after
            }
            let isTruncated = truncateAfter.map { $0 < content.count } ?? false
            if route.isChunked {
                headers.append(("Transfer-Encoding", "chunked"))
            } else {
                headers.append(("Content-Length", String(content.count)))
            }
            let closeAfter = !keepAlive || isTruncated
            guard send(status: status, headers: headers, keepAlive: !closeAfter) else { return clientGone() }
            if request.method == "HEAD" { return !closeAfter }

            let limit = min(content.count, truncateAfter ?? content.count)
            let body = content.prefix(limit)
            // A body hold splits the body in two: the first part, a wait, the rest.
            let pause = route.bodyPauseAfter.map { min($0, body.count) }
            var parts = [body]
            if let pause { parts = [body.prefix(pause), body.dropFirst(pause)] }
            for (index, part) in parts.enumerated() {
                if index == 1, !waitWhileHeld({ $0.heldBodies.contains(path) }, counter: \.pausedBodies) {
                    return clientGone()
                }
                if core.isStopping { return false }
                let sent = route.isChunked
                    ? sendChunked(part, chunkSize: route.chunkSize, terminate: !isTruncated && index == parts.count - 1)
                    : sendBody(part)
                guard sent else { return clientGone() }
            }
            return !closeAfter
        }

        /// Waits while `isHeld` is true of the server's state, counting the wait in `counter`;
        /// false if the client closed the connection meanwhile.
        private func waitWhileHeld(
            _ isHeld: @escaping (Core.State) -> Bool,
            counter: WritableKeyPath<Statistics, Int>
        ) -> Bool {
            let held = core.update { state -> Bool in
                guard state.phase == .running, isHeld(state) else { return false }
                state.stats[keyPath: counter] += 1
                return true
            }
            guard held else { return true }
            defer { core.update { $0.stats[keyPath: counter] -= 1 } }
            return core.wait(while: { $0.phase == .running && isHeld($0) }, interrupt: isPeerClosed)
        }

        /// N of a `Range: bytes=N-` header; nil for none or any other form.
        private static func rangeStart(_ request: HTTPRequestHead) -> Int? {
            guard let value = request.header("range")?.trimmingCharacters(in: .whitespaces),
                  value.hasPrefix("bytes="), value.hasSuffix("-") else { return nil }
            return Int(value.dropFirst(6).dropLast())
        }

        /// Whether `If-Range` is absent or names the route's current representation: its
        /// strong ETag (exact), or its Last-Modified date.
        private static func ifRangeMatches(_ request: HTTPRequestHead, _ route: Route) -> Bool {
            guard let ifRange = request.header("if-range")?.trimmingCharacters(in: .whitespaces) else { return true }
            if ifRange.hasPrefix("\"") || ifRange.hasPrefix("W/") {
                guard let etag = route.etag, !etag.hasPrefix("W/") else { return false }
                return ifRange == etag
            }
            return ifRange == route.lastModified
        }

        private static func isNotModified(_ request: HTTPRequestHead, _ route: Route) -> Bool {
            if let ifNoneMatch = request.header("if-none-match") {
                guard let etag = route.etag else { return false }
                return ifNoneMatch.split(separator: ",").contains { candidate in
                    let tag = candidate.trimmingCharacters(in: .whitespaces)
                    return tag == "*" || Self.weakTag(tag) == Self.weakTag(etag)
                }
            }
            if let since = request.header("if-modified-since"), let lastModified = route.lastModified {
                guard let sinceDate = HTTPDate.parse(since), let modified = HTTPDate.parse(lastModified) else {
                    return false
                }
                return modified <= sinceDate
            }
            return false
        }

        /// Weak comparison (RFC 9110 §8.8.3.2): `W/"x"` and `"x"` match.
        private static func weakTag(_ tag: String) -> Substring {
            tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag)
        }

        private func clientGone() -> Bool {
            core.update { $0.stats.clientDisconnects += 1 }
            return false
        }

        /// Whether the client closed its end (a zero-length peek) or reset the connection.
        private func isPeerClosed() -> Bool {
            var byte: UInt8 = 0
            let n = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
            if n == 0 { return true }
            if n < 0 {
                let error = errno
                return !(error == EAGAIN || error == EWOULDBLOCK || error == EINTR)
            }
            return false
        }

        // MARK: Writing

        private func sendSimple(
            status: Int, keepAlive: Bool, isHead: Bool = false, extraHeaders: [String: String] = [:]
        ) -> Bool {
            var headers: [(String, String)] = []
            for (name, value) in extraHeaders.sorted(by: { $0.key < $1.key }) { headers.append((name, value)) }
            // 1xx, 204 and 304 responses never have a body (RFC 9110 §6.4.1).
            if status < 200 || status == 204 || status == 304 {
                return send(status: status, headers: headers, keepAlive: keepAlive) && keepAlive
            }
            let body = Data("\(status) \(HTTPStatus.reason(status))\n".utf8)
            headers += [("Content-Type", "text/plain"), ("Content-Length", String(body.count))]
            guard send(status: status, headers: headers, keepAlive: keepAlive) else { return false }
            if isHead { return keepAlive }
            return write(body) && keepAlive
        }

        private func send(status: Int, headers: [(String, String)], keepAlive: Bool) -> Bool {
            var text = "HTTP/1.1 \(status) \(HTTPStatus.reason(status))\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            text += keepAlive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n"
            return write(Data(text.utf8))
        }

        private func sendBody(_ body: Data) -> Bool {
            var offset = body.startIndex
            let piece = 64 * 1024
            while offset < body.endIndex {
                let end = min(offset + piece, body.endIndex)
                guard write(body[offset..<end], countsAsBody: true) else { return false }
                offset = end
            }
            return true
        }

        private func sendChunked(_ body: Data, chunkSize: Int, terminate: Bool) -> Bool {
            var offset = body.startIndex
            while offset < body.endIndex {
                let end = min(offset + chunkSize, body.endIndex)
                guard write(Data((String(end - offset, radix: 16) + "\r\n").utf8)),
                      write(body[offset..<end], countsAsBody: true),
                      write(Data("\r\n".utf8)) else { return false }
                offset = end
            }
            return terminate ? write(Data("0\r\n\r\n".utf8)) : true
        }

        /// Writes all of `bytes`; false if the client went away. Never raises SIGPIPE.
        private func write(_ bytes: Data, countsAsBody: Bool = false) -> Bool {
            bytes.withUnsafeBytes { raw -> Bool in
                guard var pointer = raw.baseAddress else { return true }
                var remaining = raw.count
                while remaining > 0 {
                    let n = Glibc.send(fd, pointer, remaining, Int32(MSG_NOSIGNAL))
                    if n < 0 {
                        if errno == EINTR { continue }
                        return false
                    }
                    if countsAsBody { core.update { $0.stats.bodyBytesSent += n } }
                    pointer += n
                    remaining -= n
                }
                return true
            }
        }
    }
}
