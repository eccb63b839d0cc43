import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The processors of a request prefix as one memory-key component.
struct ProcessorChainIdentity: Hashable, @unchecked Sendable { // AnyHashable values come from Sendable processors' identities
    let identities: [AnyHashable]
}

/// The cache keys of one request, computed before the graph's lock is taken (processors'
/// identities and the credential digest are computed here, never under the lock).
///
/// Memory keys: image identity (``ImageRequest/imageID``, else the URL) + credential
/// fingerprint + decode size + processors, one per processor prefix (`memory[i]` is the image
/// with the first `i` processors applied). Disk keys carry the same identity and fingerprint:
/// the original data's key has no variant; the processed image's key (only for requests with
/// processors or a decode size) names the decode size and the processors' stable identifiers.
/// The memory key's mark of a request for every frame (``ImageRequest/Options/decodeAllFrames``).
struct AllFramesIdentity: Hashable, Sendable {}

struct RequestCacheKeys: Sendable {
    /// The memory keys of a request's processor prefixes: `keys[i]` is the image with the
    /// first `i` processors applied, the last one the final image. The final key is stored
    /// apart, so a request without processors allocates no array.
    struct MemoryKeys: Sendable {
        private var prefixes: [ImageCacheKey] = []
        /// The final image's key; `nil` without a memory cache.
        private(set) var final: ImageCacheKey?

        init() {}

        init(prefixes: [ImageCacheKey], final: ImageCacheKey) {
            self.prefixes = prefixes
            self.final = final
        }

        var isEmpty: Bool { final == nil }
        var count: Int { final == nil ? 0 : prefixes.count + 1 }

        subscript(index: Int) -> ImageCacheKey {
            if index < prefixes.count { return prefixes[index] }
            guard index == prefixes.count, let final else { preconditionFailure("RequestCacheKeys: memory key \(index) out of range") }
            return final
        }
    }

    /// `memory[i]`: the image with the first `i` processors applied; empty without a memory
    /// cache.
    var memory: MemoryKeys
    /// The original data's disk key; `nil` without a disk cache.
    var diskOriginal: String?
    /// The processed image's disk key; `nil` without a disk cache, and for requests without
    /// processors or decode size (their image is the original).
    var diskProcessed: String?

    /// - Parameter finalMemoryKey: `request`'s ``finalMemoryKey(_:)`` when the caller has it.
    init(_ request: ImageRequest, memory: Bool = true, disk: Bool = true, finalMemoryKey: ImageCacheKey? = nil) {
        let imageID = request.cacheImageID
        let fingerprint = Self.fingerprint(request)
        if memory {
            let count = request.processors.count
            let imageIDHash = request.cacheImageIDHash
            let prefixes = count == 0 ? [] : (0..<count).map {
                Self.memoryKey(request, imageID: imageID, imageIDHash: imageIDHash, fingerprint: fingerprint, processorCount: $0)
            }
            let final = finalMemoryKey
                ?? Self.memoryKey(request, imageID: imageID, imageIDHash: imageIDHash, fingerprint: fingerprint, processorCount: count)
            self.memory = MemoryKeys(prefixes: prefixes, final: final)
        } else {
            self.memory = MemoryKeys()
        }
        diskOriginal = disk ? DataCache.key(imageID: imageID, credentialFingerprint: fingerprint) : nil
        if !disk || (request.processors.isEmpty && request.thumbnail == nil) || request.options.contains(.decodeAllFrames) {
            // An animation is not stored encoded: the disk's processed entries are still images.
            diskProcessed = nil
        } else {
            let identifiers = request.processors.map(\.identifier).joined(separator: ",")
            let variant = "size=\(Self.describe(request.thumbnail));processors=\(identifiers)"
            diskProcessed = DataCache.key(imageID: imageID, credentialFingerprint: fingerprint, variant: variant)
        }
    }

    /// The memory key of `request`'s final image, alone (the synchronous hit path).
    static func finalMemoryKey(_ request: ImageRequest) -> ImageCacheKey {
        memoryKey(request, imageID: request.cacheImageID, imageIDHash: request.cacheImageIDHash, fingerprint: fingerprint(request),
                  processorCount: request.processors.count)
    }

    /// The memory key of the unprocessed full-size image of `request`'s source (its image ID
    /// and credentials, no decode size, no processors).
    static func fullSizeMemoryKey(_ request: ImageRequest) -> ImageCacheKey {
        ImageCacheKey(imageID: request.cacheImageID, imageIDHash: request.cacheImageIDHash, credentialFingerprint: fingerprint(request),
                      decodeSize: nil, processors: [])
    }

    /// The disk key of `request`'s original data, alone.
    static func originalDiskKey(_ request: ImageRequest) -> String {
        DataCache.key(imageID: request.cacheImageID, credentialFingerprint: fingerprint(request))
    }

