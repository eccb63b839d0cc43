import Foundation
import Testing
@_spi(Testing) @testable import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A decode shared by requests with different cache-write options stores the image only for
/// the subscribers allowed to write it.
@Suite(.timeLimit(.minutes(1)))
struct SharedDecodeCachePermissionTests {
    @Test func writerJoiningANonWriterStillStoresTheImage() async throws {
        let h = PipelineCacheHarness(disk: false)
        defer { h.cleanUp() }
        let noWrite = ImageRequest(url: PipelineCacheURLs.a, options: [.disableMemoryCacheWrites])
        let writer = ImageRequest(url: PipelineCacheURLs.a)
        h.loader.isSuspended = true
        let t1 = h.pipeline.imageTask(with: noWrite) // creates the decode stage
        let t2 = h.pipeline.imageTask(with: writer)
        h.loader.resume()
        _ = try await t1.response
        _ = try await t2.response
        #expect(h.decoder.decodeCount == 1)
        #expect(h.pipeline.cache[writer] != nil)
    }

    @Test func nonWriterAloneStoresNothing() async throws {
        let h = PipelineCacheHarness(disk: false)
        defer { h.cleanUp() }
        let noWrite = ImageRequest(url: PipelineCacheURLs.a, options: [.disableMemoryCacheWrites])
        _ = try await h.pipeline.image(for: noWrite)
        #expect(h.pipeline.cache[ImageRequest(url: PipelineCacheURLs.a)] == nil)
    }
}

/// `waitForMetrics(until:)` runs conditions with no pipeline lock held, and returns when its
/// task is cancelled.
@Suite(.timeLimit(.minutes(1)))
struct MetricsWaitTests {
    @Test func aConditionThatUsesThePipelineDoesNotDeadlock() async throws {
        let h = PipelineHarness()
        let pipeline = h.pipeline
        let evaluations = CallCounter()
        h.loader.isSuspended = true
        let task = pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let waiter = Task {
            await pipeline.waitForMetrics { metrics in
                evaluations.increment()
                // Both take locks the pipeline holds while it publishes counters.
                _ = pipeline.isInvalidated
                return pipeline.metrics.decodes >= 1 && metrics.decode.completed >= 1
            }
        }
        h.loader.resume()
        _ = try await task.response
        await waiter.value
        #expect(evaluations.value >= 1)
    }

    @Test func aCancelledWaiterReturns() async {
        let h = PipelineHarness()
        let pipeline = h.pipeline
        let (evaluations, evaluated) = AsyncStream.makeStream(of: Void.self)
        let waiter = Task {
            await pipeline.waitForMetrics { _ in
                evaluated.yield()
                return false
            }
        }
        var iterator = evaluations.makeAsyncIterator()
        _ = await iterator.next() // the waiter has registered and checked its condition
        waiter.cancel()
        await waiter.value // returns although its condition never holds
        #expect(pipeline.metrics.liveRequests == 0)
    }
}

/// Bounded bookkeeping: re-prioritised queue entries and unread event streams.
@Suite(.timeLimit(.minutes(1)))
struct BoundedBookkeepingTests {
    /// Every priority change leaves a stale entry behind; they are dropped once they
    /// outnumber the pending items, even when the stale entries never reach a level's head.
    @Test func priorityChangesDoNotAccumulateStaleEntries() {
        let queue = WorkQueue(name: "test.stale", maxConcurrentCount: 1, execution: .threads)
        queue.isSuspended = true
        let items = (0..<4).map { _ in queue.enqueue(priority: .normal) {} }
        for round in 0..<1000 {
            for item in items { queue.setPriority(item, round.isMultiple(of: 2) ? .high : .low) }
        }
        #expect(queue.pendingCount == 4)
        #expect(queue.storedEntryCount <= 4 + 17 + 1)
        #expect(queue.pendingPriorities == [.low, .low, .low, .low]) // the last round (999) is odd
        for item in items { queue.cancel(item) }
        #expect(queue.storedEntryCount <= 17)
    }

    /// An event stream nobody reads keeps a bounded number of the newest events, and still
    /// ends with `.finished` after the latest progress.
    @Test func anUnreadEventStreamCoalescesProgress() async throws {
        let h = PipelineHarness()
        h.loader.chunkSize = 1
        h.loader.serve(Data(repeating: 7, count: 300), for: PipelineURLs.a)
        h.loader.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let events = task.events
        h.loader.resume()
        _ = try await task.response
        var received: [ImageTask.Event] = []
        for await event in events { received.append(event) }
        let completed = received.compactMap { event -> Int64? in
            if case .progress(let progress) = event { return progress.completed }
            return nil
        }
        // 300 progress events were sent, all before the response; the buffer kept the newest.
        // `.finished` reached the stream before the response resumed this task: it is among
        // the buffered events, which never exceed the limit.
        #expect(completed.count <= ImageTask.eventBufferLimit - 1)
        #expect(received.count == ImageTask.eventBufferLimit)
        #expect(completed.last == 300)
        #expect(completed == completed.sorted())
        guard case .finished(.success)? = received.last else {
            Issue.record("the last event is not .finished(.success)")
            return
        }
    }
}
