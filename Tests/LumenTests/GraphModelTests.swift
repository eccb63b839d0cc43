import Foundation
import Synchronization
import Testing
@_spi(Testing) @testable import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// A randomized, model-based test of the work graph, written from issue 3 and DESIGN §1–2: for
// each seed, one pipeline (memory cache on or off, disk cache off, coalescing on, 1, 2 or 6
// downloads at once) runs a random program beside ``GraphModel``: start requests — image
// tasks, `image(for:)` in a Swift task, data tasks — drawn from a few URLs × decode sizes ×
// processor chains sharing prefixes × priorities; join running work; repeat finished and failed
// requests; cancel; change priorities; end held loads (in chunks), decodes and processings well
// or badly in any order; now and then `invalidate()`. Some operations race: a held call is
// released while the test cancels, re-prioritises, starts or releases another call at once, and
// the pipeline must end as one interleaving of their atomic steps does.
//
// After every operation the pipeline must reach the model's state (waiting on counts, never on
// time), and then every task's outcome (image, error, cacheType), progress and state, the held
// calls (at most one per key at work, cancelled exactly when nobody needs them), the pools (keys,
// subscribers, priority of each task and of its queued or running work), the download queue's
// order, the metrics and the memory cache must agree with it. At the end nothing may be left
// running or registered.
//
// A failure prints the seed and the operations. Reproduce or hunt with
// `LUMEN_GRAPH_MODEL_SEEDS=1234` (one seed) or `LUMEN_GRAPH_MODEL_SEEDS=1000..<5000` (a range;
// about 30 s per 1000 seeds in a debug build); `LUMEN_GRAPH_MODEL_TRACE=1` prints every run.

@Suite(.timeLimit(.minutes(1)))
struct GraphModelTests {
    /// The seeds to run: `LUMEN_GRAPH_MODEL_SEEDS` (`n` or `a..<b`), else the first 50.
    static var seeds: Range<UInt64> {
        let text = ProcessInfo.processInfo.environment["LUMEN_GRAPH_MODEL_SEEDS"] ?? ""
        let bounds = text.components(separatedBy: "..<").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        switch bounds.count {
        case 1: return bounds[0]..<(bounds[0] + 1)
        case 2: return bounds[0]..<bounds[1]
        default: return 0..<50
        }
    }

    /// Every seed's program agrees with the model, operation by operation, and ends empty.
    @Test func randomProgramsAgreeWithTheModel() async throws {
        if let failure = await Self.run(Self.seeds) {
            Issue.record("\(failure)")
        }
    }

    /// Runs `seeds`; answers the first failure.
    static func run(_ seeds: Range<UInt64>) async -> GraphModelFailure? {
        for seed in seeds {
            var rng = SplitMix64(seed: seed ^ 0x5EED)
            let run = GraphModelRun(seed: seed)
            do {
                try await run.run(steps: Int.random(in: 15...50, using: &rng))
                if ProcessInfo.processInfo.environment["LUMEN_GRAPH_MODEL_TRACE"] != nil {
                    print(run.log.joined(separator: "\n") + "\n" + run.summary)
                }
            } catch {
                run.releaseEverything()
                return error as? GraphModelFailure ?? run.failure("\(error)")
            }
        }
        return nil
    }
}

// MARK: - Defects the model found

/// A loader that holds every load (a suspended ``MockDataLoader``) and records, when a load is
/// told to stop, how many items its download queue still holds.
private final class QueueProbeLoader: DataLoading {
    let mock = MockDataLoader()
    private let queue: WorkQueue
    private let pending = PendingCounts()

    init(queue: WorkQueue) { self.queue = queue }

    /// The queue's pending count at each cancellation of a running load.
    var pendingCountsAtCancellation: [Int] { pending.values }

    func loadData(for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void) async throws -> URLResponse {
        try await withTaskCancellationHandler {
            try await mock.loadData(for: request, didReceive: didReceive)
        } onCancel: { [queue, pending] in
            pending.append(queue.pendingCount)
        }
    }
}

/// Counts recorded from cancellation handlers.
private final class PendingCounts: Sendable {
    private let counts = Mutex<[Int]>([])
    var values: [Int] { counts.withLock { $0 } }
    func append(_ count: Int) { counts.withLock { $0.append(count) } }
}

@Suite(.timeLimit(.minutes(1)))
struct GraphModelFindingTests {
    /// Seed 279: `invalidate()` cancelled a running download and a queued one, but the queued
    /// one left its queue only after the graph's lock was released, after the running one was
    /// told to stop; the running one's slot freed meanwhile and the queue started the cancelled
    /// download — a network request for work nobody needed any more.
    @Test func invalidateTakesQueuedDownloadsOutBeforeRunningOnesStop() async throws {
        let queue = WorkQueue(name: "finding.data", maxConcurrentCount: 1, execution: .tasks)
        let loader = QueueProbeLoader(queue: queue)
        loader.mock.isSuspended = true
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.dataLoadingQueue = queue
        let pipeline = ImagePipeline(configuration: configuration)
        let running = pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        await loader.mock.waitForLoads(1)
        let queued = pipeline.imageTask(with: ImageRequest(url: PipelineURLs.b))
        #expect(queue.pendingCount == 1)
        pipeline.invalidate()
        #expect(loader.pendingCountsAtCancellation == [0], "the queued download was still in its queue")
        await loader.mock.waitForCancellations(1)
        await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.networkRequestsInFlight == 0 }
        #expect(loader.mock.loadCount == 1)
        #expect(running.state == .cancelled && queued.state == .cancelled)
    }

    /// Seed 790 (after the fix above): cancelling a running download handed its Swift task to
    /// be cancelled after the graph's lock, but the queue's runner task, finishing that
    /// download meanwhile, went on with the next queued download in the same Swift task — so
    /// the late cancellation stopped a download a live request of another pipeline (sharing
    /// the queue) still needed, and that request failed as cancelled.
    @Test func cancellingADownloadNeverStopsTheNextOneItsRunnerTakes() async throws {
        let queue = WorkQueue(name: "finding.shared", maxConcurrentCount: 1, execution: .tasks)
        let calls = HeldCalls()
        func configuration(logger: (@Sendable (String) -> Void)? = nil) -> ImagePipeline.Configuration {
            var configuration = ImagePipeline.Configuration(dataLoader: HeldLoader(calls: calls))
            configuration.decoder = TrivialImageDecoder()
            configuration.dataLoadingQueue = queue
            configuration.logger = logger
            return configuration
        }
        // `invalidate()` logs before it cancels anything; the log runs after the graph's lock,
        // before the cancellation of the running download's task: there the running download
        // ends on its own and the queue's runner takes the other pipeline's download.
        let invalidated = ImagePipeline(configuration: configuration { _ in
            calls.give(.succeed, to: 0)
            calls.waitForCalls(2)
        })
        let other = ImagePipeline(configuration: configuration())
        let cancelled = invalidated.imageTask(with: ImageRequest(url: GraphUniverse.url(0)))
        while calls.snapshot.isEmpty { await Task.yield() }
        let live = other.imageTask(with: ImageRequest(url: GraphUniverse.url(1)))
        #expect(queue.pendingCount == 1)
        // On a thread of its own: the log blocks until the runner took the next download.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread {
                invalidated.invalidate()
                continuation.resume()
            }.start()
        }
        calls.give(.succeed, to: 1)
        _ = try await live.response
        #expect(cancelled.state == .cancelled)
    }
}
