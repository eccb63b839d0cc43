import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The key of the fetch stage: everything that changes the bytes on the wire.
///
/// The image identity (the URL, or the id of a data closure), the HTTP method and body, the
/// `URLRequest` cache policy and the credentials: `Authorization`, `Cookie`,
/// `Proxy-Authorization` and the request's ``ImageRequest/credentialHeaders``, in the canonical
/// form of ``CredentialRule`` (the same fingerprint the cache keys use: values trimmed, empty
/// ones ignored). Requests with different credentials never share a download, so one user's
/// image is never handed to another. The headers that ask for another representation (`Range`,
/// `If-Range`, `Accept`, `Accept-Language`) are in that fingerprint too. Timeouts and other
/// headers don't change the bytes and are not part of the key.
/// The options that change how the fetch uses the disk cache (reload, cache-only, disk reads
/// and writes off) are part of it too, so a reload never joins a fetch served from disk.
struct FetchKey: Hashable, Sendable, CustomStringConvertible {
    /// The request options the fetch stage acts on.
    static let fetchOptions: ImageRequest.Options = [
        .reloadIgnoringCachedData, .returnCacheDataDontLoad, .disableDiskCacheReads, .disableDiskCacheWrites,
    ]

    /// The fields made from the request's resource, in one immutable object: the key is
    /// copied into pools, tasks and the decode and processing keys, and a copy then costs one
    /// retain instead of one per string, body and fingerprint.
    private final class Fields: Sendable {
        let identity: String
        let identityHash: Int
        let isClosure: Bool
        let method: String
        let body: Data?
        let cachePolicy: UInt
        let credentialFingerprint: String?

        init(identity: String, isClosure: Bool, method: String, body: Data?, cachePolicy: UInt, credentialFingerprint: String?) {
            self.identity = identity
            self.identityHash = identity.hashValue
            self.isClosure = isClosure
            self.method = method
            self.body = body
            self.cachePolicy = cachePolicy
            self.credentialFingerprint = credentialFingerprint
        }

        func isEqual(to other: Fields) -> Bool {
            self === other
                || (isClosure == other.isClosure && cachePolicy == other.cachePolicy && identity == other.identity
                    && method == other.method && body == other.body && credentialFingerprint == other.credentialFingerprint)
        }
    }

    private let fields: Fields
    var identity: String { fields.identity }
    /// `identity.hashValue`, computed once (the memory key reuses it).
    var identityHash: Int { fields.identityHash }
    var isClosure: Bool { fields.isClosure }
    var method: String { fields.method }
    var body: Data? { fields.body }
    var cachePolicy: UInt { fields.cachePolicy }
    /// ``CredentialRule/fingerprint(headers:markedHeaders:)`` of the request's headers, `nil`
    /// without credentials. The memory and disk keys reuse it.
    var credentialFingerprint: String? { fields.credentialFingerprint }
    /// The request's ``fetchOptions``.
    var cacheOptions: UInt16 = 0
    /// The hash of every other field, computed once when the request is made: pool lookups
    /// then hash one `Int` instead of the URL string and the credentials.
    private let fieldsHash: Int

    init(_ request: ImageRequest) {
        self = request.fetchKey
        cacheOptions = request.options.intersection(Self.fetchOptions).rawValue
    }

    static func == (lhs: FetchKey, rhs: FetchKey) -> Bool {
        lhs.fieldsHash == rhs.fieldsHash && lhs.cacheOptions == rhs.cacheOptions && lhs.fields.isEqual(to: rhs.fields)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(fieldsHash)
        hasher.combine(cacheOptions)
    }

    /// The key of `URLRequest(url: url)`: `GET`, no body, the default cache policy, no
    /// credentials.
    init(plainURL url: URL) {
        self.init(identity: url.absoluteString, isClosure: false, method: "GET", body: nil,
                  cachePolicy: URLRequest.CachePolicy.useProtocolCachePolicy.rawValue, credentialFingerprint: nil,
                  otherFieldsHash: Self.plainURLFieldsHash)
    }

    /// ``otherFieldsHash(isClosure:method:body:cachePolicy:credentials:)`` of every plain URL
    /// request, computed once per process.
    private static let plainURLFieldsHash = otherFieldsHash(
        isClosure: false, method: "GET", body: nil, cachePolicy: URLRequest.CachePolicy.useProtocolCachePolicy.rawValue, credentialFingerprint: nil)

    /// The hash of every field but the identity.
    private static func otherFieldsHash(isClosure: Bool, method: String, body: Data?, cachePolicy: UInt, credentialFingerprint: String?) -> Int {
        var hasher = Hasher()
        hasher.combine(isClosure)
        hasher.combine(method)
        hasher.combine(body)
        hasher.combine(cachePolicy)
        hasher.combine(credentialFingerprint)
        return hasher.finalize()
    }

    /// `credentialScope`: ``ImageRequest/credentialScope``, folded into the fingerprint like a
    /// credential header, so that the memory and disk keys (which reuse it) are scoped too.
    init(resource: ImageRequest.Resource, credentialHeaders: Set<String>, credentialScope: String? = nil) {
        switch resource {
        case .closure(let id, _):
            let fingerprint = credentialScope.flatMap { CredentialRule.fingerprint(headers: [:], markedHeaders: [], scope: $0) }
            self.init(identity: id, isClosure: true, method: "", body: nil, cachePolicy: 0, credentialFingerprint: fingerprint)
        case .url(let url) where credentialScope == nil:
            self.init(plainURL: url)
        case .url(let url):
            self.init(resource: .urlRequest(URLRequest(url: url)), credentialHeaders: credentialHeaders, credentialScope: credentialScope)
        case .urlRequest(let urlRequest):
            let fingerprint = CredentialRule.fingerprint(
                headers: urlRequest.allHTTPHeaderFields ?? [:], markedHeaders: credentialHeaders, scope: credentialScope)
            self.init(identity: urlRequest.url?.absoluteString ?? "", isClosure: false, method: urlRequest.httpMethod ?? "GET",
                      body: urlRequest.httpBody, cachePolicy: urlRequest.cachePolicy.rawValue, credentialFingerprint: fingerprint)
        }
    }

