import Foundation
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

    /// Creates a pipeline.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.graph = WorkGraph(configuration: configuration)
    }

    /// Starts loading `request` and returns its task. The task has subscribed to the graph
    /// when this returns.
    public func imageTask(with request: ImageRequest) -> ImageTask {
        let task = ImageTask(request: request, graph: graph)
        let keys = RequestKeys(request) // processors' identities are user code: not under the lock
        graph.sync { task.startLocked(keys: keys) }
        return task
    }

    /// Loads the image at `url`.
    /// - Throws: ``Error``; `.cancelled` when the calling Swift task is cancelled.
    public func image(for url: URL) async throws -> ImageResponse {
        try await image(for: ImageRequest(url: url))
    }

    /// Loads `request`. Cancelling the calling Swift task cancels the request.
    /// - Throws: ``Error``; `.cancelled` when the calling Swift task is cancelled.
    public func image(for request: ImageRequest) async throws -> ImageResponse {
        if Task.isCancelled { throw Error.cancelled } // don't start work nobody awaits
        return try await imageTask(with: request).response
    }

    /// Loads the original bytes of `request` (no decoding), sharing a running download of the
    /// same data. Cancelling the calling Swift task cancels the request.
    /// - Returns: the bytes and the response they came with (`nil` for data closures).
    /// - Throws: ``Error``.
    public func data(for request: ImageRequest) async throws -> (Data, URLResponse?) {
        if Task.isCancelled { throw Error.cancelled }
        let fetched = try await DataRequestTask(request: request, graph: graph).run()
        return (fetched.data, fetched.urlResponse)
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
    /// sleeping. Never call it from the event handler.
    public func waitForMetrics(until condition: @escaping @Sendable (Metrics) -> Bool) async {
        await graph.metricsStore.wait(until: condition)
    }
}
