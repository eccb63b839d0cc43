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
    /// - Parameters:
    ///   - imageID: the image identity: the request's `imageID`, else its URL string.
    ///   - credentialFingerprint: the digest of the request's credential headers
    ///     (``credentialFingerprint(for:markedHeaders:)``); `nil` when it carried none.
    ///   - decodeSize: the size the image is decoded at; `nil` for full size.
    ///   - processors: each processor's cheap hashable identity (`Sendable`, so the key can
    ///     cross threads), in the order the processors run; `[]` for the unprocessed image.
    public init(
        imageID: String,
        credentialFingerprint: String? = nil,
        decodeSize: DecodeSize? = nil,
        processors: [any Hashable & Sendable] = []
    ) {
        self.init(imageID: imageID, imageIDHash: imageID.hashValue, credentialFingerprint: credentialFingerprint,
                  decodeSize: decodeSize, processors: processors)
    }

    /// A key whose `imageID` was hashed already (`imageIDHash == imageID.hashValue`): the
    /// pipeline hashes a request's URL once for its fetch key and its memory key.
    init(
        imageID: String,
        imageIDHash: Int,
        credentialFingerprint: String?,
        decodeSize: DecodeSize?,
        processors: [any Hashable & Sendable]
    ) {
        assert(imageIDHash == imageID.hashValue, "ImageCacheKey: imageIDHash is not imageID's hash")
        self.imageID = imageID
        self.credentialFingerprint = credentialFingerprint
        self.decodeSize = decodeSize
        self.processorIdentities = processors.isEmpty ? [] : processors.map { ProcessorIdentity($0) }
        var hasher = Hasher()
        hasher.combine(imageIDHash)
        hasher.combine(credentialFingerprint)
        hasher.combine(decodeSize)
        hasher.combine(processorIdentities)
        self.precomputedHash = hasher.finalize()
    }

    /// The hash of all four parts, computed once: the hit path hashes one `Int`.
    private let precomputedHash: Int

    /// Feeds the hash of all four parts, computed when the key was made, to `hasher`.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(precomputedHash)
    }

    /// Whether all four parts are equal (processors compared by hashable identity, in order).
    public static func == (lhs: ImageCacheKey, rhs: ImageCacheKey) -> Bool {
        lhs.precomputedHash == rhs.precomputedHash
            && lhs.imageID == rhs.imageID
            && lhs.credentialFingerprint == rhs.credentialFingerprint
            && lhs.decodeSize == rhs.decodeSize
            && lhs.processorIdentities == rhs.processorIdentities
    }

    /// Header names that always count as credentials (compared case-insensitively).
    public static let credentialHeaderNames: Set<String> = CredentialRule.standardNames

    /// Header names that ask the server for another representation of the image — part of it
    /// (`Range`, `If-Range`) or another format or language (`Accept`, `Accept-Language`) — and
    /// are therefore keyed like credentials (compared case-insensitively).
    public static let representationHeaderNames: Set<String> = CredentialRule.representationNames

    /// A SHA-256 (lowercase hex) of the credential and representation headers in `headers`,
    /// or `nil` when the request carries none.
    ///
    /// The pipeline's one rule for the headers that change what the server answers (the
    /// fetch key, the memory and disk keys, `FetchImage` and the prefetcher all use it):
    /// credential headers are `Authorization`, `Cookie`, `Proxy-Authorization` and every name
    /// in `markedHeaders`; representation headers are ``representationHeaderNames`` (names
    /// compare case-insensitively). Values are trimmed of surrounding whitespace and then
    /// compared exactly; a header whose trimmed value is empty is the same as no header. The
    /// fingerprint does not depend on header order or name case, different values give
    /// different fingerprints, and other headers (`User-Agent`, tracing headers) never change
    /// it. `scope`: the request's ``ImageRequest/credentialScope``, which counts like one more
    /// credential.
    public static func credentialFingerprint(
        for headers: [String: String],
        markedHeaders: Set<String> = [],
        scope: String? = nil
    ) -> String? {
        CredentialRule.fingerprint(headers: headers, markedHeaders: markedHeaders, scope: scope)
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
