import Foundation

/// The one definition of which request headers are credentials and of their canonical form.
enum CredentialRule {
    /// Header names that always count as credentials (lowercased).
    static let standardNames: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    /// Header names that select another representation (lowercased): keyed like credentials,
    /// so that a request for part of an image, or for another format, never shares bytes with
    /// a request for the whole image.
    static let representationNames: Set<String> = ["range", "if-range", "accept", "accept-language"]

    /// Every name keyed without being marked.
    static let keyedNames = standardNames.union(representationNames)

    /// The credential headers in `headers`, canonical: names lowercased, values trimmed of
    /// surrounding whitespace, empty values dropped, sorted by name then value.
    static func canonicalPairs(headers: [String: String], markedHeaders: Set<String>) -> [(name: String, value: String)] {
        guard !headers.isEmpty else { return [] }
        let marked = markedHeaders.isEmpty ? keyedNames : keyedNames.union(markedHeaders.map { $0.lowercased() })
        var pairs: [(name: String, value: String)] = []
        for (name, value) in headers {
            let lower = name.lowercased()
            guard marked.contains(lower) else { continue }
            let trimmed = value.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            pairs.append((lower, trimmed))
        }
        // Two spellings of one name ("Cookie" and "cookie") both end up here; sort by value too
        // so the order is still canonical.
        pairs.sort { $0.name != $1.name ? $0.name < $1.name : $0.value < $1.value }
        return pairs
    }

    /// The name under which ``ImageRequest/credentialScope`` joins the pairs: a space cannot
    /// be in a header name, so no header can pass for a scope.
    static let scopePairName = "credential scope"

    /// The SHA-256 (lowercase hex) of ``canonicalPairs(headers:markedHeaders:)`` and, when
    /// there is one, the request's credential scope; `nil` when there are none.
    static func fingerprint(headers: [String: String], markedHeaders: Set<String>, scope: String? = nil) -> String? {
        var pairs = canonicalPairs(headers: headers, markedHeaders: markedHeaders)
        if let scope { pairs.append((scopePairName, scope)) }
        guard !pairs.isEmpty else { return nil }
        var digest = SHA256Digest()
        digest.update("lumen-credentials-v1\n")
        for pair in pairs {
            // Length prefixes make the encoding unambiguous whatever bytes the values hold.
            digest.update("\(pair.name.utf8.count):\(pair.name)\(pair.value.utf8.count):\(pair.value)")
        }
        // Answering nil here would let one user's entry answer another's: fail loudly instead.
        guard let bytes = digest.finalize() else { preconditionFailure("SHA-256: libcrypto failed") }
        return SHA256Digest.hex(bytes)
    }
}
