import Foundation
import Testing
@testable import Lumen

// A randomized, model-based test of the work graph, written from issue 3 and DESIGN §1–2: for
// each seed, one pipeline (memory cache on or off, disk cache off, coalescing on) runs a random
// program — start requests drawn from a few URLs × decode sizes × processor chains (sharing
// prefixes) × priorities, join running work, repeat finished and failed requests, cancel, change
// priorities, and end held loads (in chunks), decodes and processings well or badly in any
// order — beside ``GraphModel``. After every operation the pipeline must reach the model's
// state, and then every task's outcome, image, progress and state, the held calls, the pools
// (keys, subscribers, priorities of tasks and of their queued or running work), the download
// queue's order, the metrics and the memory cache must agree with it. At the end nothing may be
// left running or registered.
//
// A failure prints the seed and the operations. Reproduce or hunt with
// `LUMEN_GRAPH_MODEL_SEEDS=1234` (one seed) or `LUMEN_GRAPH_MODEL_SEEDS=1000..<5000` (a range).

@Suite(.timeLimit(.minutes(1)))
struct GraphModelTests {
    /// The seeds to run: `LUMEN_GRAPH_MODEL_SEEDS` (`n` or `a..<b`), else the first 150.
    static var seeds: Range<UInt64> {
        let text = ProcessInfo.processInfo.environment["LUMEN_GRAPH_MODEL_SEEDS"] ?? ""
        let bounds = text.components(separatedBy: "..<").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        switch bounds.count {
        case 1: return bounds[0]..<(bounds[0] + 1)
        case 2: return bounds[0]..<bounds[1]
        default: return 0..<150
        }
    }

    /// Every seed's program agrees with the model, operation by operation, and ends empty.
    @Test func randomProgramsAgreeWithTheModel() async throws {
        // At the lowest priority: the runs poll with `Task.yield()`, which must leave the
        // pipeline's own tasks (low priority at the least) free to run.
        if let failure = await Task.detached(priority: .background, operation: { await Self.run(Self.seeds) }).value {
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
