import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The key of the fetch stage: everything that changes the bytes on the wire.
///
/// The image identity (the URL, or the id of a data closure), the HTTP method and body, the
/// `URLRequest` cache policy and the credentials: `Authorization`, `Cookie`,
/// `Proxy-Authorization` and the request's ``ImageRequest/credentialHeaders``. Requests with
/// different credentials never share a download, so one user's image is never handed to
/// another. Timeouts and other headers don't change the bytes and are not part of the key.
/// The options that change how the fetch uses the disk cache (reload, cache-only, disk reads
/// and writes off) are part of it too, so a reload never joins a fetch served from disk.
struct FetchKey: Hashable, Sendable, CustomStringConvertible {
    /// The request options the fetch stage acts on.
    static let fetchOptions: ImageRequest.Options = [
        .reloadIgnoringCachedData, .returnCacheDataDontLoad, .disableDiskCacheReads, .disableDiskCacheWrites,
    ]

    static let standardCredentialHeaders: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    var identity: String
    var isClosure: Bool
    var method: String
    var body: Data?
    var cachePolicy: UInt
    /// Credential header values by lower-cased name; only headers that are present.
    var credentials: [String: String]
    /// The request's ``fetchOptions``.
    var cacheOptions: UInt16 = 0

    init(_ request: ImageRequest) {
        self = request.fetchKey
        cacheOptions = request.options.intersection(Self.fetchOptions).rawValue
    }

    init(resource: ImageRequest.Resource, credentialHeaders: Set<String>) {
        switch resource {
        case .closure(let id, _):
            identity = id
            isClosure = true
            method = ""
            body = nil
            cachePolicy = 0
            credentials = [:]
        case .urlRequest(let urlRequest):
            identity = urlRequest.url?.absoluteString ?? ""
            isClosure = false
            method = urlRequest.httpMethod ?? "GET"
            body = urlRequest.httpBody
            cachePolicy = urlRequest.cachePolicy.rawValue
            var credentials: [String: String] = [:]
            if let headers = urlRequest.allHTTPHeaderFields, !headers.isEmpty {
                let marked = credentialHeaders.isEmpty
                    ? Self.standardCredentialHeaders
                    : Self.standardCredentialHeaders.union(credentialHeaders.map { $0.lowercased() })
                for (name, value) in headers {
                    let lowered = name.lowercased()
                    if marked.contains(lowered) { credentials[lowered] = value }
                }
            }
            self.credentials = credentials
        }
    }

    var description: String {
        var text = isClosure ? "data(id: \(identity))" : "\(method) \(identity)"
        if cachePolicy != 0 { text += " cachePolicy=\(cachePolicy)" }
        if !credentials.isEmpty { text += " credentials=[\(credentials.keys.sorted().joined(separator: ","))]" }
        if cacheOptions != 0 { text += " options=\(cacheOptions)" }
        return text
    }
}

/// The key of the decode stage: the data key, the decode size and the request options (the
/// decode is the "load image" stage of a request without processors, and options decide how
/// that stage uses the caches).
struct DecodeKey: Hashable, Sendable, CustomStringConvertible {
    var fetch: FetchKey
    var size: DecodeSize?
    var options: UInt16

    init(_ request: ImageRequest) {
        fetch = FetchKey(request)
        size = request.thumbnail
        options = request.options.rawValue
    }

    var description: String { "\(fetch) size=\(size.map { "\($0)" } ?? "original")" }
}

/// The key of a processing stage ("load image"): the decode key (which carries the request
/// options) and a prefix of the processors (by their hashable identities). Every prefix is its
/// own key, so `[a]` and `[a, b]` share the task applying `a`.
///
/// Processors' identities are user code: they are read, and the key's hash computed, when the
/// key is made — before the graph's lock is taken (see ``RequestKeys``).
struct ProcessKey: Hashable, @unchecked Sendable, CustomStringConvertible { // AnyHashable values come from Sendable processors' identities
    var decode: DecodeKey
    var processors: [AnyHashable]
    var identifiers: String
    private var cachedHash: Int

    init(decode: DecodeKey, request: ImageRequest, processorCount: Int) {
        self.decode = decode
        let prefix = request.processors.prefix(processorCount)
        self.processors = prefix.map(\.hashableIdentifier)
        self.identifiers = prefix.map(\.identifier).joined(separator: ",")
        var hasher = Hasher()
        hasher.combine(decode)
        hasher.combine(processors)
        self.cachedHash = hasher.finalize()
    }

    static func == (lhs: ProcessKey, rhs: ProcessKey) -> Bool {
        lhs.cachedHash == rhs.cachedHash && lhs.decode == rhs.decode && lhs.processors == rhs.processors
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(cachedHash)
    }

    var description: String { "\(decode) processors=[\(identifiers)]" }
}

/// Every stage key of one request, computed before the graph's lock is taken.
struct RequestKeys: Sendable {
    /// The decode stage's key (which holds the fetch key).
    var decode: DecodeKey
    /// `process[i]` is the key of the stage applying the first `i + 1` processors.
    var process: [ProcessKey]
    /// The request's cache keys; `nil` when the pipeline has no cache.
    var cache: RequestCacheKeys?
    /// An intermediate result found in the memory cache before the request subscribed: the
    /// image with the first `count` processors applied (never the final image, which answers
    /// the request at once).
    var cachedPrefix: (count: Int, container: ImageContainer)?

    init(_ request: ImageRequest, memoryCache: Bool = false, diskCache: Bool = false) {
        decode = DecodeKey(request)
        let count = request.processors.count
        process = count == 0 ? [] : (1...count).map { [decode] in ProcessKey(decode: decode, request: request, processorCount: $0) }
        cache = memoryCache || diskCache ? RequestCacheKeys(request, memory: memoryCache, disk: diskCache) : nil
    }
}
