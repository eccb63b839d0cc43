import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A "load image" stage (the decode, or a processor prefix) with its cache layers: before
/// depending on the stage below it may answer from the disk cache's processed entry, and when
/// it produces an image that some request asked for exactly, it stores it in memory (and, under
/// an encoding policy, encodes it for the disk).
///
/// Intermediate results are stored only when they are some request's final image: the roots
/// that subscribe to this stage as their top mark it with ``markRequested(memoryKey:diskKey:)``.
class ImageStageTask: SharedTask<ImageResult>, @unchecked Sendable { // state guarded by graph.lock
    let request: ImageRequest
    /// The creator's cache keys; `nil` without caches.
    let cacheKeys: RequestCacheKeys?
    /// Whether this stage was created as its creator's final stage and reads the processed
    /// entry from disk first (encoding policies only).
    let readsProcessedFromDisk: Bool
    @exclusivity(unchecked) private var requestedMemoryKeys = RequestedKeys<ImageCacheKey>()
    @exclusivity(unchecked) private var requestedDiskKeys = RequestedKeys<String>()
    /// Progressive previews in flight (see ProgressiveDecoding.swift); `nil` until the first.
    @exclusivity(unchecked) var previews: PreviewState?

    /// `readsDisk: false`: never read the processed entry (a stage that makes its image from
    /// memory, which is cheaper than the disk and never waits behind downloads).
    init(graph: WorkGraph, request: ImageRequest, cacheKeys: RequestCacheKeys?, isFinal: Bool, stage: ImagePipeline.Stage, readsDisk: Bool = true) {
        self.request = request
        self.cacheKeys = cacheKeys
        let caches = graph.caches
        self.readsProcessedFromDisk = readsDisk && isFinal && caches.hasDataCache && caches.storesEncodedImages
            && cacheKeys?.diskProcessed != nil && CacheLayers.readsDisk(request.options)
        super.init(graph: graph, stage: stage)
    }

    /// Records that a request wants this stage's image as its final image, under its own keys
    /// (requests sharing a stage may differ in `imageID`). Pass `nil` for a layer the request
    /// may not write (its own cache options): subscribers' permissions are applied one by one.
    /// Must hold the graph's lock.
    final func markRequested(memoryKey: ImageCacheKey?, diskKey: String?) {
        if let memoryKey { requestedMemoryKeys.insert(memoryKey) }
        if let diskKey { requestedDiskKeys.insert(diskKey) }
    }

    override final func start() {
        guard readsProcessedFromDisk, let key = cacheKeys?.diskProcessed else {
            startBelow()
            return
        }
        // Disk I/O never runs under the graph's lock, and never waits behind downloads: read on
        // a decoding worker (as the fetch stage reads original bytes), never in a data-loading
        // slot, which stalled downloads may hold for as long as they stall.
        let queue = graph.configuration.decodingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in
            let caches = graph.caches
            if let entry = caches.cachedData(for: key), caches.isFresh(entry.metadata) {
                graph.sync {
                    operation = nil
                    guard !isDisposed else { return }
                    decodeProcessed(entry.data, key: key)
                }
            } else {
                graph.sync {
                    operation = nil
                    guard !isDisposed else { return }
                    startBelow()
                }
            }
        }
        operation = (queue, item)
    }

    /// Subscribes to the stage below. Must hold the graph's lock.
    func startBelow() { preconditionFailure("ImageStageTask.startBelow() must be overridden") }

    /// Decodes a processed entry read from disk on a decoding worker; an undecodable entry is
    /// removed and the stage goes on as a miss. Must hold the graph's lock.
    private func decodeProcessed(_ data: Data, key: String) {
        let configuration = graph.configuration
        let options = DecodeOptions(size: nil, maximumPixelCount: configuration.maximumDecodedPixelCount)
        let context = ImageDecodingContext(request: request, urlResponse: nil, options: options)
        let queue = configuration.decodingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in
            graph.metricsStore.withLock { $0.decodes += 1 }
            do {
                let container = try configuration.decoder.decode(data, context: context)
                deliver(ImageResult(container: container, urlResponse: nil, cacheType: .disk), isEncodedOnDisk: true)
            } catch {
                graph.caches.dataCache?.removeData(for: key)
                graph.sync {
                    operation = nil
                    guard !isDisposed else { return }
                    startBelow()
                }
            }
        }
        operation = (queue, item)
    }

    /// Delivers an image produced on a worker: stores it in the layers that want it, then
    /// finishes the stage. Must not hold the graph's lock.
    final func deliver(_ result: ImageResult, isEncodedOnDisk: Bool = false) {
        let caches = graph.caches
        // Stored before the stage finishes, so that a request made as soon as this one's
        // response arrives finds the image in memory.
        let wantsKeys = caches.hasImageCache || (caches.hasDataCache && caches.storesEncodedImages)
        let (memoryKeys, diskKeyList) = wantsKeys
            ? graph.sync { (requestedMemoryKeys, requestedDiskKeys) }
            : (RequestedKeys(), RequestedKeys())
        let diskKeys = diskKeyList.elements
        // Only subscribers allowed to write a layer marked a key for it.
        var storedInMemory = false
        memoryKeys.forEach { if caches.storeImage(result.container, for: $0) { storedInMemory = true } }
        if !isEncodedOnDisk, !diskKeys.isEmpty, caches.hasDataCache, caches.storesEncodedImages, !result.container.isPreview {
            encode(result.container.image, response: result.urlResponse, for: diskKeys)
        }
        graph.sync {
            // Counted under the lock, after the store and as the stage leaves its pool: a
            // request that missed both looks again (see `WorkGraph.finishedStages`). A stage
            // that stored nothing leaves nothing new to find, and counts nothing.
            if storedInMemory { graph.finishedStages.add(1, ordering: .releasing) }
            operation = nil
            finish(with: result)
        }
    }

    /// Encodes `image` on the encoding queue (JPEG when opaque, PNG with alpha) and writes it
    /// under `keys`, as fresh as `response` (the original's) allows. Not tied to the stage's
    /// life: the response does not wait for it.
    private func encode(_ image: Bitmap, response: URLResponse?, for keys: [String]) {
        let caches = graph.caches
        let directory = (caches.dataCache as? DataCache)?.directory.path ?? ""
        _ = graph.configuration.encodingQueue.enqueue(priority: priority) {
            let hasAlpha = image.format.hasAlpha
            do {
                let data = try image.encode(as: hasAlpha ? .png : .jpeg(quality: 90))
                for key in keys { caches.storeEncoded(data, contentType: hasAlpha ? "image/png" : "image/jpeg", response: response, for: key) }
            } catch {
                caches.report(DataCache.Failure(kind: .writeFailed, key: keys.first, path: directory, errorCode: nil, reason: "encoding failed: \(error)"))
            }
        }
    }
}

/// The distinct keys the subscribers of a stage asked it to store its image under: almost
/// always one, kept inline (no array allocated per stage), then any others.
struct RequestedKeys<Key: Equatable & Sendable>: Sendable {
    private var first: Key?
    private var others: [Key] = []

    /// Adds `key` unless it is there already.
    mutating func insert(_ key: Key) {
        guard let first else {
            self.first = key
            return
        }
        if first != key && !others.contains(key) { others.append(key) }
    }

    func forEach(_ body: (Key) -> Void) {
        guard let first else { return }
        body(first)
        others.forEach(body)
    }

    var elements: [Key] {
        guard let first else { return [] }
        return [first] + others
    }
}
