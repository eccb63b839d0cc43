import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What to load and how: the source (a URL, a `URLRequest` or an async data closure), the
/// processors to apply, the decode size, the priority and the cache options.
///
/// Requests are values. Two requests share work in the pipeline's graph at every stage where
/// the inputs that change that stage's result are equal (see ``ImagePipeline``).
public struct ImageRequest: Sendable, CustomStringConvertible {
    /// How urgent a request is. Queued work runs in priority order, FIFO within a level.
    public enum Priority: Int, Sendable, Hashable, Comparable, CaseIterable {
        /// The lowest level: queued work at this level starts after every other level's.
        case veryLow = 0
        /// Below normal; the default of ``ImagePrefetcher``.
        case low
        /// The default for new requests.
        case normal
        /// Above normal.
        case high
        /// The highest level: queued work at this level starts before every other level's.
        case veryHigh

        /// Whether `lhs` is less urgent than `rhs`.
        public static func < (lhs: Priority, rhs: Priority) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// Cache behaviour: which cache layers a request may read and write.
    public struct Options: OptionSet, Sendable, Hashable {
        /// The options' bits.
        public let rawValue: UInt16
        /// Creates the options whose bits are `rawValue`.
        public init(rawValue: UInt16) { self.rawValue = rawValue }

        /// Skip cached data and images; load from the source (results may still be stored).
        public static let reloadIgnoringCachedData = Options(rawValue: 1 << 0)
        /// Serve only from caches; fail with ``ImagePipeline/Error/Code/dataMissingInCache``
        /// instead of loading.
        public static let returnCacheDataDontLoad = Options(rawValue: 1 << 1)
        /// Don't read decoded images from the memory cache.
        public static let disableMemoryCacheReads = Options(rawValue: 1 << 2)
        /// Don't store decoded images in the memory cache.
        public static let disableMemoryCacheWrites = Options(rawValue: 1 << 3)
        /// Don't read data from the disk cache.
        public static let disableDiskCacheReads = Options(rawValue: 1 << 4)
        /// Don't store data in the disk cache.
        public static let disableDiskCacheWrites = Options(rawValue: 1 << 5)
        /// Decode every frame of an animated GIF or WebP (``ImageContainer/frames``),
        /// composited, with durations, each at the request's decode size, within
        /// ``ImagePipeline/Configuration/maximumDecodedPixelCount`` for all frames together.
        /// Processors apply to every frame. A still image gives no frames. Requests with and
        /// without it share the download, never the decode or a memory-cache entry.
        public static let decodeAllFrames = Options(rawValue: 1 << 6)
    }

    /// Where the bytes come from.
    enum Resource: Sendable {
        /// A plain URL: its `URLRequest` (default policy, no headers) is made when a load needs
        /// it, not for every request (joining running work or hitting a cache never does).
        case url(URL)
        case urlRequest(URLRequest)
        case closure(id: String, load: @Sendable () async throws -> Data)
    }

    /// The request's fields, boxed so that copying a request (the pipeline copies it into
    /// every task and response) costs one retain; copy-on-write keeps it a value.
    private final class Storage: @unchecked Sendable { // mutated only while uniquely referenced
        var resource: Resource
        var processors: [any ImageProcessing] = []
        var priority: Priority = .normal
        var options: Options = []
        var thumbnail: DecodeSize?
        var credentialHeaders: Set<String> = []
        var credentialScope: String?
        var userInfo: [String: any Sendable] = [:]
        var explicitImageID: String?
        /// The data closure only hands back bytes already in memory (``FetchImage``'s
        /// re-decodes): the fetch stage calls it without a download slot.
        var isInMemory = false
        /// A decoded image of this request's source at least as large as its decode size,
        /// which the decode stage may resample instead of fetching (``FetchImage``'s shown
        /// image when the display size shrinks).
        var derivationSource: ImageContainer?
        /// The fetch stage's key, computed once: it depends only on the resource and the
        /// credential headers.
        var fetchKey: FetchKey

        init(resource: Resource, fetchKey: FetchKey? = nil) {
            self.resource = resource
            self.fetchKey = fetchKey ?? FetchKey(resource: resource, credentialHeaders: [])
        }

        func copy() -> Storage {
            let copy = Storage(resource: resource)
            copy.processors = processors
            copy.priority = priority
            copy.options = options
            copy.thumbnail = thumbnail
            copy.credentialHeaders = credentialHeaders
            copy.credentialScope = credentialScope
            copy.userInfo = userInfo
            copy.explicitImageID = explicitImageID
            copy.isInMemory = isInMemory
            copy.derivationSource = derivationSource
            copy.fetchKey = fetchKey
            return copy
        }
    }

    private var storage: Storage

