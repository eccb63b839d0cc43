import Foundation

extension DataCache {
    /// The disk-cache key for an image: its identity, the requester's credential fingerprint
    /// and, for processed images, a variant naming the processing.
    ///
    /// - Parameters:
    ///   - imageID: the request's `imageID`, else its URL string (as for ``ImageCacheKey``).
    ///   - credentialFingerprint: ``ImageCacheKey/credentialFingerprint(for:markedHeaders:)`` of
    ///     the request, so that one user's bytes never answer another user's request.
    ///   - variant: `nil` for the original bytes; for encoded processed images, a stable string
    ///     built from the decode size and the processors' identifiers.
    ///
    /// Every part is length-prefixed, so no choice of `imageID` (a URL with a crafted fragment,
    /// say) can produce another request's key.
    public static func key(imageID: String, credentialFingerprint: String? = nil, variant: String? = nil) -> String {
        func part(_ tag: String, _ value: String?) -> String {
            guard let value else { return "\(tag)-" }
            return "\(tag)\(value.utf8.count):\(value)"
        }
        return "lumen1;" + part("id", imageID) + ";" + part("cred", credentialFingerprint) + ";" + part("variant", variant)
    }
}
