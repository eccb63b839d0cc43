import Foundation

/// An error that may carry an HTTP status code. Data loaders throw errors conforming to it
/// for non-2xx responses, so that ``ImagePipeline/Error/statusCode`` can report the status.
public protocol HTTPStatusCodeProviding: Error {
    /// The HTTP status code of the response that failed, `nil` when the error is not about a
    /// status.
    var statusCode: Int? { get }
    /// The failing response's `Retry-After` header value, verbatim (delta-seconds or an HTTP
    /// date), `nil` when it had none. ``ImagePipeline/RetryPolicy`` waits at least that long
    /// before retrying. The default implementation answers `nil`.
    var retryAfter: String? { get }
}

extension HTTPStatusCodeProviding {
    /// `nil`: the error carries no `Retry-After`.
    public var retryAfter: String? { nil }
}

extension ImagePipeline {
    /// Why the pipeline could not produce an image or data.
    ///
    /// One error type for everything the pipeline throws. Compare ``code`` to tell the cases
    /// apart (new codes may be added without breaking callers); the other properties carry the
    /// context that applies to that code.
    ///
    /// ```swift
    /// do { _ = try await pipeline.image(for: url) }
    /// catch let error as ImagePipeline.Error where error.code == .cancelled { … }
    /// ```
    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        /// The kind of failure.
        public struct Code: Hashable, Sendable, CustomStringConvertible {
            private let name: String
            private init(_ name: String) { self.name = name }
            /// The code's name, e.g. `dataTooLarge`.
            public var description: String { name }

            /// The request (or every caller of the shared work) was cancelled.
            public static let cancelled = Code("cancelled")
            /// The data loader (or the request's data closure) threw; see ``underlyingError``
            /// and ``statusCode``.
            public static let dataLoadingFailed = Code("dataLoadingFailed")
            /// The response had an empty body.
            public static let dataIsEmpty = Code("dataIsEmpty")
            /// The response is larger than the configured maximum; see ``limit`` and ``byteCount``.
            public static let dataTooLarge = Code("dataTooLarge")
            /// The data could not be decoded; ``underlyingError`` is usually an `ImagingError`.
            public static let decodingFailed = Code("decodingFailed")
            /// A processor threw; see ``processorIdentifier`` and ``underlyingError``.
            public static let processingFailed = Code("processingFailed")
            /// The pipeline was invalidated before or while the request ran.
            public static let pipelineInvalidated = Code("pipelineInvalidated")
            /// `returnCacheDataDontLoad` was set and the caches had nothing.
            public static let dataMissingInCache = Code("dataMissingInCache")
            /// The ``ImagePipeline/Configuration/willLoadData`` hook changed something that may
            /// identify a user (a credential header, the URL, the method or the body) on a
            /// request without an ``ImageRequest/credentialScope``; nothing was sent. See
            /// ``underlyingError`` (an ``ImagePipeline/UnscopedCredentials``) for what changed.
            public static let unscopedCredentials = Code("unscopedCredentials")
        }

        /// The kind of failure.
        public let code: Code
        /// The error thrown by the loader, decoder or processor, when there was one.
        public let underlyingError: (any Swift.Error)?
        /// For ``Code/dataTooLarge``: the configured maximum, in bytes.
        public let limit: Int?
        /// For ``Code/dataTooLarge``: the declared or received byte count that exceeded it.
        public let byteCount: Int?
        /// For ``Code/processingFailed``: the failing processor's identifier.
        public let processorIdentifier: String?

        init(code: Code, underlyingError: (any Swift.Error)? = nil, limit: Int? = nil, byteCount: Int? = nil, processorIdentifier: String? = nil) {
            self.code = code
            self.underlyingError = underlyingError
            self.limit = limit
            self.byteCount = byteCount
            self.processorIdentifier = processorIdentifier
        }

        /// The HTTP status, when loading failed because of a non-2xx response (the underlying
        /// error conforms to ``HTTPStatusCodeProviding``).
        public var statusCode: Int? {
            guard code == .dataLoadingFailed else { return nil }
            return (underlyingError as? any HTTPStatusCodeProviding)?.statusCode ?? nil
        }

        /// The failing response's `Retry-After` header value, verbatim, when loading failed
        /// because of a non-2xx response that carried one (the underlying error conforms to
        /// ``HTTPStatusCodeProviding``, as ``DataLoader/Error/statusCode(_:_:)`` does).
        public var retryAfter: String? {
            guard code == .dataLoadingFailed else { return nil }
            return (underlyingError as? any HTTPStatusCodeProviding)?.retryAfter
        }