    private init(
        identity: String, isClosure: Bool, method: String, body: Data?, cachePolicy: UInt, credentialFingerprint: String?,
        otherFieldsHash: Int? = nil
    ) {
        let fields = Fields(
            identity: identity, isClosure: isClosure, method: method, body: body, cachePolicy: cachePolicy,
            credentialFingerprint: credentialFingerprint)
        self.fields = fields
        let others = otherFieldsHash
            ?? Self.otherFieldsHash(isClosure: isClosure, method: method, body: body, cachePolicy: cachePolicy, credentialFingerprint: credentialFingerprint)
        var hasher = Hasher()
        hasher.combine(fields.identityHash)
        hasher.combine(others)
        fieldsHash = hasher.finalize()
    }

    var description: String {
        var text = isClosure ? "data(id: \(identity))" : "\(method) \(identity)"
        if cachePolicy != 0 { text += " cachePolicy=\(cachePolicy)" }
        if let credentialFingerprint { text += " credentials=\(credentialFingerprint.prefix(8))" }
        if cacheOptions != 0 { text += " options=\(cacheOptions)" }
        return text
    }
}

/// The key of the decode stage: the data key (the fetch key) and the decode size (DESIGN §1).
///
/// Options that only decide whether the result is written to the memory cache are not part of
/// it: requests differing only there share the decode, and each subscriber's write permissions
/// are applied when the result is stored (see ``ImageStageTask/markRequested(memoryKey:diskKey:)``).
struct DecodeKey: Hashable, Sendable, CustomStringConvertible {
    var fetch: FetchKey
    var size: DecodeSize?
    /// ``ImageRequest/Options/decodeAllFrames``: every frame, not the first.
    var allFrames: Bool

    init(_ request: ImageRequest) {
        fetch = FetchKey(request)
        size = request.thumbnail
        allFrames = request.options.contains(.decodeAllFrames)
    }

    var description: String { "\(fetch) size=\(size.map { "\($0)" } ?? "original")" + (allFrames ? " frames=all" : "") }
}

/// The key of a processing stage ("load image"): the decode key (fetch key + decode size) and a
/// prefix of the processors (by their hashable identities). Every prefix is its
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
///
/// A class: the keys travel from the request into the lock and into the tasks it creates, and
/// a reference costs one retain where a copy of every key would cost dozens.
final class RequestKeys: Sendable {
    /// The decode stage's key (which holds the fetch key).
    let decode: DecodeKey
    /// `process[i]` is the key of the stage applying the first `i + 1` processors.
    let process: [ProcessKey]
    /// The request's cache keys; `nil` when the pipeline has no cache.
    let cache: RequestCacheKeys?
    /// An intermediate result found in the memory cache before the request subscribed: the
    /// image with the first `count` processors applied (never the final image, which answers
    /// the request at once).
    let cachedPrefix: (count: Int, container: ImageContainer)?
    /// A larger decode of the same image for a new decode stage to resample (see
    /// ``WorkGraph/derivationSource(for:)``); looked up before the lock like the prefix.
    let derivationSource: ImageContainer?

    /// - Parameters:
    ///   - finalMemoryKey: the request's final memory key when the caller has it.
    ///   - cachedImage: looks up an intermediate result in the memory cache (`nil`: don't).
    ///   - decode: the request's decode key when the caller has it.
    ///   - derivationSource: a larger decode of the same image the decode stage may resample.
    init(
        _ request: ImageRequest, memoryCache: Bool = false, diskCache: Bool = false, finalMemoryKey: ImageCacheKey? = nil,
        cachedImage: ((ImageCacheKey) -> ImageContainer?)? = nil, decode: DecodeKey? = nil,
        derivationSource: ImageContainer? = nil
    ) {
        self.derivationSource = derivationSource
        let decode = decode ?? DecodeKey(request)
        self.decode = decode
        let count = request.processors.count
        process = count == 0 ? [] : (1...count).map { ProcessKey(decode: decode, request: request, processorCount: $0) }
        let cache = memoryCache || diskCache
            ? RequestCacheKeys(request, memory: memoryCache, disk: diskCache, finalMemoryKey: finalMemoryKey)
            : nil
        self.cache = cache
        self.finalMemoryKey = cache?.memory.final
        self.processedDiskKey = cache?.diskProcessed
        var prefix: (count: Int, container: ImageContainer)?
        if count > 0, let cachedImage, let memory = cache?.memory, !memory.isEmpty {
            for prefixCount in stride(from: count - 1, through: 0, by: -1) {
                if let container = cachedImage(memory[prefixCount]) {
                    prefix = (prefixCount, container)
                    break
                }
            }
        }
        cachedPrefix = prefix
    }

    /// The memory key of the request's final image; `nil` without a memory cache.
    let finalMemoryKey: ImageCacheKey?
    /// The disk key of the request's processed image (see ``RequestCacheKeys/diskProcessed``).
    let processedDiskKey: String?
}
