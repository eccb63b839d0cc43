import Foundation
import Lumen
import LumenTestSupport

/// `lumen bench coalesce` and `lumen bench overhead`: the work graph measured through the
/// public API with a fake loader and a trivial decoder, against the same work done directly.
///
/// In both scenarios `microsPerRequest` is the pipeline's whole cost per request,
/// `baselineMicrosPerRequest` the same work done directly, `overheadMicrosPerRequest` their
/// difference and `pipelineOverBaseline` their ratio.
enum BenchGraph {
    /// `count`: requests per scenario (default 10,000; smaller counts suit instruction-counting
    /// profilers such as callgrind).
    /// `rounds`: alternating pipeline/baseline rounds, the fastest of each kept.
    static func run(_ scenario: String, json: Bool, count: Int = 10_000, rounds: Int = 5) async throws {
        let result = scenario == "coalesce"
            ? try await PipelineBenchmarks.coalesce(count: count, rounds: rounds)
            : try await PipelineBenchmarks.overhead(count: count, rounds: rounds)
        var object: [String: Any] = [
            "scenario": scenario,
            "requests": result.requests,
            "networkRequests": result.networkRequests,
            "decodes": result.decodes,
            "microsPerRequest": result.microsPerRequest,
        ]
        // The baseline, and the pipeline's difference from it and ratio to it (all or none).
        var compared: (baseline: Double, overhead: Double, ratio: Double)?
        if let b = result.baselineMicrosPerRequest, let o = result.overheadMicrosPerRequest, let r = result.pipelineOverBaseline {
            compared = (b, o, r)
        }
        if let compared {
            object["baselineMicrosPerRequest"] = compared.baseline
            object["overheadMicrosPerRequest"] = compared.overhead
            object["pipelineOverBaseline"] = compared.ratio
            // coalesce: the pipeline's share per joined subscriber (the same difference, under
            // the name it first had).
            if scenario == "coalesce" { object["pipelineMicrosPerSubscriber"] = compared.overhead }
        }
        if let m = result.bytesPerInFlightRequest { object["bytesPerInFlightRequest"] = Int(m) }
        if json {
            printJSON(object)
            return
        }
        switch scenario {
        case "coalesce":
            print("coalesce: \(result.requests) concurrent image(for:) calls for one URL (fake loader, trivial decoder), fastest of \(rounds) rounds")
            print(String(format: "  pipeline: %.2f µs per joined subscriber, the caller's own task included", result.microsPerRequest))
            if let compared {
                print(String(format: "  baseline: the same tasks awaiting one load + decode shared by hand: %.2f µs per caller", compared.baseline))
                print(String(format: "  ratio pipeline ÷ baseline: %.2f×", compared.ratio))
                print(String(format: "  pipeline's share (pipeline − baseline): %.2f µs per joined subscriber (goal ≤ 5 µs)", compared.overhead))
            }
            print("  network requests: \(result.networkRequests) (must be 1), decodes: \(result.decodes)")
            if let m = result.bytesPerInFlightRequest { print("  memory per in-flight request: \(Int(m)) bytes") }
        default:
            print("overhead: \(result.requests) distinct requests (fake loader, trivial decoder), fastest of \(rounds) rounds")
            print(String(format: "  pipeline: image(for:) per request: %.2f µs", result.microsPerRequest))
            if let compared {
                print(String(format: "  baseline: the same loader + decoder called directly: %.2f µs per request", compared.baseline))
                print(String(format: "  ratio pipeline ÷ baseline: %.2f×", compared.ratio))
                print(String(format: "  pipeline overhead (pipeline − baseline): %.2f µs per request (goal ≤ 25 µs)", compared.overhead))
            }
            print("  network requests: \(result.networkRequests), decodes: \(result.decodes)")
        }
    }
}
