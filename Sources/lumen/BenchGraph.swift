import Foundation
import Lumen
import LumenTestSupport

/// `lumen bench coalesce` and `lumen bench overhead`: the work graph measured through the
/// public API with a fake loader and a trivial decoder, against the same work done directly.
enum BenchGraph {
    /// `count`: requests per scenario (default 10,000; smaller counts suit instruction-counting
    /// profilers such as callgrind).
    /// `rounds`: alternating pipeline/baseline rounds, the fastest of each kept.
    static func run(_ scenario: String, json: Bool, count: Int = 10_000, rounds: Int = 5) async throws {
        let result: PipelineBenchmarks.Result
        switch scenario {
        case "coalesce": result = try await PipelineBenchmarks.coalesce(count: count, rounds: rounds)
        default: result = try await PipelineBenchmarks.overhead(count: count, rounds: rounds)
        }
        var object: [String: Any] = [
            "scenario": scenario,
            "requests": result.requests,
            "networkRequests": result.networkRequests,
            "decodes": result.decodes,
            "microsPerRequest": result.microsPerRequest,
        ]
        if let b = result.baselineMicrosPerRequest {
            object["baselineMicrosPerRequest"] = b
            // coalesce: the pipeline's share per joined subscriber, the callers' own tasks
            // (measured alone in the same run) taken out; overhead's headline already is.
            if scenario == "coalesce" { object["pipelineMicrosPerSubscriber"] = result.microsPerRequest - b }
        }
        if let m = result.bytesPerInFlightRequest { object["bytesPerInFlightRequest"] = Int(m) }
        if json {
            printJSON(object)
            return
        }
        switch scenario {
        case "coalesce":
            print("coalesce: \(result.requests) concurrent image(for:) calls for one URL (fake loader, trivial decoder), fastest of \(rounds) rounds")
            print(String(format: "  %.2f µs per joined subscriber, the caller's own task included", result.microsPerRequest))
            if let b = result.baselineMicrosPerRequest {
                print(String(format: "  the same tasks awaiting one load + decode shared by hand: %.2f µs per caller", b))
                print(String(format: "  pipeline's share: %.2f µs per joined subscriber (goal ≤ 5 µs)", result.microsPerRequest - b))
            }
            print("  network requests: \(result.networkRequests) (must be 1), decodes: \(result.decodes)")
            if let m = result.bytesPerInFlightRequest { print("  memory per in-flight request: \(Int(m)) bytes") }
        default:
            print("overhead: \(result.requests) distinct requests (fake loader, trivial decoder), fastest of \(rounds) rounds")
            if let b = result.baselineMicrosPerRequest {
                print(String(format: "  direct loader + decoder: %.2f µs per request", b))
            }
            print(String(format: "  pipeline overhead: %.2f µs per request (goal ≤ 25 µs)", result.microsPerRequest))
            print("  network requests: \(result.networkRequests), decodes: \(result.decodes)")
        }
    }
}
