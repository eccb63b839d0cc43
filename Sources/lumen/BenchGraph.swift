import Foundation
import Lumen
import LumenTestSupport

/// `lumen bench coalesce` and `lumen bench overhead`: the work graph measured through the
/// public API with a fake loader and a trivial decoder, against the same work done directly.
enum BenchGraph {
    static func run(_ scenario: String, json: Bool) async throws {
        let result: PipelineBenchmarks.Result
        switch scenario {
        case "coalesce": result = try await PipelineBenchmarks.coalesce(count: 10_000)
        default: result = try await PipelineBenchmarks.overhead(count: 10_000)
        }
        var object: [String: Any] = [
            "scenario": scenario,
            "requests": result.requests,
            "networkRequests": result.networkRequests,
            "decodes": result.decodes,
            "microsPerRequest": result.microsPerRequest,
        ]
        if let b = result.baselineMicrosPerRequest { object["baselineMicrosPerRequest"] = b }
        if let m = result.bytesPerInFlightRequest { object["bytesPerInFlightRequest"] = Int(m) }
        if json {
            printJSON(object)
            return
        }
        switch scenario {
        case "coalesce":
            print("coalesce: \(result.requests) concurrent image(for:) calls for one URL (fake loader, trivial decoder)")
            print(String(format: "  %.2f µs per joined subscriber (goal ≤ 5 µs)", result.microsPerRequest))
            print("  network requests: \(result.networkRequests) (must be 1), decodes: \(result.decodes)")
            if let m = result.bytesPerInFlightRequest { print("  memory per in-flight request: \(Int(m)) bytes") }
        default:
            print("overhead: \(result.requests) distinct requests (fake loader, trivial decoder)")
            if let b = result.baselineMicrosPerRequest {
                print(String(format: "  direct loader + decoder: %.2f µs per request", b))
            }
            print(String(format: "  pipeline overhead: %.2f µs per request (goal ≤ 25 µs)", result.microsPerRequest))
            print("  network requests: \(result.networkRequests), decodes: \(result.decodes)")
        }
    }
}
