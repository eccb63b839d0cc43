#if canImport(CCurl) && canImport(CLumenCurl)
import CCurl
import CLumenCurl
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One transfer: an easy handle set up from a `URLRequest`, its callbacks, and how its end
/// becomes an error.
extension CurlDataLoader {
    /// What a transfer gets from its loader: limits, and the `User-Agent` sent by default.
    struct Settings {
        var requestTimeout: TimeInterval
        var resourceTimeout: TimeInterval
        var maximumRedirects: Int
        var userAgent: String?
        var trustedCertificates: URL?
        /// Checked on every socket libcurl opens; nil for no check.
        var connectionPolicy: ConnectionPolicy?
    }

    /// An easy handle and what its callbacks collect. Created on the caller's thread, then
    /// used only on the loop thread (its callbacks run inside `curl_multi_perform`).
    final class Transfer: @unchecked Sendable {
        // @unchecked: the mutable state is touched only on the loop thread once the transfer
        // has been posted; before that, only by the thread that creates it.
        let identifier: Int
        let request: URLRequest
        let easy: UnsafeMutableRawPointer
        let continuation: AsyncThrowingStream<TransferEvent, any Error>.Continuation
        let completion = TransferCompletion()
        /// The request timeout: the longest wait for the next byte (from the start, then from
        /// the last byte of a header or the body).
        let idleLimit: TimeInterval
        let idleLimitNanoseconds: UInt64?
        private let validator: DataLoader.Validator
        private let errorBuffer: UnsafeMutablePointer<CChar>
        private var headerList: UnsafeMutablePointer<curl_slist>?

        /// When the last byte arrived (`DispatchTime` nanoseconds).
        var lastActivity: UInt64 = 0
        private var head = HeaderBlock()
        /// A redirect's head (a 3xx with `Location`), final only if libcurl does not follow
        /// it: the body or the end of the transfer comes next instead of another head.
        private var pendingRedirect: HeaderBlock.Head?
        /// The final response, once validated.
        private(set) var response: HTTPURLResponse?
        private var received: Int64 = 0
        /// What ended the transfer from a callback (the validator's error); the callback then
        /// returns an error to libcurl, which stops the transfer.
        private var failure: (any Error)?
        private let connectionPolicy: ConnectionPolicy?
        /// The address the policy refused at the last socket libcurl asked for (nil once a
        /// later one was allowed): when the transfer then fails to connect, this is why.
        private var refusedAddress: String?

