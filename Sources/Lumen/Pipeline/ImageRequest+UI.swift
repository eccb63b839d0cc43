import Foundation

/// What LumenUI's `FetchImage` asks of a request beyond its public API (`package` access).
extension ImageRequest {
    /// What makes two requests show the same image, for a view deciding whether to reload:
    /// the source with the headers that identify the caller (a different `Authorization`
    /// is a different image), the image ID, the decode size and the processors. The priority
    /// is not part of it.
    package struct ShownImageIdentity: Hashable, Sendable {
        let fetch: FetchKey
        let image: ImageCacheKey
    }

    /// This request's ``ShownImageIdentity``.
    package var shownImageIdentity: ShownImageIdentity {
        ShownImageIdentity(fetch: fetchKey, image: RequestCacheKeys.finalMemoryKey(self))
    }

    /// Whether this request may read the memory cache (its options allow it).
    package var readsMemoryCache: Bool { CacheLayers.readsMemory(options) }
}
