import Foundation
import Testing
import Synchronization
import Lumen
import LumenTestSupport

/// Where the pipeline touches the disk cache: off the graph's lock and off the caller's thread.
@Suite(.timeLimit(.minutes(1)))
struct PipelineCacheThreadingTests {
    /// A disk cache that misses, holding each read until released, and reports when a read
    /// starts.
    final class HeldDataCache: DataCaching {
        private let entered = Mutex<(count: Int, waiters: [CheckedContinuation<Void, Never>])>((0, []))
        private let gate = DispatchSemaphore(value: 0)

        func waitForRead() async {
            await withCheckedContinuation { continuation in
                let ready = entered.withLock { state -> Bool in
                    if state.count > 0 { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
        }

        func release() { gate.signal() }

        func cachedData(for key: String) -> (data: Data, metadata: CacheMetadata)? {
            let waiters = entered.withLock { state in
                state.count += 1
                defer { state.waiters = [] }
                return state.waiters
            }
            waiters.forEach { $0.resume() }
            gate.wait()
            return nil
        }

        func containsData(for key: String) -> Bool { false }
        func storeData(_ data: Data, metadata: CacheMetadata, for key: String) {}
        func renew(key: String, metadata: CacheMetadata) {}
        func removeData(for key: String) {}
        func removeAll() {}
    }

    @Test func diskReadsRunOffTheGraphLockAndOffTheCaller() async throws {
        let disk = HeldDataCache()
        var configuration = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        configuration.decoder = TrivialImageDecoder()
        configuration.dataCache = disk
        let pipeline = ImagePipeline(configuration: configuration)

        // imageTask(with:) returns while the disk read is still held: it did not read itself.
        let task = pipeline.imageTask(with: ImageRequest(url: PipelineCacheURLs.a))
        await disk.waitForRead()
        // The graph's lock is free while the read is held: these take it.
        task.priority = .high
        #expect(task.priority == .high)
        #expect(task.state == .running)
        let other = pipeline.imageTask(with: ImageRequest(url: PipelineCacheURLs.b))
        other.cancel()
        disk.release()
        disk.release() // the cancelled request's read, if it had started
        #expect(try await task.response.cacheType == nil)
    }
}