    private static func memoryKey(_ request: ImageRequest, imageID: String, imageIDHash: Int, fingerprint: String?, processorCount: Int) -> ImageCacheKey {
        var processors: [any Hashable & Sendable] = processorCount == 0
            ? []
            : [ProcessorChainIdentity(identities: request.processors.prefix(processorCount).map(\.hashableIdentifier))]
        // Every frame is another image than the first frame alone: its own entry.
        if request.options.contains(.decodeAllFrames) { processors.insert(AllFramesIdentity(), at: 0) }
        return ImageCacheKey(imageID: imageID, imageIDHash: imageIDHash, credentialFingerprint: fingerprint, decodeSize: request.thumbnail,
                             processors: processors)
    }

    /// The request's credential fingerprint: the one its fetch key computed (``CredentialRule``),
    /// `nil` without credentials.
    private static func fingerprint(_ request: ImageRequest) -> String? {
        request.fetchKey.credentialFingerprint
    }

    private static func describe(_ size: DecodeSize?) -> String {
        switch size {
        case nil: "original"
        case .maxPixelSize(let n)?: "max\(n)"
        case .size(let w, let h, let mode)?: "\(w)x\(h)-\(mode.rawValue)"
        }
    }
}

/// The pipeline's use of its cache layers: lookups and writes counted in the metrics,
/// freshness decided with the configuration's rules, failures reported through the event hook
/// and the logger.
///
/// Every method may run user code (a custom cache, the clock): call them without the graph's
/// lock. Disk methods do I/O: call them from a stage queue's task or worker (the data-loading
/// queue, or a decoding worker for the original bytes' lookup).
final class CacheLayers: Sendable {
    let imageCache: (any ImageCaching)?
    let dataCache: (any DataCaching)?
    /// `imageCache != nil` and `dataCache != nil`, without copying the existentials.
    let hasImageCache: Bool
    let hasDataCache: Bool
    let policy: DataCachePolicy
    let isHTTPCachingRespected: Bool
    /// The heuristic freshness of responses with only a `Last-Modified` (see
    /// ``ImagePipeline/Configuration/heuristicFreshnessFraction``).
    let heuristicFreshnessFraction: Double
    let maximumHeuristicFreshness: TimeInterval
    /// The disk cache's TTL and clock (a ``DataCache``'s own; for other caches 7 days and
    /// wall-clock time).
    let ttl: TimeInterval
    let clock: CacheClock
    private let metrics: MetricsStore
    private let eventHandler: (@Sendable (ImagePipeline.Event) -> Void)?
    private let logger: (@Sendable (String) -> Void)?

    init(configuration: ImagePipeline.Configuration, metrics: MetricsStore) {
        imageCache = configuration.imageCache
        dataCache = configuration.dataCache
        hasImageCache = configuration.imageCache != nil
        hasDataCache = configuration.dataCache != nil
        policy = configuration.dataCachePolicy
        isHTTPCachingRespected = configuration.isHTTPCachingRespected
        heuristicFreshnessFraction = configuration.heuristicFreshnessFraction
        maximumHeuristicFreshness = configuration.maximumHeuristicFreshness
        let disk = configuration.dataCache as? DataCache
        ttl = disk?.ttl ?? 7 * 24 * 3600
        clock = disk?.clock ?? .system
        self.metrics = metrics
        eventHandler = configuration.eventHandler
        logger = configuration.logger
    }

    /// Whether original bytes are written (always for `data(for:)`).
    var storesOriginalData: Bool { policy != .storeEncodedImages }
    /// Whether processed images are encoded and written.
    var storesEncodedImages: Bool { policy != .storeOriginalData }

    // MARK: Memory

    /// Whether `options` let the request read decoded images from memory.
    static func readsMemory(_ options: ImageRequest.Options) -> Bool {
        !options.contains(.disableMemoryCacheReads) && !options.contains(.reloadIgnoringCachedData)
    }

    /// The image in memory for `key`, counted.
    func cachedImage(for key: ImageCacheKey) -> ImageContainer? {
        guard let imageCache else { return nil }
        let image = imageCache[key]
        let hit = image != nil
        metrics.withLock {
            $0.memoryCache.lookups += 1
            if hit { $0.memoryCache.hits += 1 }
        }
        return image
    }

    /// The image stored for `key`, counting nothing in the pipeline's metrics: a lookup on the
    /// pipeline's own behalf (a larger decode to resample), not a request's. Lumen's
    /// ``ImageCache`` neither counts it nor marks the entry used; another cache sees a lookup.
    func peekImage(for key: ImageCacheKey) -> ImageContainer? {
        if let cache = imageCache as? ImageCache { return cache.peekValue(forKey: key) }
        return imageCache?[key]
    }

    /// Stores `image` in memory, counting the write or the oversize rejection; answers whether
    /// the memory cache now holds it (never a preview, nothing without a memory cache).
    @discardableResult
    func storeImage(_ image: ImageContainer, for key: ImageCacheKey) -> Bool {
        guard let imageCache, !image.isPreview else { return false }
        let stored: Bool
        if let cache = imageCache as? ImageCache {
            stored = cache.storeValue(image, forKey: key)
        } else {
            imageCache[key] = image
            stored = true
        }
        metrics.withLock {
            if stored { $0.memoryCache.writes += 1 } else { $0.memoryCacheRejectedOversize += 1 }
        }
        return stored
    }

