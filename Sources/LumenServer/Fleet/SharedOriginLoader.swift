import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Lumen
import Synchronization

/// The server's origin loader: counts every load that reaches an origin, and with a fleet's
/// Redis, shares original bytes across nodes. A node that misses takes the source's fetch
/// lock and fetches; nodes that find the lock taken wait for the holder's bytes and read them
/// from Redis; a node that finds neither (Redis down, the holder gone or the source too big)
/// fetches for itself. A duplicate fetch is acceptable; a wrong answer is not, so only a whole
/// `200` body is ever stored, and only an intact frame is ever handed on.
struct SharedOriginLoader: DataLoading {
    let base: any DataLoading
    let shared: SharedStore?
    let metrics: MetricsStore

    /// The response headers kept beside the bytes (what the pipeline's caches read).
    static let keptHeaders = ["Content-Type", "ETag", "Last-Modified", "Cache-Control", "Expires"]

    func loadData(
        for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        guard let shared, let url = request.url, url.scheme == "http" || url.scheme == "https",
              Self.isPlain(request)
        else { return try await fetch(request, didReceive: didReceive, keep: false).response }
        let key = SharedStore.key(.original, Self.identity(request))
        if let entry = await shared.get(key, kind: .original) {
            return try Self.deliver(entry, url: url, didReceive: didReceive)
        }
        let lockKey = SharedStore.lockKey(key)
        switch await shared.acquire(lockKey, for: key, kind: .original) {
        case .stored(let entry):
            return try Self.deliver(entry, url: url, didReceive: didReceive)
        case .acquired(let token):
            do {
                let (response, body) = try await fetch(request, didReceive: didReceive, keep: true)
                if let body, let http = response as? HTTPURLResponse, http.statusCode == 200 {
                    var fields: [String: String] = [:]
                    for name in Self.keptHeaders {
                        if let value = http.value(forHTTPHeaderField: name) { fields[name] = value }
                    }
                    await shared.put(SharedStore.Entry(fields: fields, payload: body), for: key)
                }
                await shared.release(lockKey, token: token)
                return response
            } catch {
                await shared.release(lockKey, token: token)
                throw error
            }
        case .heldElsewhere:
            if let entry = try await shared.wait(for: key, kind: .original, lockKey: lockKey) {
                return try Self.deliver(entry, url: url, didReceive: didReceive)
            }
            return try await fetch(request, didReceive: didReceive, keep: false).response
        case .unavailable:
            return try await fetch(request, didReceive: didReceive, keep: false).response
        }
    }

    /// Loads from the origin, passing each chunk on; with `keep`, also returns the whole body
    /// when it stayed within the store's value limit.
    private func fetch(
        _ request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void, keep: Bool
    ) async throws -> (response: URLResponse, body: Data?) {
        metrics.state.withLock { $0.originLoads += 1 }
        let limit = keep ? (shared?.maximumValueBytes ?? 0) : -1
        let body = Mutex<Data?>(keep ? Data() : nil)
        let response = try await base.loadData(for: request) { chunk, response in
            body.withLock { body in
                guard body != nil else { return }
                if body!.count + chunk.count > limit { body = nil } else { body!.append(chunk) }
            }
            try didReceive(chunk, response)
        }
        return (response, body.withLock { $0 })
    }

    /// Hands stored bytes on as the origin's `200` (one chunk: they are already whole).
    private static func deliver(
        _ entry: SharedStore.Entry, url: URL, didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) throws -> URLResponse {
        var headers = entry.fields
        headers["Content-Length"] = String(entry.payload.count)
        let response: URLResponse = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: headers)
            ?? URLResponse(url: url, mimeType: nil, expectedContentLength: entry.payload.count, textEncodingName: nil)
        try didReceive(entry.payload, response)
        return response
    }

    /// A plain GET: no validators, no range, no body (a revalidation or a partial request
    /// asks the origin something the stored bytes cannot answer).
    private static func isPlain(_ request: URLRequest) -> Bool {
        guard (request.httpMethod ?? "GET") == "GET", request.httpBody == nil else { return false }
        let fields = request.allHTTPHeaderFields ?? [:]
        return !fields.keys.contains { name in
            ["if-none-match", "if-modified-since", "range", "if-range"].contains(name.lowercased())
        }
    }

    /// What makes two requests the same source: the URL and every header sent with it.
    private static func identity(_ request: URLRequest) -> String {
        let headers = (request.allHTTPHeaderFields ?? [:])
            .map { ($0.key.lowercased(), $0.value) }
            .sorted { $0.0 < $1.0 }
            .map { "\($0.0): \($0.1)" }
        return ([request.url?.absoluteString ?? ""] + headers).joined(separator: "\n")
    }
}
