// TEMPORARY: a stand-in so the pipeline branch compiles on its own. The lead deletes this file
// at merge; the real `DataLoader` lives in `Sources/Lumen/Loading/DataLoader.swift`.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Temporary minimal loader: one `URLSession.shared` request, delivered as one chunk.
public final class DataLoader: DataLoading {
    public init() {}

    public func loadData(
        for request: URLRequest,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        let (data, response) = try await URLSession.shared.data(for: request)
        if !data.isEmpty { try didReceive(data, response) }
        return response
    }
}
