import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@testable import Lumen
import LumenTestSupport
@testable import lumen

/// Defects found by the review of the changes since e362fb9: the finished-stage count that
/// sends a request back to the memory cache, event streams and the result, what the retry
/// policy calls transient on Linux, and `lumen thumbnail`'s inputs.
@Suite(.timeLimit(.minutes(1)))
struct ReviewTodayTests {
    // MARK: - The finished-stage count

    /// A stage that stores nothing in memory (here a fetch, for a data request) finishing
    /// while a request looks in the memory cache sends that request to no second lookup:
    /// there is nothing new to find there.
    @Test func aStageThatStoresNothingInMemorySendsNoRequestBackToTheCache() async throws {
        let cache = PipelineFinishRaceTests.StallingImageCache()
        let h = PipelineHarness { $0.imageCache = cache }
        // Held in its only lookup (its final image) while the data request's fetch finishes.
        async let stalled: Void = withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            cache.arm(lookup: 1) { continuation.resume() }
        }
        async let started = withCheckedContinuation { (continuation: CheckedContinuation<ImageTask, Never>) in
            Thread { continuation.resume(returning: h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.b))) }.start()
        }
        await stalled
        _ = try await h.pipeline.data(for: ImageRequest(url: PipelineURLs.a))
        cache.releaseStall()
        let task = await started
        _ = try await task.response
        #expect(h.pipeline.metrics.memoryCache.lookups == 1)
        await h.waitUntilIdle()
    }
}
