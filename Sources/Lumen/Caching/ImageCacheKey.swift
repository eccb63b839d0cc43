import Foundation

/// The identity of a decoded image in the memory cache.
///
/// Two requests share an entry only when all four parts are equal: the image identity
/// (`imageID`, else the URL string), the fingerprint of the credentials the request carried
/// (so one user's image never answers another user's request), the decode size, and the
/// processors' hashable identities in order.
public struct ImageCacheKey: Hashable, Sendable {
    /// The image identity: the request's `imageID`, else its URL string.
    public let imageID: String
    /// A digest of the request's credential headers, `nil` when it carried none
    /// (see ``credentialFingerprint(for:markedHeaders:)``).
    public let credentialFingerprint: String?
    /// The size the image was decoded at; `nil` for full size.
    public let decodeSize: DecodeSize?
    private let processorIdentities: [ProcessorIdentity]

    /// The processors' hashable identities, in the order they run.
    public var processors: [AnyHashable] { processorIdentities.map(\.base) }

    /// Creates a key.
    ///
    /// - Parameter processors: each processor's cheap hashable identity (`Sendable`, so the key
    ///   can cross threads), in the order the processors run; `[]` for the unprocessed image.
    public init(
        imageID: String,
        credentialFingerprint: String? = nil,
        decodeSize: DecodeSize? = nil,
        processors: [any Hashable & Sendable] = []
    ) {
        self.imageID = imageID
        self.credentialFingerprint = credentialFingerprint
        self.decodeSize = decodeSize
        self.processorIdentities = processors.map { ProcessorIdentity($0) }
        var hasher = Hasher()
        hasher.combine(imageID)
        hasher.combine(credentialFingerprint)
        hasher.combine(decodeSize)
        hasher.combine(processorIdentities)
        self.precomputedHash = hasher.finalize()
    }

    /// The hash of all four parts, computed once: the hit path hashes one `Int`.
    private let precomputedHash: Int

    public func hash(into hasher: inout Hasher) {
        hasher.combine(precomputedHash)
    }

    public static func == (lhs: ImageCacheKey, rhs: ImageCacheKey) -> Bool {
        lhs.precomputedHash == rhs.precomputedHash
            && lhs.imageID == rhs.imageID
            && lhs.credentialFingerprint == rhs.credentialFingerprint
            && lhs.decodeSize == rhs.decodeSize
            && lhs.processorIdentities == rhs.processorIdentities
    }

    /// Header names that always count as credentials (compared case-insensitively).
    public static let credentialHeaderNames: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    /// A SHA-256 (lowercase hex) of the credential headers in `headers`, or `nil` when the
    /// request carries none.
    ///
    /// Credential headers are `Authorization`, `Cookie`, `Proxy-Authorization` and every name
    /// in `markedHeaders` (header names compare case-insensitively). Names are lowercased,
    /// values trimmed of surrounding whitespace, headers with an empty value ignored, and the
    /// pairs sorted by name and length-prefixed before hashing, so the fingerprint does not
    /// depend on header order or name case, and different credentials give different
    /// fingerprints. Non-credential headers never change it.
    public static func credentialFingerprint(
        for headers: [String: String],
        markedHeaders: Set<String> = []
    ) -> String? {
        let marked = Set(markedHeaders.map { $0.lowercased() }).union(credentialHeaderNames)
        var pairs: [(name: String, value: String)] = []
        for (name, value) in headers {
            let lower = name.lowercased()
            guard marked.contains(lower) else { continue }
            let trimmed = value.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            pairs.append((lower, trimmed))
        }
        guard !pairs.isEmpty else { return nil }
        // Two spellings of one name ("Cookie" and "cookie") both end up here; sort by value too
        // so the order is still canonical.
        pairs.sort { $0.name != $1.name ? $0.name < $1.name : $0.value < $1.value }
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

/// A processor identity, type-erased for hashing.
private struct ProcessorIdentity: Hashable, @unchecked Sendable {
    // Unchecked: the only initializer takes a `Sendable` value; `AnyHashable` just erases that.
    let base: AnyHashable

    init(_ value: any Hashable & Sendable) {
        base = AnyHashable(value)
    }
}
