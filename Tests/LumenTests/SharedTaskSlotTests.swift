import Foundation
import Testing
@_spi(Testing) @testable import Lumen
import LumenTestSupport

/// ``SharedTask`` keeps subscribers in reusable slots, and requests without processors join a
/// running decode with only their decode key: the bookkeeping those shortcuts must keep exact.
@Suite(.timeLimit(.minutes(1)))
struct SharedTaskSlotTests {
    typealias StubTask = PipelineSharedTaskTests.StubTask
    typealias Inbox = PipelineSharedTaskTests.Inbox

    let graph = WorkGraph(configuration: ImagePipeline.Configuration(dataLoader: MockDataLoader()))

    @Test func aStaleHandleDoesNotReachTheSubscriberThatReusedItsSlot() {
        let task = StubTask(graph: graph, stage: .decode)
        let first = Inbox(), second = Inbox(), keeper = Inbox()
        graph.sync {
            _ = task.subscribe(priority: .low, keeper.handler)!
            let stale = task.subscribe(priority: .normal, first.handler)!
            stale.unsubscribe()
            let reused = task.subscribe(priority: .high, second.handler)!
            #expect(reused.token.slot == stale.token.slot) // the freed slot was reused
            stale.unsubscribe() // a second leave through the old handle: no effect
            stale.setPriority(.veryLow) // nor a priority change
            #expect(task.priority == .high)
            #expect(!task.isDisposed)
            task.finish(with: 7)
        }
        #expect(first.values.isEmpty)
        #expect(second.values == [7] && keeper.values == [7])
    }

    @Test func leavingAndJoiningManyTimesKeepsTheListBoundedAndThePriorityExact() {
        let task = StubTask(graph: graph, stage: .fetch)
        let inbox = Inbox()
        graph.sync {
            _ = task.subscribe(priority: .veryLow, inbox.handler)!
            for round in 0..<100 {
                let a = task.subscribe(priority: .high, inbox.handler)!
                let b = task.subscribe(priority: .normal, inbox.handler)!
                #expect(task.priority == .high)
                a.unsubscribe()
                #expect(task.priority == .normal)
                b.unsubscribe()
                #expect(task.priority == .veryLow)
                #expect(a.token.slot <= 2 && b.token.slot <= 2, "round \(round): slots are reused")
            }
            task.send(progress: .init(completed: 1, total: 2))
            task.finish(with: 1)
        }
        #expect(inbox.values == [1] && inbox.progress == [1]) // only the subscriber still there
        #expect(graph.metricsStore.snapshot.fetch.joined == 200)
    }

    @Test func requestsJoiningARunningDecodeEachStoreUnderTheirOwnMemoryKey() async throws {
        let loader = MockDataLoader()
        loader.isSuspended = true
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        let url = URL(string: "https://example.com/joined.jpg")!
        // Same decode key; different image ids (memory keys); one may not write to memory.
        func request(_ id: String, _ options: ImageRequest.Options = []) -> ImageRequest {
            var request = ImageRequest(url: url, options: options)
            request.imageID = id
            return request
        }
        let a = pipeline.imageTask(with: request("a"))
        let b = pipeline.imageTask(with: request("b"))
        let c = pipeline.imageTask(with: request("c", [.disableMemoryCacheWrites]))
        await pipeline.waitForMetrics { $0.decode.started == 1 && $0.decode.joined == 2 }
        loader.resume()
        for task in [a, b, c] { _ = try await task.response }
        #expect(loader.loadCount == 1)
        #expect(pipeline.cache[request("a")] != nil)
        #expect(pipeline.cache[request("b")] != nil)
        #expect(pipeline.cache[request("c")] == nil)
    }

    @Test func withoutCoalescingEveryRequestStartsItsOwnDecode() async throws {
        let loader = MockDataLoader()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.isTaskCoalescingEnabled = false
        configuration.imageCache = nil
        let pipeline = ImagePipeline(configuration: configuration)
        let url = URL(string: "https://example.com/uncoalesced.jpg")!
        for _ in 0..<3 { _ = try await pipeline.image(for: url) }
        async let x = pipeline.image(for: url)
        async let y = pipeline.image(for: url)
        _ = try await (x, y)
        let m = pipeline.metrics
        #expect(m.decode.started == 5 && m.decode.joined == 0)
        #expect(loader.loadCount == 5)
    }
}
