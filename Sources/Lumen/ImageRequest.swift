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
        case veryLow = 0, low, normal, high, veryHigh

        public static func < (lhs: Priority, rhs: Priority) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// Cache behaviour. Defined now; honoured by the cache layers.
    public struct Options: OptionSet, Sendable, Hashable {
        public let rawValue: UInt16
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
    }

    /// Where the bytes come from.
    enum Resource: Sendable {
        case urlRequest(URLRequest)
        case closure(id: String, load: @Sendable () async throws -> Data)
    }

    let resource: Resource

    /// Processors applied in order to the decoded image. Every prefix is its own shared stage:
    /// `[a]` and `[a, b]` apply `a` once. Default empty.
    public var processors: [any ImageProcessing]
    /// The priority; an ``ImageTask``'s priority can be changed while it runs. Default `.normal`.
    public var priority: Priority
    /// Cache options. Default empty.
    public var options: Options
    /// The size to decode at (`nil`: full size). Requests with different sizes share the
    /// download but not the decode. Default `nil`.
    public var thumbnail: DecodeSize?
    /// Extra header names (case-insensitive) that carry credentials, in addition to
    /// `Authorization`, `Cookie` and `Proxy-Authorization`. Requests whose values for these
    /// headers differ never share a download or a result. Default empty.
    public var credentialHeaders: Set<String>
    /// Anything the caller wants to carry along; the pipeline ignores it.
    public var userInfo: [String: any Sendable]

    private var explicitImageID: String?

    /// Creates a request for `url`.
    public init(
        url: URL, processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        self.init(urlRequest: URLRequest(url: url), processors: processors, priority: priority,
                  options: options, thumbnail: thumbnail, userInfo: userInfo)
    }

    /// Creates a request from a `URLRequest` (headers, credentials, cache policy, timeout).
    public init(
        urlRequest: URLRequest, processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        self.resource = .urlRequest(urlRequest)
        self.processors = processors
        self.priority = priority
        self.options = options
        self.thumbnail = thumbnail
        self.credentialHeaders = []
        self.userInfo = userInfo
    }

    /// Creates a request whose bytes come from `data` instead of the data loader.
    ///
    /// - Parameter id: the identity of the bytes: requests with the same `id` share the call
    ///   to `data` while it runs, and caches key the result by it.
    public init(
        id: String, data: @escaping @Sendable () async throws -> Data,
        processors: [any ImageProcessing] = [], priority: Priority = .normal,
        options: Options = [], thumbnail: DecodeSize? = nil, userInfo: [String: any Sendable] = [:]
    ) {
        self.resource = .closure(id: id, load: data)
        self.processors = processors
        self.priority = priority
        self.options = options
        self.thumbnail = thumbnail
        self.credentialHeaders = []
        self.userInfo = userInfo
    }

    /// The URL, for URL-based requests.
    public var url: URL? {
        if case .urlRequest(let r) = resource { return r.url }
        return nil
    }

    /// The `URLRequest`, for URL-based requests.
    public var urlRequest: URLRequest? {
        if case .urlRequest(let r) = resource { return r }
        return nil
    }

    /// The image's cache identity: set it for signed URLs whose query changes while the image
    /// doesn't. Defaults to the URL's absolute string, or the `id` of a closure request.
    public var imageID: String? {
        get {
            if let explicitImageID { return explicitImageID }
            switch resource {
            case .urlRequest(let r): return r.url?.absoluteString
            case .closure(let id, _): return id
            }
        }
        set { explicitImageID = newValue }
    }

    public var description: String {
        let source: String
        switch resource {
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
