import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Loads the bytes of an image: the bottom stage of the pipeline's work graph.
///
/// Implementations deliver the body in chunks as it arrives (so that progress is real) and
/// return the final response. Cancellation is the calling Swift task's: when it is cancelled,
/// the load must stop promptly and throw `CancellationError` (or `URLError(.cancelled)`).
public protocol DataLoading: Sendable {
    /// Loads `request`.
    ///
    /// - Parameters:
    ///   - request: the request to perform.
    ///   - didReceive: called for each chunk of the body, in order, with the response the
    ///     chunk belongs to. If it throws, the load is cancelled and that error is rethrown.
    /// - Returns: the response (for HTTP, an `HTTPURLResponse`).
    func loadData(
        for request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse
}
