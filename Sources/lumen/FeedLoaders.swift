import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(Testing) import Lumen
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

/// Lumen as a feed uses it: one pipeline; visible cells load at normal priority; an
/// ``ImagePrefetcher`` (its defaults: low priority, 2 at a time, decoded into memory) loads the
/// prefetch window and stops what leaves it.
final class LumenFeedLoader: FeedLoading {
    let pipeline: ImagePipeline
    let prefetcher: ImagePrefetcher
    let counter = FeedDecodeCounter()

    /// A loader over a pipeline with the default configuration (its own memory cache) plus a
    /// disk cache in `cacheDirectory` (empty: every run starts cold), with coalescing as
    /// `coalescing` and decodes counted.
    init(coalescing: Bool, cacheDirectory: URL) {
        var configuration = ImagePipeline.Configuration()
        configuration.isTaskCoalescingEnabled = coalescing
        configuration.decoder = CountingDecoder(counter: counter)
        configuration.dataCache = DataCache(name: "feed", directory: cacheDirectory)
        if ProcessInfo.processInfo.environment[FeedRunner.eventTraceVariable] == "1" {
            // Diagnostics on stderr: every stage event, with the time since the loader started.
            let start = monotonicSeconds()
            configuration.eventHandler = { event in
                printError(String(format: "event %.4f ", monotonicSeconds() - start) + "\(event)")
            }
        }
        pipeline = ImagePipeline(configuration: configuration)
        prefetcher = ImagePrefetcher(pipeline: pipeline)
    }

    static func request(_ ref: FeedImageRef, priority: ImageRequest.Priority) -> ImageRequest {
        ImageRequest(url: ref.url, priority: priority, thumbnail: ref.maxPixelSize.map { .maxPixelSize($0) })
    }

    func load(_ ref: FeedImageRef, priority: ImageRequest.Priority) -> any FeedLoad {
        LumenLoad(task: pipeline.imageTask(with: Self.request(ref, priority: priority)))
    }

    var prefetches: Bool { true }

    func startPrefetching(_ refs: [FeedImageRef]) {
        prefetcher.startPrefetching(with: refs.map { Self.request($0, priority: .low) })
    }

    func stopPrefetching(_ refs: [FeedImageRef]) {
        prefetcher.stopPrefetching(with: refs.map { Self.request($0, priority: .low) })
    }

    func drain() async {
        prefetcher.stopPrefetching()
        await prefetcher.waitUntilIdle()
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
///
/// Downloads use `dataTask(with:completionHandler:)` and cancel the `URLSessionTask` directly:
/// on Linux, cancelling the Swift task awaiting `URLSession.data(from:)` can deadlock inside
/// FoundationNetworking when the transfer completes at the same moment (seen in this demo:
/// `Task.cancel` holds the task's status lock while `URLSessionTask.cancel` waits for the
/// session's queue, which is resuming the same task).
///
/// Concurrency is `URLSession`'s, as for `AsyncImage`: every view's download starts at once
/// (no app-level limit; FoundationNetworking, like Apple's, allows 6 connections per host), and
/// decodes run on the cooperative pool as the bytes arrive. `downloads` counts the data tasks
/// in flight as the client sees them (the loopback server's own count sees a request only
/// while it writes the response, microseconds per image).
final class NaiveFeedLoader: FeedLoading {
    let session: URLSession
    let counter = FeedDecodeCounter()
    let downloads = InFlightCounter()
    private let running = Mutex<[ObjectIdentifier: NaiveLoad]>([:])

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
        let load = NaiveLoad()
        running.withLock { $0[ObjectIdentifier(load)] = load }
        load.start(url: ref.url, session: session, counter: counter, downloads: downloads) { [weak self] in
            _ = self?.running.withLock { $0.removeValue(forKey: ObjectIdentifier(load)) }
        }
        return load
    }

    var prefetches: Bool { false }
    func startPrefetching(_ refs: [FeedImageRef]) {}
    func stopPrefetching(_ refs: [FeedImageRef]) {}

    func drain() async {
        let loads = running.withLock { Array($0.values) }
        for load in loads { _ = await load.value() }
    }
}

/// One view's load in the naive loader: a download, then a full decode.
final class NaiveLoad: FeedLoad {
    private struct State {
        var dataTask: URLSessionDataTask?
        var isCancelled = false
        var isDone = false
        var task: Task<Bitmap, any Error>?
    }

    private let state = Mutex(State())

    /// Starts the download; `finished` runs when the load ends, however it ends.
    func start(url: URL, session: URLSession, counter: FeedDecodeCounter, downloads: InFlightCounter,
               finished: @escaping @Sendable () -> Void) {
        let task = Task { [self] () throws -> Bitmap in
            defer {
                state.withLock { $0.isDone = true }
                finished()
            }
            let data: Data = try await withCheckedThrowingContinuation { continuation in
                // The data task is made only if the view is still there: a task that exists is
                // resumed, so its completion handler runs exactly once.
                let dataTask = state.withLock { state -> URLSessionDataTask? in
                    guard !state.isCancelled else { return nil }
                    let dataTask = session.dataTask(with: url) { data, response, error in
                        downloads.end()
                        if let error { return continuation.resume(throwing: error) }
                        guard let data, let http = response as? HTTPURLResponse, http.statusCode == 200 else {
                            return continuation.resume(throwing: BenchError("\(url.path): unexpected response \(String(describing: response))"))
                        }
                        continuation.resume(returning: data)
                    }
                    state.dataTask = dataTask
                    return dataTask
                }
                if let dataTask {
                    downloads.begin()
                    dataTask.resume()
                } else {
                    continuation.resume(throwing: CancellationError())
                }
            }
            if state.withLock({ $0.isCancelled }) { throw CancellationError() }
            let image = try ImageDecoder.decode(data).bitmap
            counter.record(image)
            return image
        }
        state.withLock { $0.task = task }
    }

    func cancel() -> Bool {
        let (wasRunning, dataTask) = state.withLock { state -> (Bool, URLSessionDataTask?) in
            let wasRunning = !state.isDone && !state.isCancelled
            state.isCancelled = true
            return (wasRunning, state.dataTask)
        }
        dataTask?.cancel()
        return wasRunning
    }

    func value() async -> Result<Bitmap, any Error> {
        guard let task = state.withLock({ $0.task }) else { return .failure(CancellationError()) }
        return await task.result
    }
}

/// Counts things in flight and the most there were at once.
final class InFlightCounter: Sendable {
    private let state = Mutex((now: 0, peak: 0))

    func begin() {
        state.withLock {
            $0.now += 1
            $0.peak = max($0.peak, $0.now)
        }
    }

    func end() { state.withLock { $0.now -= 1 } }

    var peak: Int { state.withLock { $0.peak } }
}
