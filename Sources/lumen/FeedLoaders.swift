import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Lumen
import Synchronization

/// Counters a loader keeps for the feed report: decodes and the pixels they produced.
final class FeedDecodeCounter: Sendable {
    private let state = Mutex((decodes: 0, pixels: 0))

    func record(_ image: Bitmap) {
        state.withLock {
            $0.decodes += 1
            $0.pixels += image.pixelCount
        }
    }

    var snapshot: (decodes: Int, pixels: Int) { state.withLock { $0 } }
}

/// Counts what a decoder produced: wraps Lumen's default decoder.
struct CountingDecoder: ImageDecoding {
    let base = ImageDecoders.Default()
    let counter: FeedDecodeCounter

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        let container = try base.decode(data, context: context)
        counter.record(container.image)
        return container
    }
}

/// Lumen as a feed uses it: one pipeline; visible cells load at normal priority; the prefetch
/// window loads the same requests at low priority (memory destination) and is cancelled when
/// it moves on.
final class LumenFeedLoader: FeedLoading {
    let pipeline: ImagePipeline
    let counter = FeedDecodeCounter()
    private let prefetches = Mutex<[FeedImageRef: ImageTask]>([:])

    /// A loader over a pipeline with the default configuration, except that coalescing is
    /// `coalescing`, decodes are counted, and the disk cache (once the pipeline has one) lives in
    /// `cacheDirectory`.
    init(coalescing: Bool, cacheDirectory: URL) {
        var configuration = ImagePipeline.Configuration()
        configuration.isTaskCoalescingEnabled = coalescing
        configuration.decoder = CountingDecoder(counter: counter)
        _ = cacheDirectory
        self.pipeline = ImagePipeline(configuration: configuration)
    }

    static func request(_ ref: FeedImageRef, priority: ImageRequest.Priority) -> ImageRequest {
        ImageRequest(url: ref.url, priority: priority, thumbnail: ref.maxPixelSize.map { .maxPixelSize($0) })
    }

    func load(_ ref: FeedImageRef, priority: ImageRequest.Priority) -> any FeedLoad {
        LumenLoad(task: pipeline.imageTask(with: Self.request(ref, priority: priority)))
    }

    func startPrefetching(_ refs: [FeedImageRef]) {
        for ref in refs {
            let task = pipeline.imageTask(with: Self.request(ref, priority: .low))
            let replaced = prefetches.withLock { $0.updateValue(task, forKey: ref) }
            replaced?.cancel()
        }
    }

    func stopPrefetching(_ refs: [FeedImageRef]) {
        let tasks = prefetches.withLock { p in refs.compactMap { p.removeValue(forKey: $0) } }
        for task in tasks { task.cancel() }
    }

    func drain() async {
        await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
    }
}

/// A visible load in Lumen: an image task.
struct LumenLoad: FeedLoad {
    let task: ImageTask

    func cancel() -> Bool {
        let running = task.state == .running
        task.cancel()
        return running
    }

    func value() async -> Result<Bitmap, any Error> {
        do { return .success(try await task.image) } catch { return .failure(error) }
    }
}

/// What SwiftUI's `AsyncImage` does, on Linux: every view downloads its URL with a plain
/// `URLSession` (no URL cache) and decodes the bytes at full size; nothing is shared between
/// views and nothing decoded is kept; the load is cancelled when the view disappears. There
/// is no prefetching.
final class NaiveFeedLoader: FeedLoading {
    let session: URLSession
    let counter = FeedDecodeCounter()
    private let running = Mutex<[Int: Task<Bitmap, any Error>]>([:])
    private let nextID = Atomic<Int>(0)

    init() {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        session = URLSession(configuration: configuration)
    }

    deinit {
        session.invalidateAndCancel()
    }

    func load(_ ref: FeedImageRef, priority: ImageRequest.Priority) -> any FeedLoad {
        let id = nextID.add(1, ordering: .relaxed).oldValue
        let done = DoneFlag()
        let session = self.session, counter = self.counter, url = ref.url
        let task = Task { [weak self] () throws -> Bitmap in
            defer {
                done.set()
                _ = self?.running.withLock { $0.removeValue(forKey: id) }
            }
            let (data, response) = try await session.data(from: url)
            guard let http = response as? HTTPURLResponse, http.statusCode == 200 else {
                throw BenchError("\(url.path): unexpected response \(response)")
            }
            try Task.checkCancellation()
            let image = try ImageDecoder.decode(data).bitmap
            counter.record(image)
            return image
        }
        running.withLock { if !done.isSet { $0[id] = task } }
        return NaiveLoad(task: task, done: done)
    }

    func startPrefetching(_ refs: [FeedImageRef]) {}
    func stopPrefetching(_ refs: [FeedImageRef]) {}

    func drain() async {
        let tasks = running.withLock { Array($0.values) }
        for task in tasks { _ = await task.result }
    }
}

/// A visible load in the naive loader: a Swift task.
final class NaiveLoad: FeedLoad {
    let task: Task<Bitmap, any Error>
    let done: DoneFlag

    init(task: Task<Bitmap, any Error>, done: DoneFlag) {
        self.task = task
        self.done = done
    }

    func cancel() -> Bool {
        let running = !done.isSet
        task.cancel()
        return running
    }

    func value() async -> Result<Bitmap, any Error> {
        await task.result
    }
}

/// A flag set once, when a naive load's task ends.
final class DoneFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}
