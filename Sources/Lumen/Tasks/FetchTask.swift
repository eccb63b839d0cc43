import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The fetch stage: loads the original bytes with the data loader (or calls the request's
/// data closure) on the data-loading queue, streaming progress to subscribers.
///
/// The maximum response size is enforced from the declared length at the first chunk and
/// again while the body accumulates; an empty body is an error. Failures the retry policy
/// allows are retried while the task still has subscribers.
final class FetchTask: SharedTask<FetchedData>, @unchecked Sendable { // state guarded by graph.lock
    let request: ImageRequest
    let key: FetchKey

    init(graph: WorkGraph, request: ImageRequest, key: FetchKey) {
        self.request = request
        self.key = key
        super.init(graph: graph, stage: .fetch)
    }

    override var keyDescription: String { key.description }

    override func start() {
        let queue = graph.configuration.dataLoadingQueue
        let item = queue.enqueue(priority: priority) { [self] in await run() }
        operation = (queue, item)
    }

    private func run() async {
        let policy = graph.configuration.retryPolicy
        var attempt = 0
        while true {
            attempt += 1
            let result = await loadOnce()
            switch result {
            case .success(let fetched):
                graph.sync {
                    operation = nil
                    finish(with: fetched)
                }
                return
            case .failure(let error):
                if error.code != .cancelled, attempt < policy.maximumAttempts, !Task.isCancelled, policy.shouldRetry(error) {
                    continue
                }
                graph.sync {
                    operation = nil
                    fail(error)
                }
                return
            }
        }
    }

    private func loadOnce() async -> Result<FetchedData, ImagePipeline.Error> {
        let limit = graph.configuration.maximumResponseDataSize
        switch request.resource {
        case .closure(_, let load):
            do {
                let data = try await load()
                try Task.checkCancellation()
                graph.metricsStore.withLock { $0.bytesDownloaded += data.count }
                if data.isEmpty { return .failure(.dataIsEmpty) }
                if data.count > limit { return .failure(.dataTooLarge(limit: limit, byteCount: data.count)) }
                return .success(FetchedData(data: data, urlResponse: nil))
            } catch {
                return .failure(Self.wrap(error))
            }
        case .urlRequest(let urlRequest):
            graph.metricsStore.withLock {
                $0.networkRequestsStarted += 1
                $0.networkRequestsInFlight += 1
                $0.peakNetworkRequestsInFlight = max($0.peakNetworkRequestsInFlight, $0.networkRequestsInFlight)
            }
            defer { graph.metricsStore.withLock { $0.networkRequestsInFlight -= 1 } }
            let body = Body(limit: limit)
            do {
                let response = try await graph.configuration.dataLoader.loadData(for: urlRequest) { [self] chunk, response in
                    let progress = try body.append(chunk, response: response)
                    graph.metricsStore.withLock { $0.bytesDownloaded += chunk.count }
                    graph.sync { send(progress: progress) }
                }
                try Task.checkCancellation()
                let data = body.data
                if data.isEmpty { return .failure(.dataIsEmpty) }
                return .success(FetchedData(data: data, urlResponse: response))
            } catch {
                return .failure(Self.wrap(error))
            }
        }
    }

    private static func wrap(_ error: any Error) -> ImagePipeline.Error {
        if let error = error as? ImagePipeline.Error { return error }
        if Task.isCancelled || error is CancellationError { return .cancelled }
        if let error = error as? URLError, error.code == .cancelled { return .cancelled }
        return .dataLoadingFailed(error)
    }

    /// The body as it accumulates, with the size checks. The loader calls `didReceive`
    /// serially, but from whatever thread it likes, hence the mutex.
    private final class Body: Sendable {
        private struct State {
            var data = Data()
            var expected: Int64 = 0
            var isFirstChunk = true
        }

        private let limit: Int
        private let state = Mutex(State())

        init(limit: Int) { self.limit = limit }

        var data: Data { state.withLock { $0.data } }

        func append(_ chunk: Data, response: URLResponse) throws(ImagePipeline.Error) -> ImageTask.Progress {
            let limit = self.limit
            return try state.withLock { state throws(ImagePipeline.Error) -> ImageTask.Progress in
                if state.isFirstChunk {
                    state.isFirstChunk = false
                    state.expected = max(0, response.expectedContentLength)
                    if state.expected > Int64(limit) {
                        throw .dataTooLarge(limit: limit, byteCount: Int(clamping: state.expected))
                    }
                }
                let total = state.data.count + chunk.count
                if total > limit { throw .dataTooLarge(limit: limit, byteCount: total) }
                state.data.append(chunk)
                return ImageTask.Progress(completed: Int64(total), total: max(state.expected, Int64(total)))
            }
        }
    }
}
