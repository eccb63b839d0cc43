import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension FetchTask {
    /// The body as it accumulates, with the size checks. The loader calls `didReceive`
    /// serially, but from whatever thread it likes, hence the mutex.
    final class Body: Sendable {
        private struct State {
            var data = Data()
            var expected: Int64 = 0
            var isFirstChunk = true
            var scanner = ProgressiveJPEGScanner()
            /// The response of the first chunk.
            var response: URLResponse?
            /// For a resumed attempt, how its response relates to the bytes before it.
            var answer: PartialBody.Answer?
        }

        private let limit: Int
        /// The bytes a resumed attempt continues.
        private let resuming: PartialBody?
        private let state = Mutex(State())

        init(limit: Int, resuming: PartialBody? = nil) {
            self.limit = limit
            self.resuming = resuming
        }

        var data: Data { state.withLock { $0.data } }

        /// How the resumed attempt's response related to the bytes before it, once it came.
        var answer: PartialBody.Answer? { state.withLock { $0.answer } }

        /// The bytes received so far as a body the next attempt can continue, if it can
        /// (``PartialBody``): after a resumed attempt that continued, the whole prefix.
        func continuable(for request: URLRequest) -> PartialBody? {
            state.withLock { state in
                // A continuing body starts with the bytes it continues (see `append`).
                if let resuming, state.answer == .continues { return resuming.grown(to: state.data) }
                return PartialBody(data: state.data, response: state.response, request: request)
            }
        }

        /// A copy of the first `length` bytes (not a slice: one would share the buffer, and the
        /// next chunk's append would then copy all of it); `nil` when there are fewer.
        func prefix(_ length: Int) -> Data? {
            state.withLock { state in
                guard length > 0, state.data.count >= length else { return nil }
                return state.data.withUnsafeBytes { Data(bytes: $0.baseAddress!, count: length) }
            }
        }

        /// Appends `chunk`; with `scanning`, also answers the body so far when it completes a
        /// new scan of a progressive JPEG (a preview's bytes).
        func append(_ chunk: Data, response: URLResponse, scanning: Bool) throws(ImagePipeline.Error) -> (ImageTask.Progress, Data?) {
            let limit = self.limit
            return try state.withLock { state throws(ImagePipeline.Error) -> (ImageTask.Progress, Data?) in
                if state.isFirstChunk {
                    state.isFirstChunk = false
                    state.response = response
                    if let resuming {
                        let answer = resuming.answer(to: response)
                        state.answer = answer
                        switch answer {
                        case .continues:
                            // The rest follows the bytes already here; sizes count them all.
                            state.expected = resuming.totalLength ?? (Int64(resuming.data.count) + max(0, DataLoader.declaredLength(response)))
                            if state.expected > Int64(limit) {
                                throw .dataTooLarge(limit: limit, byteCount: Int(clamping: state.expected))
                            }
                            state.data = Data(capacity: Int(state.expected))
                            state.data.append(resuming.data)
                            let total = state.data.count + chunk.count
                            if total > limit { throw .dataTooLarge(limit: limit, byteCount: total) }
                            state.data.append(chunk)
                            return (ImageTask.Progress(completed: Int64(total), total: max(state.expected, Int64(total))), nil)
                        case .mismatched:
                            let http = response as? HTTPURLResponse
                            throw .dataLoadingFailed(ResumeMismatch(
                                status: http?.statusCode ?? 0, contentRange: http?.value(forHTTPHeaderField: "Content-Range")))
                        case .startsOver:
                            break // a whole new body, as below
                        }
                    }
                    state.expected = max(0, DataLoader.declaredLength(response))
                    if state.expected > Int64(limit) {
                        throw .dataTooLarge(limit: limit, byteCount: Int(clamping: state.expected))
                    }
                    // One buffer of the announced size: appending into a growing buffer would
                    // copy the body a few times over and briefly hold two copies of it.
                    if state.expected > 0 { state.data = Data(capacity: Int(state.expected)) }
                }
                let total = state.data.count + chunk.count
                if total > limit { throw .dataTooLarge(limit: limit, byteCount: total) }
                state.data.append(chunk)
                let progress = ImageTask.Progress(completed: Int64(total), total: max(state.expected, Int64(total)))
                guard scanning, state.scanner.isActive else { return (progress, nil) }
                let isNewScan = state.data.withUnsafeBytes { state.scanner.advance(over: $0) }
                return (progress, isNewScan ? state.data : nil)
            }
        }
    }
}