    private mutating func mutate(_ body: (Storage) -> Void) {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        body(storage)
    }

    var resource: Resource { storage.resource }
    var fetchKey: FetchKey { storage.fetchKey }
    /// The fingerprint of the request's credentials and credential scope, as every key uses it
    /// (``CredentialRule``); `nil` without any.
    package var credentialFingerprint: String? { storage.fetchKey.credentialFingerprint }
    /// Whether the request's data closure only returns bytes already in memory: its fetch
    /// takes no slot of the data-loading queue and counts no downloaded bytes.
    package var isInMemory: Bool {
        get { storage.isInMemory }
        set { mutate { $0.isInMemory = newValue } }
    }
    /// A decoded image of the request's source, at least as large as its decode size, that a
    /// new decode stage resamples instead of fetching and decoding (see
    /// ``WorkGraph/derivationSource(for:)``).
    package var derivationSource: ImageContainer? {
        get { storage.derivationSource }
        set { mutate { $0.derivationSource = newValue } }
    }
    /// `imageID ?? ""` without building the URL string again: the fetch key's identity is the
    /// URL's absolute string (`""` without a URL) or the closure's id.
    var cacheImageID: String { storage.explicitImageID ?? storage.fetchKey.identity }
    /// `cacheImageID.hashValue`, without hashing the URL again.
    var cacheImageIDHash: Int { storage.explicitImageID?.hashValue ?? storage.fetchKey.identityHash }

    /// Processors applied in order to the decoded image. Every prefix is its own shared stage:
    /// `[a]` and `[a, b]` apply `a` once. Default empty.
    public var processors: [any ImageProcessing] {
        get { storage.processors }
        set { mutate { $0.processors = newValue } }
    }
    /// The priority; an ``ImageTask``'s priority can be changed while it runs. Default `.normal`.
    public var priority: Priority {
        get { storage.priority }
        set { mutate { $0.priority = newValue } }
    }
    /// Cache options. Default empty.
    public var options: Options {
        get { storage.options }
        set { mutate { $0.options = newValue } }
    }
    /// The size to decode at (`nil`: full size). Requests with different sizes share the
    /// download but not the decode. Default `nil`.
    public var thumbnail: DecodeSize? {
        get { storage.thumbnail }
        set { mutate { $0.thumbnail = newValue } }
    }
    /// Extra header names (case-insensitive) that carry credentials, in addition to
    /// `Authorization`, `Cookie` and `Proxy-Authorization`. Requests whose values for these
    /// headers differ never share a download or a result. Values are compared exactly after
    /// trimming surrounding whitespace, and an empty credential header counts as none (one
    /// rule for downloads and both caches: ``ImageCacheKey/credentialFingerprint(for:markedHeaders:)``).
    /// Default empty.
    public var credentialHeaders: Set<String> {
        get { storage.credentialHeaders }
        set {
            mutate {
                $0.credentialHeaders = newValue
                $0.fetchKey = FetchKey(resource: $0.resource, credentialHeaders: newValue, credentialScope: $0.credentialScope)
            }
        }
    }
    /// Whose request this is, for credentials that are not in the request itself: the
    /// configuration's ``ImagePipeline/Configuration/willLoadData`` hook receives it (to add
    /// that user's token, say), and it is part of every key, like a credential header:
    /// requests with different scopes share neither a download nor a cache entry, and
    /// requests with the same scope (or the same credential headers) do. A hook that adds
    /// anything that may identify a user to a request without a scope fails that load with
    /// ``ImagePipeline/Error/Code/unscopedCredentials`` instead of sending it, so what the
    /// hook adds for one user can never be shared with another. Default `nil`.
    public var credentialScope: String? {
        get { storage.credentialScope }
        set {
            mutate {
                $0.credentialScope = newValue
                $0.fetchKey = FetchKey(resource: $0.resource, credentialHeaders: $0.credentialHeaders, credentialScope: newValue)
            }
        }
    }
    /// Anything the caller wants to carry along; the pipeline ignores it.
    public var userInfo: [String: any Sendable] {
        get { storage.userInfo }
        set { mutate { $0.userInfo = newValue } }
    }

    private init(
        resource: Resource, fetchKey: FetchKey? = nil, processors: [any ImageProcessing], priority: Priority,
        options: Options, thumbnail: DecodeSize?, userInfo: [String: any Sendable]
    ) {
        storage = Storage(resource: resource, fetchKey: fetchKey)
        storage.processors = processors
        storage.priority = priority
        storage.options = options
        storage.thumbnail = thumbnail
        storage.userInfo = userInfo
    }

