import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// The session's delegate: routes each task's callbacks, which arrive on the session's
/// delegate queue, to the stream of the load that started it.
final class SessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    struct Handler: Sendable {
        let request: URLRequest
        let validate: DataLoader.Validator
        let continuation: AsyncThrowingStream<TransferEvent, any Error>.Continuation
        /// The request timeout the loader keeps itself (Linux, fractional seconds), restarted
        /// by every event of the task.
        var idle: IdleTimeout?
    }

    /// A wait for the next event of a task that ends the load when it lasts `limit` seconds:
    /// a request timeout kept by the loader. Each event moves the deadline (one store, no
    /// timer: the single check pending looks again at the deadline when it runs); stopped
    /// when the task completes or the load returns.
    final class IdleTimeout: Sendable {
        private let limit: TimeInterval
        private let state = Mutex<(fire: (@Sendable () -> Void)?, deadline: DispatchTime)>((nil, .distantFuture))
        /// The request timeout the session gets instead (for the request and each redirect):
        /// whole seconds it cannot reach before this one fires.
        let sessionTimeout: TimeInterval

        init(limit: TimeInterval) {
            self.limit = limit
            sessionTimeout = limit.rounded(.up) + 1
        }

        /// Arms the timeout: `fire` runs once `limit` passes without a ``restart()``.
        func start(_ fire: @escaping @Sendable () -> Void) {
            let deadline = DispatchTime.now() + limit
            state.withLock { $0 = (fire, deadline) }
            check(at: deadline)
        }

        /// An event came: the wait starts again.
        func restart() {
            state.withLock { state in
                if state.fire != nil { state.deadline = .now() + limit }
            }
        }

        /// The load ended: the timeout never fires.
        func stop() {
            state.withLock { $0.fire = nil }
        }

        private func check(at time: DispatchTime) {
            DispatchQueue.global().asyncAfter(deadline: time) { [self] in
                let (fire, later) = state.withLock { state -> ((@Sendable () -> Void)?, DispatchTime?) in
                    guard let fire = state.fire else { return (nil, nil) }
                    if DispatchTime.now() < state.deadline { return (nil, state.deadline) }
                    state.fire = nil
                    return (fire, nil)
                }
                if let later { check(at: later) }
                fire?()
            }
        }
    }

    private let handlers = Mutex<[Int: Handler]>([:])

    /// Where a task stands with redirects, from its registration to its completion.
    ///
    /// FoundationNetworking traps ("Received callback for HTTP redirection, but we're not
    /// waiting for it") when a task is cancelled after it asked the delegate about a redirect
    /// and before it handled the answer, which it does asynchronously. So a task is never
    /// cancelled in that window: a cancel that comes while a redirect's answer may be on its
    /// way waits for the task's next event (which comes after the answer was handled), and a
    /// redirect asked about after the task was cancelled is never answered (the cancel ends
    /// the task).
    struct Gate {
        /// A redirect was answered and the task has reported nothing since.
        var redirecting = false
        /// A cancel waits for the task's next event.
        var cancelDeferred = false
        /// `cancel()` was called on the task.
        var cancelled = false
        /// The error the load ends with when the task's redirect was refused.
        var refusal: URLError?
    }
    private let gates = Mutex<[Int: Gate]>([:])
    private let completions = Mutex<[Int: TransferCompletion]>([:])

    func register(_ identifier: Int, _ handler: Handler, completion: TransferCompletion) {
        gates.withLock { $0[identifier] = Gate() }
        handlers.withLock { $0[identifier] = handler }
        completions.withLock { $0[identifier] = completion }
    }

    func unregister(_ identifier: Int) {
        _ = handlers.withLock { $0.removeValue(forKey: identifier) }
    }

    /// Ends the load listening to task `identifier` with `error` (the task itself is cancelled
    /// when the load's stream terminates).
    func fail(_ identifier: Int, with error: any Error) {
        handlers.withLock { $0.removeValue(forKey: identifier) }?.continuation.finish(throwing: error)
    }

    /// Cancels `task`, unless a redirect's answer may still be on its way to it: then at its
    /// next event (see ``Gate``).
    func cancel(_ task: URLSessionTask) {
        let now = gates.withLock { gates -> Bool in
            let id = task.taskIdentifier
            guard gates[id] != nil else { return true }
            if gates[id]!.redirecting {
                gates[id]!.cancelDeferred = true
                return false
            }
            gates[id]!.cancelled = true
            return true
        }
        if now { task.cancel() }
    }

    /// The task reported an event, so any redirect answer has been handled: performs a cancel
    /// that waited for it, and returns the error of a refused redirect (once).
    private func eventArrived(for task: URLSessionTask) -> URLError? {
        let (cancelNow, refusal) = gates.withLock { gates -> (Bool, URLError?) in
            let id = task.taskIdentifier
            guard let gate = gates[id] else { return (false, nil) }
            let cancelNow = gate.redirecting && gate.cancelDeferred
            gates[id] = Gate(cancelled: gate.cancelled || cancelNow)
            return (cancelNow, gate.refusal)
        }
        if cancelNow { task.cancel() }
        return refusal
    }

    private func handler(for task: URLSessionTask) -> Handler? {
        handlers.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let refusal = eventArrived(for: dataTask)
        guard let handler = handler(for: dataTask) else {
            completionHandler(.cancel)
            return
        }
        handler.idle?.restart()
        // FoundationNetworking reports an interim response (`103 Early Hints`, `100 Continue`)
        // here as if it were the response; the real one follows on the same task. It is not
        // validated (it would fail the load as a non-2xx status) and not passed on.
        if let http = response as? HTTPURLResponse, (100..<200).contains(http.statusCode), http.statusCode != 101 {
            completionHandler(.allow)
            return
        }
        do {
            if let refusal { throw refusal }
            try handler.validate(response, handler.request)
        } catch {
            unregister(dataTask.taskIdentifier)
            handler.continuation.finish(throwing: error)
            completionHandler(.cancel)
            return
        }
        handler.continuation.yield(.response(response))
        completionHandler(.allow)
    }

    /// A redirect whose `Location` names a scheme other than `http` or `https` (`file:`,
    /// `data:`, `ftp:`) is refused with `URLError(.unsupportedURL)`. FoundationNetworking would
    /// follow it as a path on the same server (`Location: file:///etc/passwd` became
    /// `GET /etc/passwd`), loading bytes nobody asked for.
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        let refused = Self.refusal(of: response)
        // Answered only while the task is not cancelled; from the answer to the task's next
        // event, a cancel waits (see `Gate`).
        let answers = gates.withLock { gates -> Bool in
            guard var gate = gates[task.taskIdentifier], !gate.cancelled else { return false }
            gate.redirecting = true
            gate.refusal = refused
            gates[task.taskIdentifier] = gate
            return true
        }
        guard answers else { return }
        // A refused redirect is not followed: the redirect itself becomes the task's response,
        // which `didReceive` answers with the refusal.
        guard refused == nil else { return completionHandler(nil) }
        var next = Self.redirected(request, by: response, from: task.currentRequest?.url)
        if let idle = handler(for: task)?.idle {
            idle.restart()
            next.timeoutInterval = idle.sessionTimeout
        }
        completionHandler(next)
    }

    /// `request` (the redirect as the session built it) sent where the response's `Location`
    /// points, resolved against the URL that answered (`response.url`, else `current`) as
    /// RFC 3986 says. FoundationNetworking resolves a relative `Location` against the server's
    /// root: `Location: b.png` from `/a/r` became `GET /b.png`, and `../b.png` was sent as
    /// `GET /../b.png`. Only the URL changes, and only within the origin the session chose, so
    /// what it decided for the new origin (method, headers) stays right.
    static func redirected(_ request: URLRequest, by response: HTTPURLResponse, from current: URL?) -> URLRequest {
        guard let location = response.value(forHTTPHeaderField: "Location")?.trimmingCharacters(in: .whitespaces),
              let base = response.url ?? current,
              let target = URL(string: location, relativeTo: base)?.absoluteURL,
              let proposed = request.url, target != proposed,
              origin(of: target) == origin(of: proposed) else { return request }
        var corrected = request
        corrected.url = target
        return corrected
    }

    /// Scheme, host and port of `url`, lowercased, with the scheme's default port filled in.
    private static func origin(of url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : -1)
        return "\(scheme)://\(host):\(port)"
    }

    /// Why a redirect is not followed: its `Location` names a scheme other than `http` or
    /// `https`; `nil` when it may be followed.
    static func refusal(of response: HTTPURLResponse) -> URLError? {
        if let location = response.value(forHTTPHeaderField: "Location"),
           let scheme = Self.scheme(of: location),
           scheme != "http" && scheme != "https" {
            var info: [String: Any] = [NSLocalizedDescriptionKey: "a redirect to a \(scheme): URL is not followed"]
            if let url = response.url { info[NSURLErrorFailingURLErrorKey] = url }
            return URLError(.unsupportedURL, userInfo: info)
        }
        return nil
    }

    /// The scheme of a `Location` value, lowercased; `nil` for a relative reference (no
    /// scheme: a path, or `//host/path`).
    static func scheme(of location: String) -> String? {
        let trimmed = location.drop { $0 == " " || $0 == "\t" }
        guard let colon = trimmed.firstIndex(of: ":") else { return nil }
        let candidate = trimmed[..<colon]
        // RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ); anything else before the
        // first colon makes the value a relative reference.
        guard let first = candidate.first, first.isASCII, first.isLetter,
              candidate.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
        else { return nil }
        return candidate.lowercased()
    }

    /// Responses to requests that ignore the local cache are not stored in the session's
    /// `URLCache`: a pipeline with a disk cache sends its requests that way, and its bytes are
    /// cached once, by Lumen.
    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        let ignoresCache = handler(for: dataTask)?.request.cachePolicy == .reloadIgnoringLocalCacheData
        completionHandler(ignoresCache ? nil : proposedResponse)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        _ = eventArrived(for: dataTask)
        guard let handler = handler(for: dataTask) else { return }
        handler.idle?.restart()
        handler.continuation.yield(.data(data))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        // Resolved before the load hears of the end, so that its wait never has to suspend.
        completions.withLock { $0.removeValue(forKey: task.taskIdentifier) }?.resolve()
        _ = gates.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        guard let handler = handlers.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        handler.idle?.stop()
        if let error {
            handler.continuation.finish(throwing: error)
        } else {
            handler.continuation.yield(.completed)
            handler.continuation.finish()
        }
    }
}
