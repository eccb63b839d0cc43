import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// What a transfer tells the load waiting for it, in order: the response head (once), body
/// chunks, then `.completed` — or the stream of events ends with an error. ``DataLoader``'s
/// session delegate and ``CurlDataLoader``'s loop both send them.
enum TransferEvent: Sendable {
    case response(URLResponse)
    case data(Data)
    case completed

    /// What a load has had of its transfer so far.
    struct Progress {
        /// The response head, once it came.
        var response: URLResponse?
        /// Body bytes handed to the load.
        var received: Int64 = 0
    }

    /// Hands the body chunks of `events` to `didReceive` until `.completed`, and returns the
    /// response. `progress` keeps what came, for a caller that names the error the stream
    /// ended with. A chunk or the end before any response is `URLError(.badServerResponse)`;
    /// a stream that ends without `.completed` or an error (only when the waiting task is
    /// cancelled) is `CancellationError`. Both loaders' receiving loop.
    static func deliver(
        _ events: AsyncThrowingStream<TransferEvent, any Error>, progress: inout Progress,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        for try await event in events {
            switch event {
            case .response(let head):
                progress.response = head
            case .data(let chunk):
                guard let response = progress.response else { throw URLError(.badServerResponse) }
                progress.received += Int64(chunk.count)
                try didReceive(chunk, response)
            case .completed:
                guard let response = progress.response else { throw URLError(.badServerResponse) }
                return response
            }
        }
        throw CancellationError()
    }
}

/// Resolved once a loader's transfer is over — the session reported its task finished, or the
/// curl loop removed its handle — whether or not a load still listens to its events, so that
/// `loadData` returns only after its transfer has stopped.
final class TransferCompletion: Sendable {
    private let state = Mutex<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func resolve() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.done = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Suspends until resolved (or until `limit` has passed, when given). Not cancellable.
    func wait(atMost limit: DispatchTimeInterval? = nil) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.done { return true }
                state.waiters.append(continuation)
                return false
            }
            if done {
                continuation.resume()
            } else if let limit {
                DispatchQueue.global().asyncAfter(deadline: .now() + limit) { [self] in resolve() }
            }
        }
    }
}