    /// Creates a request for `url`.
    public init(
        url: URL, processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        assert(FetchKey(plainURL: url) == FetchKey(resource: .urlRequest(URLRequest(url: url)), credentialHeaders: []),
               "FetchKey(plainURL:) disagrees with the URLRequest it stands for")
        self.init(resource: .url(url), processors: processors, priority: priority,
                  options: options, thumbnail: thumbnail, userInfo: userInfo)
    }

    /// Creates a request for `url`, which may be `nil` (as Nuke's does, so
    /// `ImageRequest(url: URL(string: text))` needs no unwrapping): a request without a URL
    /// fails, never cached, with ``ImagePipeline/Error/Code/dataLoadingFailed`` wrapping
    /// `URLError(.badURL)`, and its ``url`` is `nil`.
    @_disfavoredOverload
    public init(
        url: URL?, processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        if let url {
            self.init(url: url, processors: processors, priority: priority, options: options,
                      thumbnail: thumbnail, userInfo: userInfo)
        } else {
            self.init(resource: .closure(id: Self.missingURLIdentity, load: { throw URLError(.badURL) }),
                      processors: processors, priority: priority, options: options, thumbnail: thumbnail,
                      userInfo: userInfo)
        }
    }

    /// The data identity of a request made with a `nil` URL: not a URL, so no real request
    /// shares its key.
    static let missingURLIdentity = "lumen:missing-url"

    /// Creates a request from a `URLRequest` (headers, credentials, cache policy, timeout).
    public init(
        urlRequest: URLRequest, processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        self.init(resource: .urlRequest(urlRequest), processors: processors, priority: priority,
                  options: options, thumbnail: thumbnail, userInfo: userInfo)
    }

    /// Creates a request whose bytes come from `data` instead of the data loader.
    ///
    /// - Parameters:
    ///   - id: the identity of the bytes: requests with the same `id` share the call to `data`
    ///     while it runs, and caches key the result by it.
    ///   - data: loads the bytes. An error it throws fails the request as
    ///     ``ImagePipeline/Error/Code/dataLoadingFailed`` (``ImagePipeline/Error/Code/cancelled``
    ///     for a cancellation); empty bytes fail as ``ImagePipeline/Error/Code/dataIsEmpty``.
    ///   - processors: sets ``processors``.
    ///   - priority: sets ``priority``.
    ///   - options: sets ``options``.
    ///   - thumbnail: sets ``thumbnail``.
    ///   - userInfo: sets ``userInfo``.
    public init(
        id: String, data: @escaping @Sendable () async throws -> Data,
        processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        self.init(resource: .closure(id: id, load: data), processors: processors, priority: priority,
                  options: options, thumbnail: thumbnail, userInfo: userInfo)
    }

    /// The URL, for URL-based requests.
    public var url: URL? {
        switch resource {
        case .url(let url): return url
        case .urlRequest(let r): return r.url
        case .closure: return nil
        }
    }

    /// The `URLRequest`, for URL-based requests.
    public var urlRequest: URLRequest? {
        switch resource {
        case .url(let url): return URLRequest(url: url)
        case .urlRequest(let r): return r
        case .closure: return nil
        }
    }

    /// The image's cache identity: set it for signed URLs whose query changes while the image
    /// doesn't. Defaults to the URL's absolute string, or the `id` of a closure request.
    ///
    /// Setting it is your statement that every URL given this `imageID` serves the same bytes:
    /// such requests share memory and disk cache entries. Credentials still separate them —
    /// cache keys carry a fingerprint of the request's credential headers, and downloads are
    /// keyed by the URL and the credentials, so two requests with the same `imageID` but
    /// different `Authorization` never share a download or an entry.
    public var imageID: String? {
        get {
            if let explicitImageID = storage.explicitImageID { return explicitImageID }
            switch resource {
            case .url(let url): return url.absoluteString
            case .urlRequest(let r): return r.url?.absoluteString
            case .closure(let id, _): return id
            }
        }
        set { mutate { $0.explicitImageID = newValue } }
    }

    /// The source (URL, or `data(id: …)` for a closure request), the processors' identifiers,
    /// the priority and the thumbnail size.
    public var description: String {
        let source: String
        switch resource {
        case .url(let url): source = url.absoluteString
        case .urlRequest(let r): source = r.url?.absoluteString ?? "<no url>"
        case .closure(let id, _): source = "data(id: \(id))"
        }
        let ids = processors.map(\.identifier)
        return "ImageRequest(\(source), processors: \(ids), priority: \(priority), thumbnail: \(thumbnail.map { "\($0)" } ?? "nil"))"
    }
}

extension ImageRequest: ExpressibleByStringLiteral {
    /// A request for the URL in `value`; a string that is not a URL is a programmer error.
    public init(stringLiteral value: String) {
        guard let url = URL(string: value) else { preconditionFailure("ImageRequest: not a URL: \(value)") }
        self.init(url: url)
    }
}