        /// A cancellation: the error with code ``Code/cancelled``.
        public static let cancelled = Error(code: .cancelled)
        /// An empty response body: the error with code ``Code/dataIsEmpty``.
        public static let dataIsEmpty = Error(code: .dataIsEmpty)
        /// An invalidated pipeline: the error with code ``Code/pipelineInvalidated``.
        public static let pipelineInvalidated = Error(code: .pipelineInvalidated)
        /// A cache-only request the caches could not answer: the error with code
        /// ``Code/dataMissingInCache``.
        public static let dataMissingInCache = Error(code: .dataMissingInCache)
        /// An error with code ``Code/dataLoadingFailed`` wrapping `error`, the loader's error
        /// (``statusCode`` reads the HTTP status from it).
        public static func dataLoadingFailed(_ error: any Swift.Error) -> Error {
            Error(code: .dataLoadingFailed, underlyingError: error)
        }
        /// An error with code ``Code/unscopedCredentials``: the request hook changed `changed`.
        public static func unscopedCredentials(_ changed: UnscopedCredentials) -> Error {
            Error(code: .unscopedCredentials, underlyingError: changed)
        }
        /// An error with code ``Code/dataTooLarge``: `byteCount` bytes exceeded `limit` bytes.
        public static func dataTooLarge(limit: Int, byteCount: Int) -> Error {
            Error(code: .dataTooLarge, limit: limit, byteCount: byteCount)
        }
        /// An error with code ``Code/decodingFailed`` wrapping `error`, the decoder's error.
        public static func decodingFailed(_ error: any Swift.Error) -> Error {
            Error(code: .decodingFailed, underlyingError: error)
        }
        /// An error with code ``Code/processingFailed``: the processor whose identifier is
        /// `processor` threw `error`.
        public static func processingFailed(processor: String, _ error: any Swift.Error) -> Error {
            Error(code: .processingFailed, underlyingError: error, processorIdentifier: processor)
        }

        /// The code, with its context for the codes that carry one, e.g.
        /// `dataLoadingFailed(status 404)` or `dataTooLarge(limit: 100, byteCount: 120)`.
        public var description: String {
            switch code {
            case .dataLoadingFailed:
                if let statusCode { return "dataLoadingFailed(status \(statusCode))" }
                return "dataLoadingFailed(\(underlyingError.map(Self.describe) ?? "unknown"))"
            case .dataTooLarge: return "dataTooLarge(limit: \(limit ?? 0), byteCount: \(byteCount ?? 0))"
            case .unscopedCredentials: return "unscopedCredentials(\(underlyingError.map { "\($0)" } ?? "?"))"
            case .decodingFailed: return "decodingFailed(\(underlyingError.map { "\($0)" } ?? "unknown"))"
            case .processingFailed:
                return "processingFailed(\(processorIdentifier ?? "?"): \(underlyingError.map { "\($0)" } ?? "unknown"))"
            default: return code.description
            }
        }

        /// `error` in one line: a `URLError` by its code's meaning (e.g. `URL error -1001, timed
        /// out`) and libcurl's message when there is one, instead of the `NSError` dump;
        /// anything else as it describes itself.
        static func describe(_ error: any Swift.Error) -> String {
            guard let urlError = error as? URLError else { return "\(error)" }
            let meaning = urlErrorMeanings[urlError.code] ?? "failed"
            var text = "URL error \(urlError.code.rawValue), \(meaning)"
            if let message = (urlError as NSError).userInfo[NSLocalizedDescriptionKey] as? String,
               !message.isEmpty, message != "(null)" {
                text += ": " + message
            }
            return text
        }

        /// Keyed by `URLError.Code`, not by the `NSURLError…` constants: on Linux two of those
        /// differ from the codes `URLError` uses (`NSURLErrorSecureConnectionFailed` is -1201,
        /// `URLError.Code.secureConnectionFailed` -1200; likewise for an untrusted certificate).
        private static let urlErrorMeanings: [URLError.Code: String] = [
            .unknown: "unknown error", .cancelled: "cancelled", .badURL: "bad URL",
            .timedOut: "timed out", .unsupportedURL: "unsupported URL",
            .cannotFindHost: "cannot find host", .cannotConnectToHost: "cannot connect to host",
            .networkConnectionLost: "network connection lost", .dnsLookupFailed: "DNS lookup failed",
            .httpTooManyRedirects: "too many redirects", .resourceUnavailable: "resource unavailable",
            .notConnectedToInternet: "not connected to the internet", .badServerResponse: "bad server response",
            .zeroByteResource: "zero-byte resource", .cannotDecodeRawData: "cannot decode raw data",
            .cannotDecodeContentData: "cannot decode content data (Content-Encoding)",
            .cannotParseResponse: "cannot parse response", .secureConnectionFailed: "secure connection failed",
            .serverCertificateUntrusted: "server certificate untrusted",
            .dataLengthExceedsMaximum: "data length exceeds maximum",
        ]

        /// Matches an error by code, so that `case ImagePipeline.Error.cancelled` works in
        /// `catch` clauses and `switch`es.
        public static func ~= (pattern: Error, value: any Swift.Error) -> Bool {
            (value as? Error)?.code == pattern.code
        }
    }
}
