import Foundation

extension ImagePipeline {
    /// How a batch prefetch ended.
    public struct PrefetchOutcome: Sendable, Hashable {
        /// Prefetches that produced their image (or bytes).
        public var succeeded: Int
        /// Prefetches that failed (the errors are swallowed: prefetching is best effort).
        public var failed: Int
        /// Requests that produced no outcome: already cached, duplicates within the batch, or
        /// stopped because the calling task was cancelled.
        public var skipped: Int

        /// Creates an outcome with the given counts.
        public init(succeeded: Int, failed: Int, skipped: Int) {
            self.succeeded = succeeded
            self.failed = failed
            self.skipped = skipped
        }
    }

    /// Prefetches the images at `urls` and returns when all have ended (see
    /// ``prefetch(_:maxConcurrent:destination:)-([ImageRequest],_,_)``).
    @discardableResult
    public func prefetch(_ urls: [URL], maxConcurrent: Int = 2, destination: ImagePrefetcher.Destination = .memoryCache) async -> PrefetchOutcome {
        await prefetch(urls.map { ImageRequest(url: $0) }, maxConcurrent: maxConcurrent, destination: destination)
    }

    /// Prefetches `requests` through an ``ImagePrefetcher`` (low priority, at most
    /// `maxConcurrent` at once, FIFO) and returns when all have ended.
    ///
    /// Errors are counted, not thrown. Cancelling the calling Swift task stops the prefetches
    /// (work that other requests share goes on) and returns at once.
    @discardableResult
    public func prefetch(_ requests: [ImageRequest], maxConcurrent: Int = 2, destination: ImagePrefetcher.Destination = .memoryCache) async -> PrefetchOutcome {
        let prefetcher = ImagePrefetcher(pipeline: self, destination: destination, maxConcurrentRequestCount: maxConcurrent)
        await withTaskCancellationHandler {
            guard !Task.isCancelled else { return }
            prefetcher.startPrefetching(with: requests)
            // A cancellation that landed between the check and the start found nothing to
            // stop: stop now (stopping twice is harmless).
            if Task.isCancelled { prefetcher.stopPrefetching() }
            await prefetcher.waitUntilIdle()
        } onCancel: {
            prefetcher.stopPrefetching()
        }
        let (succeeded, failed) = prefetcher.outcomes
        return PrefetchOutcome(succeeded: succeeded, failed: failed, skipped: max(0, requests.count - succeeded - failed))
    }
}
