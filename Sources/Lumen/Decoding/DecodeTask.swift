import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The decode stage: subscribes to the fetch stage, then decodes the bytes at the request's
/// decode size on a decoding worker thread — or, given a larger decode of the same image
/// (``WorkGraph/derivationSource(for:)``), resamples that instead: no fetch, no decode.
final class DecodeTask: ImageStageTask, @unchecked Sendable { // state guarded by graph.lock
    let key: DecodeKey
    /// A larger decode of the same image to resample instead of fetching and decoding.
    private let source: ImageContainer?
    /// The newest progressive preview that arrived while no `events` stream was open (see
    /// ``WorkGraph/addPreviewReader()``): its length in the fetch's body, not the bytes (held,
    /// they would make the next chunk's append copy the whole body).
    @exclusivity(unchecked) var skippedPreview: (length: Int, urlResponse: URLResponse?)?
    /// Whether what it decodes is in hand: the fetched bytes arrived, or it resamples a larger
    /// decode. Until then it waits for its fetch (a download, say).
    @exclusivity(unchecked) private(set) var hasInput: Bool

    init(graph: WorkGraph, request: ImageRequest, key: DecodeKey, cacheKeys: RequestCacheKeys?, isFinal: Bool, source: ImageContainer? = nil) {
        self.key = key
        self.source = source
        self.hasInput = source != nil
        super.init(graph: graph, request: request, cacheKeys: cacheKeys, isFinal: isFinal, stage: .decode, readsDisk: source == nil)
    }

    /// Whether a request may join this task: one made from a memory-cached image answers only
    /// requests that may read the memory cache.
    func mayBeJoined(by request: ImageRequest) -> Bool {
        source == nil || CacheLayers.readsMemory(request.options)
    }

    override var keyDescription: String { key.description }
    override var poolKey: StagePoolKey { .decode(key) }

    override func startBelow() {
        if let source {
            resample(source)
            return
        }
        let fetch = graph.fetchTask(for: request, key: key.fetch, diskKey: cacheKeys?.diskOriginal)
        // Under `.storeEncodedImages`, original bytes are written only for requests that show
        // the original itself (no processors, no decode size): their "processed" image is it.
        if request.processors.isEmpty && request.thumbnail == nil { fetch.wantsOriginalOnDisk = true }
        if graph.configuration.isProgressiveDecodingEnabled { fetch.enablePreviews() }
        dependency = fetch.subscribe(priority: priority) { [self] event in
            switch event {
            case .progress(let progress): send(progress: progress)
            case .preview(let partial): decodePreview(partial)
            case .failure(let error):
                dropSkippedPreview()
                fail(error)
            case .value(let fetched):
                dependency = nil
                hasInput = true
                dropSkippedPreview()
                supersedePreviews()
                decode(fetched)
            }
        }
    }

    private func decode(_ fetched: FetchedData) {
        let configuration = graph.configuration
        var options = DecodeOptions(size: request.thumbnail, maximumPixelCount: configuration.maximumDecodedPixelCount)
        // Set when the last subscriber leaves while the decode runs: the decoder stops part-way
        // instead of finishing an image nobody waits for.
        let cancellation = DecodeCancellation()
        options.cancellation = cancellation
        let context = ImageDecodingContext(request: request, urlResponse: fetched.urlResponse, options: options)
        let decoder = configuration.decoder
        let queue = configuration.decodingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock, cancellation: cancellation) { [self] in
            graph.metricsStore.withLock { $0.decodes += 1 }
            do {
                let container = try decoder.decode(fetched.data, context: context)
                deliver(ImageResult(container: container, urlResponse: fetched.urlResponse, cacheType: fetched.cacheType))
            } catch where cancellation.isCancelled {
                // The task was cancelled (and has left its pool): nobody gets this error.
                graph.metricsStore.withLock { $0.decodesInterrupted += 1 }
                graph.sync { operation = nil }
            } catch {
                // Bytes that do not decode are not kept on disk to fail again (an HTML error page
                // served as an image, say): the next request fetches them afresh. An image over
                // the pixel limit is whole, though: its bytes stay (a new download would be
                // refused the same way).
                if let diskKey = cacheKeys?.diskOriginal, !Self.isOverLimit(error) {
                    graph.caches.removeUndecodableData(for: diskKey)
                }
                graph.sync {
                    operation = nil
                    fail(.decodingFailed(error))
                }
            }
        }
        operation = (queue, item)
    }

    /// Whether `error` is the decoder refusing an image over the pixel limit.
    private static func isOverLimit(_ error: any Error) -> Bool {
        if case .tooLarge? = error as? ImagingError { return true }
        return false
    }

    /// Makes the image from `source`, a larger decode of it, on a decoding worker: what a
    /// decode at the request's size gives (resampled, centre-cropped for an aspect fill, never
    /// upscaled), without the bytes.
    private func resample(_ source: ImageContainer) {
        let options = DecodeOptions(size: request.thumbnail, maximumPixelCount: graph.configuration.maximumDecodedPixelCount)
        let queue = graph.configuration.decodingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in
            graph.metricsStore.withLock { $0.resampledFromMemory += 1 }
            do {
                var container = source
                container.image = try ImageDecoder.resize(source.image, options: options)
                container.data = nil
                deliver(ImageResult(container: container, urlResponse: nil, cacheType: .memory))
            } catch {
                graph.sync {
                    operation = nil
                    fail(.decodingFailed(error))
                }
            }
        }
        operation = (queue, item)
    }
}
