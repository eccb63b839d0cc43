#if canImport(CCurl) && canImport(CLumenCurl)
import CCurl
import CLumenCurl
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// The thread that drives libcurl's multi handle, and the transfers it runs.
extension CurlDataLoader {
    /// One libcurl multi handle and the thread that runs it.
    ///
    /// The loop takes commands (add a transfer, cancel one, shut down) from a mutex-guarded
    /// inbox, runs `curl_multi_perform` (libcurl calls the transfers' header and write
    /// callbacks from inside it), ends finished transfers (`curl_multi_info_read`) and
    /// transfers idle past their request timeout, then sleeps in `curl_multi_poll` until a
    /// socket is ready, libcurl's own timer or the next idle deadline is due, or another
    /// thread calls `curl_multi_wakeup` after posting a command. It never spins: with nothing
    /// to do it sleeps in the poll.
    ///
    /// The thread starts with the first transfer and ends after ``shutDown()`` (the loader's
    /// `deinit`); a load keeps its loader, so no transfer is running then.
    final class Engine: @unchecked Sendable {
        // @unchecked: `multi` and `transfers` are used only on the loop thread; other threads
        // touch only `inbox` (a Mutex) and call `curl_multi_wakeup` under its lock.
        private let multi: UnsafeMutableRawPointer
        private let inbox = Mutex<(commands: [Command], isStarted: Bool, isShuttingDown: Bool, isClosed: Bool)>(([], false, false, false))
        /// The running transfers by easy handle; loop thread only.
        private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
        private let nextIdentifier = Atomic<Int>(0)

        enum Command {
            case add(Transfer)
            case cancel(Int)
        }

        /// libcurl's global state, set up once before the first handle (`curl_global_init` is
        /// not safe to race with the first `curl_easy_init` on every libcurl build).
        private static let globalInit: Void = { _ = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

        init(maximumConnectionsPerHost: Int) {
            Self.globalInit
            guard let multi = curl_multi_init() else { fatalError("CurlDataLoader: curl_multi_init failed (out of memory)") }
            self.multi = multi
            _ = lumen_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maximumConnectionsPerHost)
        }

        /// Starts the loop thread; called once, with the first command (a loader that never
        /// loads over HTTP, like most configurations made only to be changed, never has one).
        private func startThread() {
            let thread = Thread { [self] in
                // Named in at most 15 bytes: Linux refuses a longer thread name.
                Thread.current.name = "LumenCurlLoader"
                run()
            }
            thread.start()
        }

        /// A fresh identifier for a transfer.
        func makeIdentifier() -> Int {
            nextIdentifier.add(1, ordering: .relaxed).newValue
        }

        /// Hands `transfer` to the loop, which starts it.
        func add(_ transfer: Transfer) { post(.add(transfer)) }

        /// Asks the loop to stop transfer `identifier` (ignored once it has ended); its load
        /// sees `CancellationError`.
        func cancel(_ identifier: Int) { post(.cancel(identifier)) }

        /// Ends the loop thread (after cancelling any transfer left, of which there are none
        /// when the loader is deinitialised).
        func shutDown() {
            let hasThread = inbox.withLock { inbox in
                guard !inbox.isClosed else { return true }
                guard inbox.isStarted else {
                    inbox.isClosed = true
                    return false
                }
                inbox.isShuttingDown = true
                _ = curl_multi_wakeup(multi)
                return true
            }
            // No thread ever ran: nothing else can reach the multi handle now.
            if !hasThread { curl_multi_cleanup(multi) }
        }

        private func post(_ command: Command) {
            let mustStart = inbox.withLock { inbox -> Bool in
                guard !inbox.isClosed else { return false }
                inbox.commands.append(command)
                // Under the lock, so that the loop cannot free the multi handle meanwhile.
                _ = curl_multi_wakeup(multi)
                defer { inbox.isStarted = true }
                return !inbox.isStarted
            }
            // The new thread finds the command in the inbox.
            if mustStart { startThread() }
        }

        // MARK: The loop (loop thread only)

        private func run() {
            while true {
                let (commands, isShuttingDown) = inbox.withLock { inbox in
                    defer { inbox.commands = [] }
                    if inbox.isShuttingDown { inbox.isClosed = true }
                    return (inbox.commands, inbox.isShuttingDown)
                }
                for command in commands {
                    switch command {
                    case .add(let transfer): start(transfer)
                    case .cancel(let identifier):
                        if let transfer = transfers.values.first(where: { $0.identifier == identifier }) {
                            end(transfer, with: CancellationError())
                        }
                    }
                }
                if isShuttingDown {
                    for transfer in Array(transfers.values) { end(transfer, with: CancellationError()) }
                    break
                }
                var running: Int32 = 0
                _ = curl_multi_perform(multi, &running)
                readFinishedTransfers()
                let wait = endIdleTransfers()
                _ = curl_multi_poll(multi, nil, 0, wait, nil)
            }
            curl_multi_cleanup(multi)
        }

        private func start(_ transfer: Transfer) {
            transfer.lastActivity = DispatchTime.now().uptimeNanoseconds
            let code = curl_multi_add_handle(multi, transfer.easy)
            guard code == CURLM_OK else {
                let text = String(cString: curl_multi_strerror(code))
                transfer.completion.resolve()
                transfer.continuation.finish(throwing: URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: "libcurl: \(text)"]))
                return
            }
            transfers[transfer.easy] = transfer
        }

        private func readFinishedTransfers() {
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                      let transfer = transfers[easy] else { continue }
                let code = message.pointee.data.result
                if transfer.retriesOnNewConnection(after: code) {
                    _ = curl_multi_remove_handle(multi, easy)
                    transfers[easy] = nil
                    start(transfer)
                    continue
                }
                // Read before `end`: the outcome may need the handle's error buffer.
                let error = transfer.outcome(code)
                end(transfer, with: error)
            }
        }

        /// Ends the transfers that have waited longer than their request timeout for a byte,
        /// and returns how long the poll may sleep before the next such deadline (ms).
        private func endIdleTransfers() -> Int32 {
            let now = DispatchTime.now().uptimeNanoseconds
            // An hour when no deadline is due sooner: libcurl's own timers and the wakeup of a
            // command end the poll earlier.
            var wait: UInt64 = 3_600 * 1_000_000_000
            for transfer in Array(transfers.values) {
                guard let limit = transfer.idleLimitNanoseconds else { continue }
                let deadline = transfer.lastActivity &+ limit
                if deadline <= now {
                    var info: [String: Any] = [NSLocalizedDescriptionKey: "no bytes came for \(transfer.idleLimit) s (the request timeout)"]
                    if let url = transfer.request.url { info[NSURLErrorFailingURLErrorKey] = url }
                    end(transfer, with: URLError(.timedOut, userInfo: info))
                } else {
                    wait = min(wait, deadline - now)
                }
            }
            // Rounded up, so that the check after the poll finds the deadline passed.
            return Int32((wait + 999_999) / 1_000_000)
        }

        /// Removes `transfer`'s handle from the multi handle, resolves its completion, and
        /// ends its load: with `error`, or `.completed` when there is none.
        private func end(_ transfer: Transfer, with error: (any Error)?) {
            _ = curl_multi_remove_handle(multi, transfer.easy)
            transfers[transfer.easy] = nil
            // Resolved before the load hears of the end, so that its wait never suspends.
            transfer.completion.resolve()
            if let error {
                transfer.continuation.finish(throwing: error)
            } else {
                transfer.continuation.yield(.completed)
                transfer.continuation.finish()
            }
        }
    }
}
#endif
