import Foundation
import Synchronization
@_spi(Testing) @testable import Lumen
import LumenTestSupport

/// A pipeline wired to a mock loader, a trivial decoder and an event recorder.
struct PipelineHarness {
    let loader: MockDataLoader
    let decoder: TrivialImageDecoder
    let recorder: PipelineEventRecorder
    let pipeline: ImagePipeline

    init(coalescing: Bool = true, configure: (inout ImagePipeline.Configuration) -> Void = { _ in }) {
        loader = MockDataLoader()
        decoder = TrivialImageDecoder()
        recorder = PipelineEventRecorder()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = decoder
        configuration.isTaskCoalescingEnabled = coalescing
        configuration.eventHandler = recorder.handler
        // Small fixed queues so tests don't depend on the machine's core count.
        configuration.decodingQueue = WorkQueue(name: "test.decode", maxConcurrentCount: 2, execution: .threads)
        configuration.processingQueue = WorkQueue(name: "test.process", maxConcurrentCount: 2, execution: .threads)
        configure(&configuration)
        pipeline = ImagePipeline(configuration: configuration)
    }

    /// Returns once every task and request of the graph has been released.
    func waitUntilIdle() async {
        await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
    }
}

extension WorkQueue {
    /// Returns once `condition` holds for the queue, looking again at each change of its counts
    /// and priorities (no polling).
    func waitUntil(isolation: isolated (any Actor)? = #isolation, _ condition: (WorkQueue) -> Bool) async {
        while true {
            let version = changeCount // read before looking
            if condition(self) { return }
            await waitForChange(after: version)
        }
    }
}

enum PipelineURLs {
    static let a = URL(string: "https://example.com/a.jpg")!
    static let b = URL(string: "https://example.com/b.jpg")!

    static func numbered(_ i: Int) -> URL { URL(string: "https://example.com/\(i).jpg")! }
}

extension ImagePipeline.Error.Code {
    static func of(_ error: any Error) -> ImagePipeline.Error.Code? { (error as? ImagePipeline.Error)?.code }
}

/// The error `body` throws, or `nil`.
func errorThrown<T>(_ body: () async throws -> T) async -> (any Error)? {
    do {
        _ = try await body()
        return nil
    } catch {
        return error
    }
}

/// A thread-safe counter.
final class CallCounter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
