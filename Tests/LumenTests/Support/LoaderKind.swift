import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Lumen
import Testing

/// The HTTP loaders the shared loader scenarios (`LoaderTests`, `LoaderRedirectTests`) run
/// against: `DataLoader` over `URLSession` everywhere, `CurlDataLoader` over libcurl on Linux.
/// What only one of them does is tested in its own suite (`CurlDataLoaderTests` for the
/// responses that crash FoundationNetworking).
enum LoaderKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case urlSession
    case curl

    /// The kinds this platform builds.
    static var available: [LoaderKind] {
        #if os(Linux)
        allCases
        #else
        [.urlSession]
        #endif
    }

    var testDescription: String { rawValue }

    /// A fresh loader of this kind with these limits (in seconds) and this validator.
    func make(
        requestTimeout: TimeInterval = 60, resourceTimeout: TimeInterval = 600,
        validate: @escaping DataLoader.Validator = DataLoader.validate
    ) -> any DataLoading {
        switch self {
        case .urlSession:
            let configuration = DataLoader.defaultConfiguration
            configuration.timeoutIntervalForRequest = requestTimeout
            configuration.timeoutIntervalForResource = resourceTimeout
            return DataLoader(configuration: configuration, validate: validate)
        case .curl:
            #if os(Linux)
            return CurlDataLoader(requestTimeout: requestTimeout, resourceTimeout: resourceTimeout, validate: validate)
            #else
            preconditionFailure("CurlDataLoader is built on Linux only")
            #endif
        }
    }

    /// The most connections a loader of this kind opens to one host by default.
    var connectionLimit: Int {
        switch self {
        case .urlSession: DataLoader.defaultConfiguration.httpMaximumConnectionsPerHost
        case .curl:
            #if os(Linux)
            CurlDataLoader.defaultMaximumConnectionsPerHost
            #else
            preconditionFailure("CurlDataLoader is built on Linux only")
            #endif
        }
    }
}