    // MARK: Disk

    /// Whether `options` let the request read the disk cache.
    static func readsDisk(_ options: ImageRequest.Options) -> Bool {
        !options.contains(.disableDiskCacheReads) && !options.contains(.reloadIgnoringCachedData)
    }

    /// Whether `options` let the request write the disk cache.
    static func writesDisk(_ options: ImageRequest.Options) -> Bool {
        !options.contains(.disableDiskCacheWrites)
    }

    /// The entry on disk for `key` (fresh or not), counted. Does I/O.
    func cachedData(for key: String) -> (data: Data, metadata: CacheMetadata)? {
        guard let dataCache else { return nil }
        let entry = dataCache.cachedData(for: key)
        let hit = entry != nil
        metrics.withLock {
            $0.diskCache.lookups += 1
            if hit { $0.diskCache.hits += 1 }
        }
        return entry
    }

    /// Whether `metadata` may be used without asking the server.
    func isFresh(_ metadata: CacheMetadata) -> Bool {
        metadata.isFresh(
            now: clock.now, ttl: ttl, respectsHTTPCaching: isHTTPCachingRespected,
            heuristicFraction: heuristicFreshnessFraction, maximumHeuristicLifetime: maximumHeuristicFreshness
        )
    }

    /// Writes `data` for `key` with the metadata of `response` (stored now). `no-store`
    /// responses are not written (and any previous entry, now outdated, is removed).
    func storeData(_ data: Data, response: URLResponse?, for key: String) {
        guard let dataCache else { return }
        let now = clock.now
        let metadata: CacheMetadata
        if let http = response as? HTTPURLResponse {
            metadata = CacheMetadata(response: http, now: now)
        } else {
            metadata = CacheMetadata(contentType: response?.mimeType, storedAt: now)
        }
        guard metadata.isStorable else {
            dataCache.removeData(for: key)
            return
        }
        dataCache.storeData(data, metadata: metadata, for: key)
        metrics.withLock { $0.diskCache.writes += 1 }
    }

    /// Writes encoded image bytes for `key`, made from the bytes `response` brought. The
    /// image is as fresh as its original: the response's `Cache-Control` carries over (so a
    /// processed entry is not used past the original's `max-age`, nor at all under `no-cache`:
    /// the stage then goes below, where the original is revalidated), its validators do not
    /// (they name the original's bytes). A `no-store` response's image is not written, and an
    /// older entry is removed. Without an HTTP response the TTL alone decides.
    func storeEncoded(_ data: Data, contentType: String, response: URLResponse?, for key: String) {
        guard let dataCache else { return }
        let now = clock.now
        var metadata = CacheMetadata(contentType: contentType, storedAt: now)
        if let http = response as? HTTPURLResponse {
            let original = CacheMetadata(response: http, now: now)
            guard original.isStorable else {
                dataCache.removeData(for: key)
                return
            }
            metadata.cacheControl = original.cacheControl
        }
        dataCache.storeData(data, metadata: metadata, for: key)
        metrics.withLock { $0.diskCache.writes += 1 }
    }

    /// Whether `response` carries a whole representation that may be stored as the image's
    /// bytes: any non-HTTP response, or HTTP 200 or 203. A `206 Partial Content` (never asked
    /// for) holds part of it; other 2xx codes are not the image either.
    static func isWholeBody(_ response: URLResponse?) -> Bool {
        guard let http = response as? HTTPURLResponse else { return true }
        return http.statusCode == 200 || http.statusCode == 203
    }

    /// Renews the entry for `key` after a `304 Not Modified`; a 304 that says `no-store` removes
    /// it instead (the bytes still answer the request that revalidated them).
    func renew(key: String, metadata: CacheMetadata, response: URLResponse?) {
        guard let dataCache else { return }
        let now = clock.now
        let renewed = (response as? HTTPURLResponse).map { metadata.renewed(with: $0, now: now) }
            ?? metadata.renewed(withHeaders: [:], now: now)
        guard renewed.isStorable else {
            dataCache.removeData(for: key)
            return
        }
        dataCache.renew(key: key, metadata: renewed)
    }

    /// Removes the original bytes stored for `key`: they failed to decode, and a failure is
    /// never cached (queued after any write of them, so it removes that write too).
    func removeUndecodableData(for key: String) {
        dataCache?.removeData(for: key)
    }

    /// Reports a problem a cache absorbed: counted, written to the logger, then sent to the
    /// event hook (so whoever sees the event finds the logger's line already written). Never
    /// call it holding the graph's lock.
    func report(_ failure: DataCache.Failure) {
        metrics.withLock { $0.cacheFailures += 1 }
        logger?("cache failure: \(failure)")
        eventHandler?(.cacheFailure(failure))
    }
}
