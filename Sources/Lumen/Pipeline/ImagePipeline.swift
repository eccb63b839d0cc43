import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Loads, decodes and processes images, doing equivalent work once.
///
/// A request is a chain of stages — fetch the original data, decode it at a size, apply each
/// processor — and each stage is shared work in a pool keyed by exactly what changes its
/// result (see ``ImageRequest``). A request joins running work wherever its inputs agree
/// with another's: eight requests for one URL make one download and one decode; the same URL
/// at two sizes makes one download and two decodes; `[a]` and `[a, b]` apply `a` once.
///
/// Work lives as long as somebody needs it: cancelling a request removes its subscription,
/// and a stage is cancelled only when its last subscriber leaves. A stage runs at the highest
/// priority among its subscribers. A failed stage leaves its pool at once, so the next request
/// starts fresh. With ``Configuration/isTaskCoalescingEnabled`` off, every request builds its
/// own chain.
///
/// Caching is not coalescing: caches reuse results that exist. Before any work starts, the
/// memory cache answers a request whose final image it holds, synchronously (see
/// ``imageTask(with:)``). Otherwise each stage consults the layer that fits it before depending
/// on the stage below: the processed image on disk (under an encoding
/// ``Configuration/dataCachePolicy``), then an intermediate processor prefix in memory, then
/// the original bytes on disk — revalidated with a conditional request when stale — and only
/// then the network. ``ImageResponse/cacheType`` says which layer answered. Looking up the
/// original bytes on disk and decoding run on the decoding queue's workers (a hit is usually
/// decoded on the worker that read it), never under the graph's lock. A broken disk cache never fails a request: it is reported through
/// ``Configuration/eventHandler`` (``Event/cacheFailure(_:)``) and the logger.
///
/// ```swift
/// let pipeline = ImagePipeline(configuration: .init())
/// let response = try await pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(320)))
/// ```
public final class ImagePipeline: Sendable {
    /// The configuration the pipeline was created with.
    public let configuration: Configuration
    let graph: WorkGraph

    /// A pipeline with the default configuration.
    public static let shared = ImagePipeline(configuration: Configuration())

    /// The token of this pipeline's listener on its ``DataCache``'s failures.
    private let failureObserver: Int?

