import Foundation

extension ImagePipeline {
    /// The unprocessed full-size image of `request`'s source (same image ID and credentials)
    /// when the memory cache holds it and a request at a decode size may be made from it by
    /// resampling (``WorkGraph/resamplableFullSizeImage(for:)``). Counts no lookup.
    package func resamplableFullSizeImage(for request: ImageRequest) -> ImageContainer? {
        graph.resamplableFullSizeImage(for: request)
    }

    /// Whether a request at a decode size can be made by resampling a larger decode of the
    /// image set as its ``ImageRequest/derivationSource`` (the default decoder).
    package var resamplesDerivationSources: Bool { graph.resamplesDerivationSources }

    /// An image task for `request` that joins work already running for its final image — a
    /// decode, or its last processing step, that it may join (a prefetch's, another
    /// request's) — or `nil`, starting nothing, when it would start work of its own. The look
    /// and the subscription are one critical section: the work cannot end in between.
    /// `requiringInput`: only a decode whose input is in hand (``WorkGraph/joinsRunningWork(_:keys:decodeKey:requiringInput:)``),
    /// for a caller that holds the bytes and must not wait for another download. For
    /// ``FetchImage``, which decodes the bytes it holds itself unless someone already decodes
    /// the image at that size, and downloads them only if nobody is decoding the image.
    package func imageTaskJoiningRunningWork(for request: ImageRequest, requiringInput: Bool = false) -> ImageTask? {
        let request = bucketed(request)
        let finalKey = graph.caches.hasImageCache ? RequestCacheKeys.finalMemoryKey(request) : nil
        let keys = graph.requestKeys(for: request, finalMemoryKey: finalKey)
        let task = ImageTask(request: request, graph: graph)
        let joined = graph.sync {
            guard !graph.isInvalidated, graph.joinsRunningWork(request, keys: keys, decodeKey: nil, requiringInput: requiringInput) else {
                return false
            }
            task.startLocked(keys: keys)
            return true
        }
        return joined ? task : nil
    }

    /// Whether a request's ``ImageRequest/derivationSource`` set to `container` is honoured:
    /// the pipeline makes the decode by resampling it (default decoder, final still image)
    /// rather than by fetching and decoding.
    package func canResample(_ container: ImageContainer) -> Bool {
        graph.isResamplable(container)
    }

    /// The pipeline's cache layers (decoded images in memory, bytes on disk), looked up and
    /// managed by request, with the same keys the pipeline's stages use.
    ///
    /// Memory keys are the image identity (``ImageRequest/imageID``, else the URL), a
    /// fingerprint of the request's credentials (when it carries any), the decode size and the
    /// processors; disk keys carry the same identity and fingerprint (plus, for processed
    /// images, the decode size and the processors' identifiers). Two requests with the same
    /// `imageID` — signed URLs for one object, say — share entries: setting `imageID` states
    /// that the bytes are the same for everyone holding those credentials.
    ///
    /// With ``Configuration/isDecodeSizeBucketingEnabled`` a request's decode size is rounded
    /// to its bucket before its keys are made, as it is when the request is loaded.
    ///
    /// Memory operations are synchronous and lock-protected (no actor hop); disk operations do
    /// file I/O on the caller's thread.
    public struct Cache: Sendable {
        let pipeline: ImagePipeline

        private var caches: CacheLayers { pipeline.graph.caches }

        /// The decoded image cached in memory for `request` (its final image: decode size and
        /// processors applied). Synchronous: no actor hop. Setting stores it (counted as a
        /// memory write), `nil` removes it. Ignores the request's cache options.
        public subscript(request: ImageRequest) -> ImageContainer? {
            get { caches.cachedImage(for: RequestCacheKeys.finalMemoryKey(pipeline.bucketed(request))) }
            nonmutating set {
                let key = RequestCacheKeys.finalMemoryKey(pipeline.bucketed(request))
                if let newValue {
                    caches.storeImage(newValue, for: key)
                } else {
                    caches.imageCache?.removeValue(forKey: key)
                }
            }
        }

        /// Whether a decoded image for `request` is in memory.
        public func containsCachedImage(for request: ImageRequest) -> Bool {
            guard let imageCache = caches.imageCache else { return false }
            return imageCache[RequestCacheKeys.finalMemoryKey(pipeline.bucketed(request))] != nil
        }

        /// Whether the bytes `request` would fetch (its original data) are on disk.
        public func containsData(for request: ImageRequest) -> Bool {
            caches.dataCache?.containsData(for: RequestCacheKeys.originalDiskKey(request)) ?? false
        }

        /// The original bytes for `request` on disk, fresh or not; `nil` on a miss or without a
        /// disk cache. Reads the file on the caller's thread.
        public func cachedData(for request: ImageRequest) -> Data? {
            caches.dataCache?.cachedData(for: RequestCacheKeys.originalDiskKey(request))?.data
        }

        /// Stores `data` as the original bytes of `request` on disk (no HTTP metadata: the
        /// disk cache's TTL decides its freshness).
        public func storeCachedData(_ data: Data, for request: ImageRequest) {
            caches.storeData(data, response: nil, for: RequestCacheKeys.originalDiskKey(request))
        }

        /// Removes `request`'s entries: its final image from memory, its original bytes and its
        /// processed image from disk.
        public func removeAll(for request: ImageRequest) {
            let keys = RequestCacheKeys(pipeline.bucketed(request))
            caches.imageCache?.removeValue(forKey: keys.memory[request.processors.count])
            if let dataCache = caches.dataCache, let original = keys.diskOriginal {
                dataCache.removeData(for: original)
                if let processed = keys.diskProcessed { dataCache.removeData(for: processed) }
            }
        }

        /// Empties both layers.
        public func removeAll() {
            caches.imageCache?.removeAll()
            caches.dataCache?.removeAll()
        }

        /// Empties the memory layer and keeps the bytes on disk.
        public func removeAllFromMemory() {
            caches.imageCache?.removeAll()
        }
    }

    /// The pipeline's cache layers.
    public var cache: Cache { Cache(pipeline: self) }
}
