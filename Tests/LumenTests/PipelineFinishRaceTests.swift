import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

/// A request that looks in the memory cache just before a stage stores its image there, and
/// takes the graph's lock just after that stage finished, finds neither the image nor running
/// work to join. These tests hold such a request inside its memory lookup while the stage
/// finishes, then let it go on: it must use the stored image, not start the work again.
@Suite(.timeLimit(.minutes(1)))
struct PipelineFinishRaceTests {
    /// A memory cache that holds one armed lookup — the `n`th after arming — on its thread
    /// until released, answering what the cache held when the lookup began.
    final class StallingImageCache: ImageCaching, @unchecked Sendable { // state guarded by `lock`
        let base = ImageCache()
        private let lock = NSLock()
        private var countdown: Int?
        private var onStall: (@Sendable () -> Void)?
        private let release = DispatchSemaphore(value: 0)

        /// Holds the `lookup`th lookup from now (1: the next one); `onStall` runs when it is held.
        func arm(lookup: Int, onStall: @escaping @Sendable () -> Void) {
            lock.withLock {
                countdown = lookup
                self.onStall = onStall
            }
        }

        /// Lets the held lookup return.
        func releaseStall() { release.signal() }

        subscript(key: ImageCacheKey) -> ImageContainer? {
            get {
                let value = base[key]
                let stall: (@Sendable () -> Void)? = lock.withLock {
                    guard let remaining = countdown else { return nil }
                    if remaining > 1 {
                        countdown = remaining - 1
                        return nil
                    }
                    countdown = nil
                    defer { onStall = nil }
                    return onStall
                }
                if let stall {
                    stall()
                    // A hang guard, not a wait for concurrency: a test that ends early (its time
                    // limit cancelled it, an expectation threw) never releases the lookup, and
                    // the thread held here would keep the test's `async let` — and with it the
                    // whole test run — waiting for ever.
                    _ = release.wait(timeout: .now() + 30)
                }
                return value
            }
            set { base[key] = newValue }
        }

        func removeValue(forKey key: ImageCacheKey) { base.removeValue(forKey: key) }
        func removeAll() { base.removeAll() }
    }

    /// Starts `request` on a thread of its own (its memory lookup may be held) and answers its
    /// task once the start returned.
    private static func startOnThread(_ pipeline: ImagePipeline, _ request: ImageRequest) async -> ImageTask {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: pipeline.imageTask(with: request)) }.start()
        }
    }

    /// Waits until the armed lookup is held.
    private static func held(_ cache: StallingImageCache, lookup: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            cache.arm(lookup: lookup) { continuation.resume() }
        }
    }

    /// A processed request whose prefix lookup missed just before the decode it would have
    /// joined stored its image and finished: it processes the stored image (one fetch, one
    /// decode), as a request arriving a moment later would.
    @Test func aProcessedRequestUsesTheImageOfADecodeThatFinishedDuringItsLookup() async throws {
        let cache = StallingImageCache()
        let h = PipelineHarness { $0.imageCache = cache }
        let url = URL(string: "https://example.com/finish-race.jpg")!
        h.loader.isSuspended = true
        let plain = h.pipeline.imageTask(with: ImageRequest(url: url))
        // The processed request's lookups: its final image, then the unprocessed prefix (held).
        async let stalled: Void = Self.held(cache, lookup: 2)
        let processedRequest = ImageRequest(url: url, processors: [MockImageProcessor("p")])
        async let processed = Self.startOnThread(h.pipeline, processedRequest)
        await stalled
        h.loader.resume()
        _ = try await plain.response
        await h.pipeline.waitForMetrics { $0.liveTasks == 0 }
        cache.releaseStall()
        let response = try await processed.response
        #expect(response.image.width > 0)
        let m = h.pipeline.metrics
        #expect(h.loader.loadCount == 1)
        #expect(m.decode.started == 1)
        #expect(m.process.started == 1)
        await h.waitUntilIdle()
    }

    /// The same for a request without processors: its final image was missed by the lookup
    /// that `imageTask(with:)` makes; it answers from memory, without a second decode.
    @Test func aPlainRequestUsesTheImageOfADecodeThatFinishedDuringItsLookup() async throws {
        let cache = StallingImageCache()
        let h = PipelineHarness { $0.imageCache = cache }
        let url = URL(string: "https://example.com/finish-race-plain.jpg")!
        h.loader.isSuspended = true
        let first = h.pipeline.imageTask(with: ImageRequest(url: url))
        async let stalled: Void = Self.held(cache, lookup: 1)
        async let second = Self.startOnThread(h.pipeline, ImageRequest(url: url))
        await stalled
        h.loader.resume()
        _ = try await first.response
        await h.pipeline.waitForMetrics { $0.liveTasks == 0 }
        cache.releaseStall()
        let response = try await second.response
        #expect(response.cacheType == .memory)
        #expect(h.loader.loadCount == 1)
        #expect(h.pipeline.metrics.decode.started == 1)
        await h.waitUntilIdle()
    }
}