    /// Creates a pipeline.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        let graph = WorkGraph(configuration: configuration)
        self.graph = graph
        if let dataCache = configuration.dataCache as? DataCache {
            // Weak: the cache may outlive the pipeline (another pipeline over the same cache).
            failureObserver = dataCache.failureObservers.add { [weak caches = graph.caches] failure in
                caches?.report(failure)
            }
        } else {
            failureObserver = nil
        }
    }

    /// Creates a pipeline from a default ``Configuration`` changed by `configure`, the form
    /// Nuke users write: `ImagePipeline { $0.dataCache = DataCache(name: "avatars") }`.
    public convenience init(_ configure: (inout Configuration) -> Void) {
        var configuration = Configuration()
        configure(&configuration)
        self.init(configuration: configuration)
    }

    deinit {
        if let failureObserver, let dataCache = configuration.dataCache as? DataCache {
            dataCache.failureObservers.remove(failureObserver)
        }
    }

    /// Starts loading `request` and returns its task. The task has subscribed to the graph
    /// when this returns.
    ///
    /// The memory cache is consulted first, synchronously (no actor hop, no Swift task): on a
    /// hit the returned task has already completed with a response whose `cacheType` is
    /// `.memory`. On a miss, the memory cache is asked for the longest processor prefix it
    /// holds, and the graph starts from there.
    public func imageTask(with request: ImageRequest) -> ImageTask {
        let request = bucketed(request)
        let finalKey = !graph.caches.hasImageCache ? nil : RequestCacheKeys.finalMemoryKey(request)
        // Read before the memory cache is: see `ImageTask.start`.
        let generation = finishedStages(before: request, finalKey: finalKey)
        if let finalKey, let response = cachedResponse(for: request, key: finalKey) {
            return ImageTask(request: request, graph: graph, completedWith: response)
        }
        return startTask(with: request, finalMemoryKey: finalKey, generation: generation)
    }

    /// Starts `request` in the graph (its final image was not in memory). `finalMemoryKey`:
    /// the request's final memory key, computed once by the caller (`nil` without a memory
    /// cache); `generation`: the graph's count of finished stages read before that lookup.
    private func startTask(with request: ImageRequest, finalMemoryKey: ImageCacheKey?, generation: Int?) -> ImageTask {
        let task = ImageTask(request: request, graph: graph)
        _ = task.start(finalMemoryKey: finalMemoryKey, registering: nil, generation: generation)
        return task
    }

    /// The graph's count of finished stages, read before `request` looks in the memory cache
    /// (see ``ImageTask/start(finalMemoryKey:registering:generation:)``); `nil` when it does
    /// not look there (no memory cache, or its options skip memory reads): a second look
    /// would find nothing more.
    private func finishedStages(before request: ImageRequest, finalKey: ImageCacheKey?) -> Int? {
        guard finalKey != nil, CacheLayers.readsMemory(request.options) else { return nil }
        return graph.finishedStages.load(ordering: .acquiring)
    }

    /// `request` as the pipeline keys, decodes and caches it: with
    /// ``Configuration/isDecodeSizeBucketingEnabled``, its ``ImageRequest/thumbnail`` rounded
    /// up to 64-pixel buckets (``LumenImaging/DecodeSize/bucketed``); otherwise, or when the
    /// size is already a bucket, `request` itself (no copy). Every entry point that takes a
    /// request applies it first, so that keys, decodes and cache entries agree.
    func bucketed(_ request: ImageRequest) -> ImageRequest {
        guard configuration.isDecodeSizeBucketingEnabled, let size = request.thumbnail else { return request }
        let rounded = size.bucketed
        guard rounded != size else { return request }
        var copy = request
        copy.thumbnail = rounded
        return copy
    }

    /// The memory-cache hit path: the final image of `request`, if the memory cache has it and
    /// the request may read it. `key` is the request's final memory key.
    func cachedResponse(for request: ImageRequest, key: ImageCacheKey) -> ImageResponse? {
        guard let container = graph.cachedFinalImage(for: request, key: key) else { return nil }
        return ImageResponse(container: container, request: request, cacheType: .memory)
    }

    /// Loads the image at `url`.
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`): a memory hit returns to a
    /// caller on an actor (the main actor, say) without leaving it.
    /// - Throws: ``Error``; `.cancelled` when the calling Swift task is cancelled.
    public nonisolated(nonsending) func image(for url: URL) async throws -> ImageResponse {
        // `image(for: ImageRequest(url: url))` without the extra async frame, which thousands
        // of suspended requests would each hold.
        if Task.isCancelled { throw Error.cancelled }
        switch prepare(url: url) {
        case .hit(let response): return response
        case .miss(let task): return try await task.run()
        }
    }

    /// Loads `request`. Cancelling the calling Swift task cancels the request.
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`): a memory hit returns to a
    /// caller on an actor (the main actor, say) without leaving it.
    /// - Throws: ``Error``; `.cancelled` when the calling Swift task is cancelled.
    public nonisolated(nonsending) func image(for request: ImageRequest) async throws -> ImageResponse {
        if Task.isCancelled { throw Error.cancelled } // don't start work nobody awaits
        switch prepare(request) {
        case .hit(let response): return response // no task at all
        case .miss(let task): return try await task.run()
        }
    }

    private enum Prepared {
        case hit(ImageResponse)
        case miss(ImageTask)
    }

    /// `image(for:)`'s synchronous part for a URL, not inlined (see ``ImageTask/run()``).
    @inline(never)
    private func prepare(url: URL) -> Prepared {
        prepare(ImageRequest(url: url))
    }

    /// `image(for:)`'s synchronous part, not inlined (see ``ImageTask/run()``): the memory
    /// cache's answer, or a task to run.
    @inline(never)
    private func prepare(_ request: ImageRequest) -> Prepared {
        let request = bucketed(request)
        let finalKey = !graph.caches.hasImageCache ? nil : RequestCacheKeys.finalMemoryKey(request)
        let generation = finishedStages(before: request, finalKey: finalKey)
        if let finalKey, let response = cachedResponse(for: request, key: finalKey) { return .hit(response) }
        return .miss(ImageTask(request: request, graph: graph, finalMemoryKey: finalKey, generation: generation))
    }

    /// Loads the original bytes of `request` (no decoding), sharing a running download of the
    /// same data. Cancelling the calling Swift task cancels the request.
    /// - Returns: the bytes and the response they came with (`nil` for data closures).
    /// - Throws: ``Error``.
    public func data(for request: ImageRequest) async throws -> (Data, URLResponse?) {
        if Task.isCancelled { throw Error.cancelled }
        return try await dataTask(with: request).response
    }

    /// Starts loading the original bytes of `request` (no decoding) and returns its task,
    /// whose priority can change while it runs. The task has subscribed to the graph when
    /// this returns: it shares a running download of the same bytes, as ``data(for:)`` does.
    public func dataTask(with request: ImageRequest) -> DataTask {
        let task = DataTask(request: request, graph: graph)
        task.start()
        return task
    }

    /// Cancels every running request and makes later requests fail with
    /// ``Error/Code/pipelineInvalidated``.
    public func invalidate() {
        graph.invalidate()
    }

    /// Whether ``invalidate()`` was called.
    public var isInvalidated: Bool { graph.sync { graph.isInvalidated } }

    /// What the pipeline has done so far: a consistent snapshot.
    public var metrics: Metrics { graph.metricsStore.snapshot }
}

extension ImagePipeline {
    /// Returns once the metrics satisfy `condition` (at once if they already do): lets tests
    /// wait for the graph to reach a state — N subscribers joined, no live tasks — without
    /// sleeping. `condition` runs with no pipeline lock held (it may use the pipeline), on
    /// some thread that updated the metrics. Cancelling the calling task makes it return.
    ///
    /// A test hook, behind the `Testing` SPI: `@_spi(Testing) import Lumen`.
    @_spi(Testing)
    public func waitForMetrics(until condition: @escaping @Sendable (Metrics) -> Bool) async {
        await graph.metricsStore.wait(until: condition)
    }
}
