import Foundation
import Synchronization
import Testing
import Lumen
import LumenTestSupport

/// `image(for:)` runs on the caller's executor: a memory hit awaited on an actor never leaves
/// it (no hop to the global executor and back), while a miss suspends as usual.
@Suite(.timeLimit(.minutes(1)))
struct PipelineExecutorTests {
    /// A serial executor that counts the jobs it is given, running them on a dispatch queue.
    final class CountingExecutor: SerialExecutor {
        private let queue = DispatchQueue(label: "lumen.test.counting-executor")
        private let count = Atomic<Int>(0)
        var jobs: Int { count.load(ordering: .relaxed) }

        func enqueue(_ job: consuming ExecutorJob) {
            count.add(1, ordering: .relaxed)
            let job = UnownedJob(job)
            let executor = asUnownedSerialExecutor()
            queue.async { job.runSynchronously(on: executor) }
        }

        func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
    }

    /// An actor on a ``CountingExecutor`` that loads through a pipeline and reports how many
    /// jobs its executor ran during the load.
    actor Caller {
        let executor = CountingExecutor()
        nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

        func load(_ request: ImageRequest, from pipeline: ImagePipeline) async throws -> (ImageResponse, jobs: Int) {
            let before = executor.jobs
            let response = try await pipeline.image(for: request)
            return (response, executor.jobs - before)
        }
    }

    @Test func aMemoryHitAwaitedOnAnActorNeverLeavesIt() async throws {
        let loader = MockDataLoader()
        let url = URL(string: "https://example.com/a.jpg")!
        loader.serve(Data((0..<64).map { UInt8($0) }), for: url)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        let caller = Caller()

        // A miss suspends the caller; its resumption is a job on the actor's executor.
        let (first, missJobs) = try await caller.load(ImageRequest(url: url), from: pipeline)
        #expect(first.cacheType == nil)
        #expect(missJobs >= 1)

        // A hit: no job at all, the answer comes back on the actor without a hop.
        let (second, hitJobs) = try await caller.load(ImageRequest(url: url), from: pipeline)
        #expect(second.cacheType == .memory)
        #expect(hitJobs == 0)
    }
}