        /// Sets up an easy handle for `request` (an `http` or `https` URL).
        /// - Throws: `URLError(.unsupportedURL)` for a body stream (`httpBodyStream`),
        ///   `URLError(.badURL)` for a URL without a host, a method that is not a token or a
        ///   header field with a line break.
        init(
            identifier: Int, request: URLRequest, settings: Settings, validator: @escaping DataLoader.Validator,
            continuation: AsyncThrowingStream<TransferEvent, any Error>.Continuation
        ) throws {
            try DataLoader.requireHost(request.url)
            // Methods are case-sensitive (RFC 9110 §9.1); URLSession sends them as given too.
            let method = request.httpMethod ?? "GET"
            guard !method.isEmpty, method.utf8.allSatisfy(Self.isTokenByte) else {
                throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "the method \(method.debugDescription) is not an HTTP token"])
            }
            guard request.httpBodyStream == nil else {
                throw URLError(.unsupportedURL, userInfo: [NSLocalizedDescriptionKey: "CurlDataLoader sends a request body from httpBody, not from a stream"])
            }
            let upper = method.uppercased()
            let body = upper == "GET" || upper == "HEAD" ? nil : request.httpBody
            var lines: [String] = []
            let fields = request.allHTTPHeaderFields ?? [:]
            for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
                guard !(name + value).contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                    throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "the header field \(name) contains a line break"])
                }
                // "Name;" sends an empty value ("Name:" would remove the header).
                lines.append(value.isEmpty ? "\(name);" : "\(name): \(value)")
            }
            if body != nil || upper == "POST", !fields.keys.contains(where: { $0.caseInsensitiveCompare("Expect") == .orderedSame }) {
                // No `Expect: 100-continue` (libcurl adds it to larger bodies, then waits up to
                // a second for a `100` many servers never send): the body goes at once, as
                // URLSession sends it.
                lines.append("Expect:")
            }
            guard let easy = curl_easy_init() else { throw URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: "curl_easy_init failed"]) }
            self.identifier = identifier
            self.request = request
            self.easy = easy
            self.continuation = continuation
            self.validator = validator
            self.connectionPolicy = settings.connectionPolicy
            let wait = request.timeoutInterval != 60 ? request.timeoutInterval : settings.requestTimeout
            idleLimit = wait
            idleLimitNanoseconds = wait > 0 && wait.isFinite ? UInt64((wait * 1e9).rounded(.up)) : nil
            errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
            errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
            for line in lines { headerList = curl_slist_append(headerList, line) }

            let user = Unmanaged.passUnretained(self).toOpaque()
            _ = lumen_curl_easy_setopt_string(easy, CURLOPT_URL, request.url?.absoluteString ?? "")
            Self.setMethod(method, body: body, on: easy)
            if let headerList { _ = lumen_curl_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, headerList) }
            // Sent unless the request has its own `User-Agent` field (libcurl lets that win).
            if let userAgent = settings.userAgent { _ = lumen_curl_easy_setopt_string(easy, CURLOPT_USERAGENT, userAgent) }
            if let file = settings.trustedCertificates {
                // In place of the system's CA store (libcurl's default).
                _ = lumen_curl_easy_setopt_string(easy, CURLOPT_CAINFO, file.path)
            }
            _ = lumen_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
            _ = lumen_curl_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 1)
            _ = lumen_curl_easy_setopt_long(easy, CURLOPT_MAXREDIRS, settings.maximumRedirects)
            _ = lumen_curl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
            _ = lumen_curl_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
            // "": every encoding this libcurl can undo (gzip, deflate, br), decoded for us.
            _ = lumen_curl_easy_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, "")
            // A proxy tunnel's `CONNECT` answer is not the response.
            _ = lumen_curl_easy_setopt_long(easy, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
            if let milliseconds = Self.milliseconds(wait) {
                _ = lumen_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, milliseconds)
            }
            if let milliseconds = Self.milliseconds(settings.resourceTimeout) {
                _ = lumen_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, milliseconds)
            }
            if settings.connectionPolicy != nil {
                // The policy judges the address connected to, which would be a proxy's: with
                // one, no proxy, whatever the environment says ("" turns `CURLOPT_PROXY` and
                // `*_proxy` off; `NOPROXY` "*" is belt and braces).
                _ = lumen_curl_easy_setopt_string(easy, CURLOPT_PROXY, "")
                _ = lumen_curl_easy_setopt_string(easy, CURLOPT_NOPROXY, "*")
                // Every socket, for the first request and each redirect, after DNS: the
                // resolved address, not the URL's spelling of it, is what gets checked.
                _ = lumen_curl_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, user)
                _ = lumen_curl_easy_setopt_opensocket_callback(easy) { user, _, address in
                    let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
                    return transfer.openSocket(address!)
                }
            }
            _ = lumen_curl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer)
            _ = lumen_curl_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, Self.receiveBufferSize)
            _ = lumen_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, user)
            _ = lumen_curl_easy_setopt_write_callback(easy, CURLOPT_HEADERFUNCTION) { bytes, size, count, user in
                let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
                let length = size * count
                return transfer.receiveHeader(UnsafeRawBufferPointer(start: bytes, count: length)) ? length : 0
            }
            _ = lumen_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, user)
            _ = lumen_curl_easy_setopt_write_callback(easy, CURLOPT_WRITEFUNCTION) { bytes, size, count, user in
                let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
                let length = size * count
                return transfer.receiveBody(UnsafeRawBufferPointer(start: bytes, count: length)) ? length : 0
            }
        }

        deinit {
            // The loop has removed the handle from the multi handle (or never added it).
            curl_easy_cleanup(easy)
            curl_slist_free_all(headerList)
            errorBuffer.deallocate()
        }

        /// Sets the request's method and body on `easy`.
        ///
        /// GET, HEAD and POST (in any case) are libcurl's own: GET and HEAD send no body (a
        /// GET's `httpBody` is ignored, as URLSession refuses one); a POST sends its body, or
        /// an empty one, and a `301`, `302` or `303` turns it into a GET as browsers and
        /// URLSession do. Any other method is sent as given, with its body, to every location
        /// it is redirected to. A body is copied into the handle and sent with its length.
        private static func setMethod(_ method: String, body: Data?, on easy: UnsafeMutableRawPointer) {
            switch method.uppercased() {
            case "GET":
                return
            case "HEAD":
                _ = lumen_curl_easy_setopt_long(easy, CURLOPT_NOBODY, 1)
                return
            case "POST":
                // Always with fields: a POST without them would read its body from stdin.
                _ = lumen_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
                setBody(body ?? Data(), on: easy)
            default:
                _ = lumen_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)
                guard let body else { return }
                // A body needs libcurl's POST machinery (the custom method stays the verb), and
                // keeps the body on every redirect, as the verb is kept.
                _ = lumen_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
                _ = lumen_curl_easy_setopt_long(easy, CURLOPT_POSTREDIR, Int(CURL_REDIR_POST_301 | CURL_REDIR_POST_302 | CURL_REDIR_POST_303))
                setBody(body, on: easy)
            }
        }

        /// Copies `body` into `easy`, to be sent with its length.
        private static func setBody(_ body: Data, on easy: UnsafeMutableRawPointer) {
            // The size first: then libcurl copies exactly that many bytes, zeros included.
            _ = lumen_curl_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            if body.isEmpty {
                _ = lumen_curl_easy_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, "")
            } else {
                body.withUnsafeBytes { bytes in
                    _ = lumen_curl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress!))
                }
            }
        }

        /// Whether `byte` may appear in an HTTP token (RFC 9110 §5.6.2: a method's characters).
        private static func isTokenByte(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                true
            default:
                "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }

        /// libcurl's receive buffer per transfer, the most a write callback gets at once: 128 KiB
        /// instead of libcurl's 16 KiB, so that a photo of a few MB arrives in tens of chunks
        /// (each a callback, a `Data` and a hop to the loading task), not hundreds. In `lumen
        /// bench feed` this took about a tenth off Lumen's CPU time.
        static let receiveBufferSize = 128 * 1024

        /// Whole milliseconds for libcurl, at least 1; nil for no limit.
        private static func milliseconds(_ seconds: TimeInterval) -> Int? {
            guard seconds > 0, seconds.isFinite else { return nil }
            return max(1, Int((seconds * 1000).rounded(.up)))
        }

        // MARK: Callbacks (loop thread)

        /// One header line (libcurl passes them one at a time, with their line end).
        private func receiveHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
            lastActivity = DispatchTime.now().uptimeNanoseconds
            guard response == nil else { return true }  // trailers after a chunked body
            let line = String(decoding: bytes, as: UTF8.self)
            // A new head: libcurl followed the redirect, which is not the response any more.
            if line.hasPrefix("HTTP/") { pendingRedirect = nil }
            guard let ended = head.feed(line) else { return true }
            if (100..<200).contains(ended.status), ended.status != 101 {
                return true  // interim (`100 Continue`, `103 Early Hints`): the real head follows
            }
            if (300..<400).contains(ended.status), let location = ended.field("Location") {
                if let allowsRedirect = connectionPolicy?.allowsRedirect {
                    var effective: UnsafePointer<CChar>?
                    _ = lumen_curl_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective)
                    let base = effective.flatMap { URL(string: String(cString: $0)) } ?? request.url
                    let target = URL(string: location, relativeTo: base)?.absoluteURL
                    guard let target, allowsRedirect(target) else {
                        // Named by host only: the location may carry credentials or tokens.
                        let host = target?.host ?? "an unparsable location"
                        failure = DataLoader.Error.addressRefused("a redirect to \(host), which the policy does not allow")
                        return false
                    }
                }
                pendingRedirect = ended  // libcurl follows it, unless it cannot
                return true
            }
            return accept(ended)
        }

        /// Opens the socket libcurl asks for when the policy allows `address`; otherwise opens
        /// nothing (no connection is attempted) and libcurl fails with `CURLE_COULDNT_CONNECT`,
        /// or tries the host's next address.
        private func openSocket(_ address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
            let refused: String? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { buffer in
                let count = Int(lumen_curl_sockaddr_bytes(address, buffer.baseAddress!))
                // Only an IPv4 or IPv6 address can be judged; anything else is refused.
                guard let ip = IPAddress(bytes: buffer.prefix(count)) else { return "an address of family \(address.pointee.family)" }
                return connectionPolicy?.allows(ip) == false ? ip.description : nil
            }
            refusedAddress = refused
            guard refused == nil else { return -1 }  // CURL_SOCKET_BAD
            return lumen_curl_open_socket(address)
        }

        /// A piece of the body, decoded (libcurl undoes the content encoding).
        private func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
            lastActivity = DispatchTime.now().uptimeNanoseconds
            if response == nil {
                guard let redirect = pendingRedirect, accept(redirect) else {
                    if failure == nil { failure = URLError(.badServerResponse) }
                    return false
                }
            }
            guard !bytes.isEmpty else { return true }
            received += Int64(bytes.count)
            continuation.yield(.data(Data(bytes)))
            return true
        }

        /// Builds the final response from `head`, validates it and passes it on; false when the
        /// validator rejected it (the transfer then stops before its body).
        private func accept(_ head: HeaderBlock.Head) -> Bool {
            pendingRedirect = nil
            var effective: UnsafePointer<CChar>?
            _ = lumen_curl_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective)
            let url = effective.flatMap { URL(string: String(cString: $0)) } ?? request.url!
            let response = HTTPURLResponse(
                url: url, statusCode: head.status, httpVersion: head.version, headerFields: head.joinedFields
            ) ?? HTTPURLResponse(url: url, statusCode: head.status, httpVersion: nil, headerFields: [:])!
            do {
                try validator(response, request)
            } catch {
                failure = error
                return false
            }
            self.response = response
            continuation.yield(.response(response))
            return true
        }

        // MARK: The end (loop thread)

        /// Whether the transfer already went again on a new connection.
        private var isRetriedOnNewConnection = false

        /// Prepares the transfer to go once more, on a new connection, when it failed on a
        /// connection it reused before any response came: a GET or HEAD whose status line was
        /// unreadable (bytes an earlier response sent past its `Content-Length` after libcurl
        /// had finished reading it, which libcurl 7.x leaves in the idle connection and reads
        /// as the next response's head: "Received HTTP/0.9"), or that got nothing or an error
        /// at once. Such a connection was spoiled by an earlier response, not by this one.
        /// Browsers retry these the same way. Once only; the caller adds the handle again.
        func retriesOnNewConnection(after code: CURLcode) -> Bool {
            let method = (request.httpMethod ?? "GET").uppercased()
            guard !isRetriedOnNewConnection, failure == nil, response == nil, pendingRedirect == nil, received == 0,
                  method == "GET" || method == "HEAD",
                  [CURLE_UNSUPPORTED_PROTOCOL, CURLE_WEIRD_SERVER_REPLY, CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR].contains(code)
            else { return false }
            var connections = 0
            guard lumen_curl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connections) == CURLE_OK, connections == 0 else { return false }
            isRetriedOnNewConnection = true
            head = HeaderBlock()
            errorBuffer[0] = 0
            refusedAddress = nil
            _ = lumen_curl_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, 1)
            return true
        }

        /// The error that ends the load when libcurl reports `code`, or nil for success.
        func outcome(_ code: CURLcode) -> (any Error)? {
            if let failure { return failure }
            if code == CURLE_OK {
                if response == nil, let redirect = pendingRedirect, !accept(redirect) { return failure }
                guard let response else {
                    // The connection closed cleanly inside the head (a status line, maybe some
                    // fields, no blank line): FoundationNetworking traps here.
                    return urlError(.badServerResponse, "the connection closed before the response's header ended")
                }
                if let shortfall = DataLoader.shortfall(of: response, received: received, request: request) {
                    return DataLoader.Error.incompleteBody(expected: shortfall, received: received)
                }
                return nil
            }
            return error(for: code)
        }

        /// libcurl's error `code` as the error `DataLoader` throws for the same failure.
        private func error(for code: CURLcode) -> any Error {
            switch code {
            case CURLE_COULDNT_CONNECT:
                if let refusedAddress { return DataLoader.Error.addressRefused(refusedAddress) }
                return urlError(.cannotConnectToHost, code: code)
            case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: return urlError(.cannotFindHost, code: code)
            case CURLE_OPERATION_TIMEDOUT: return urlError(.timedOut, code: code)
            case CURLE_TOO_MANY_REDIRECTS: return urlError(.httpTooManyRedirects, code: code)
            case CURLE_UNSUPPORTED_PROTOCOL: return urlError(.unsupportedURL, code: code)
            case CURLE_URL_MALFORMAT: return urlError(.badURL, code: code)
            // The server closed the connection without a byte: FoundationNetworking's name.
            case CURLE_GOT_NOTHING: return urlError(.badServerResponse, code: code)
            // A head libcurl cannot read ("Invalid Content-Length", a malformed status line).
            case CURLE_WEIRD_SERVER_REPLY: return urlError(.badServerResponse, code: code)
            case CURLE_PARTIAL_FILE:
                if let response, let expected = DataLoader.shortfall(of: response, received: received, request: request) {
                    return DataLoader.Error.incompleteBody(expected: expected, received: received)
                }
                return urlError(.networkConnectionLost, code: code)
            case CURLE_RECV_ERROR, CURLE_SEND_ERROR: return urlError(.networkConnectionLost, code: code)
            case CURLE_BAD_CONTENT_ENCODING: return urlError(.cannotDecodeContentData, code: code)
            case CURLE_PEER_FAILED_VERIFICATION: return urlError(.serverCertificateUntrusted, code: code)
            case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
                 CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR,
                 CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_ENGINE_NOTFOUND,
                 CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_USE_SSL_FAILED:
                return urlError(.secureConnectionFailed, code: code)
            default: return urlError(.unknown, code: code)
            }
        }

        /// A `URLError` whose description is libcurl's message for `code` (the error
        /// buffer's, which names the detail, else the generic one).
        private func urlError(_ urlCode: URLError.Code, code: CURLcode) -> URLError {
            let detail = String(cString: errorBuffer)
            return urlError(urlCode, detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail)
        }

        private func urlError(_ code: URLError.Code, _ description: String) -> URLError {
            var info: [String: Any] = [NSLocalizedDescriptionKey: description]
            if let url = request.url { info[NSURLErrorFailingURLErrorKey] = url }
            return URLError(code, userInfo: info)
        }
    }
}
#endif
