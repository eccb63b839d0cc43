import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension ImagePipeline {
    /// What ``Configuration/willLoadData`` learns about a load besides its `URLRequest`.
    public struct LoadContext: Sendable {
        /// The request's ``ImageRequest/credentialScope``: whose credentials to add. Every
        /// request sharing this load has this same scope.
        public let credentialScope: String?
        /// 1 for the first attempt, 2 for the first retry, and so on: a hook that refreshes
        /// a token on a retry can tell.
        public let attempt: Int
    }

    /// What a ``Configuration/willLoadData`` hook changed on a request without an
    /// ``ImageRequest/credentialScope`` (the underlying error of
    /// ``ImagePipeline/Error/Code/unscopedCredentials``). It names headers, never their
    /// values: those may be secrets.
    public struct UnscopedCredentials: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        /// The lowercased names of the headers the hook set, changed or removed, sorted.
        public let headers: [String]
        /// Whether the hook changed the URL.
        public let url: Bool
        /// Whether the hook changed the method or the body.
        public let methodOrBody: Bool

        public var description: String {
            var parts = headers.map { "header \($0)" }
            if url { parts.append("the URL") }
            if methodOrBody { parts.append("the method or body") }
            return "willLoadData changed \(parts.joined(separator: ", ")) on a request without a credentialScope"
        }
    }
}

/// The rule that keeps what the request hook adds for one user out of another's work: the
/// hook's input is exactly what the fetch is keyed on (the request as the graph shares it,
/// and its credential scope), so the requests sharing one load are equal in everything the
/// hook sees. A hook that adds something identifying to a request without a scope would make
/// one user's token answer every user's request; that load fails instead.
enum RequestHookRule {
    /// Headers a hook may set on a request without a scope: they describe the client or the
    /// transfer, never a user.
    static let neutralHeaderNames: Set<String> = [
        "user-agent", "accept-encoding", "cache-control", "pragma", "x-request-id", "traceparent", "tracestate",
    ]

    /// What the hook changed from `before` to `after` that needs a credential scope; `nil`
    /// when nothing did.
    static func unscopedChanges(from before: URLRequest, to after: URLRequest) -> ImagePipeline.UnscopedCredentials? {
        let old = lowercased(before.allHTTPHeaderFields), new = lowercased(after.allHTTPHeaderFields)
        let headers = Set(old.keys).union(new.keys)
            .filter { !neutralHeaderNames.contains($0) && old[$0] != new[$0] }
            .sorted()
        let url = before.url?.absoluteString != after.url?.absoluteString
        let methodOrBody = (before.httpMethod ?? "GET") != (after.httpMethod ?? "GET") || before.httpBody != after.httpBody
        guard !headers.isEmpty || url || methodOrBody else { return nil }
        return ImagePipeline.UnscopedCredentials(headers: headers, url: url, methodOrBody: methodOrBody)
    }

    /// `headers` by lowercased name (two spellings of one name joined, in a stable order).
    private static func lowercased(_ headers: [String: String]?) -> [String: String] {
        var result: [String: String] = [:]
        for (name, value) in (headers ?? [:]).sorted(by: { $0.key < $1.key }) {
            result[name.lowercased()] = result[name.lowercased()].map { $0 + "," + value } ?? value
        }
        return result
    }
}
