import Foundation
import Lumen

/// `lumen bench [scenario...] [--json] [--iterations N] [--count N] [--quick] [--seed N]`:
/// side-by-side benchmarks (and `lumen bench serve …`, the image server's, in `BenchServe`), each measuring Lumen and its baseline in the same run and printing
/// ratios. `--quick` and `--seed` choose the feed's trace, as for `lumen demo`.
enum BenchCommand {
    static let scenarios = ["decode", "coalesce", "overhead", "cache", "feed"]

    static var usage: String {
        "usage: lumen bench [\(scenarios.joined(separator: "|"))]... [--json] [--iterations N] [--count N] [--quick] [--seed N]"
    }

    /// `lumen bench --help`: a line for each scenario and each option.
    static var help: String {
        """
        \(usage)

        Each scenario measures Lumen and its baseline in the same run and prints ratios (build
        with -c release). No scenario named: all of them, in this order.
          decode    12 MP JPEGs to 256 px: Lumen's decode-at-size against TurboJPEG's scaled
                    decode alone (the floor), a full decode + resample (naive), and Pillow and
                    libvips when installed; each variant in its own process (time, CPU, memory)
          coalesce  --count concurrent image(for:) calls for one URL through the pipeline,
                    against the same tasks sharing one load by hand: µs per caller
          overhead  --count distinct requests through the pipeline (fake loader, trivial
                    decoder), against the same work done directly: µs per request
          cache     memory-cache hits, disk-cache hits against a plain file read + decode,
                    and a sweep over 10,000 entries
          feed      the demo's scrolling feed through Lumen, Lumen without coalescing and a
                    naive loader, each in its own process (lumen demo --help)
          serve     the image server, named alone: lumen bench serve (below)

          --json          one JSON object per scenario on stdout
          --iterations N  rounds (or passes) per scenario, 1...1000 (default 5; feed: 3)
          --count N       requests for coalesce and overhead, 1...1000000 (default 10000)
          --quick         feed only: the quick trace (a smoke test; its goals of times and
                          memory are not checked)
          --seed N        feed only: another trace of the same shape (default 42)
          -h, --help      this text
        An option given twice is a usage error (exit 2).

        """
    }

    static func run(_ argv: [String]) async -> Int32 {
        // The server benchmark is named on its own (it starts a server; `lumen bench` alone
        // runs the library's scenarios).
        if argv.first == "serve" { return await BenchServe.run(Array(argv.dropFirst())) }
        if argv.first == "soak" { return await BenchSoak.run(Array(argv.dropFirst())) }
        let args: Arguments
        let iterations: Int
        let count: Int
        let seed: UInt64
        if argv.contains("--help") || argv.contains("-h") {
            print(help)
            print(BenchServe.usage)
            print("usage: lumen bench soak --minutes N [--json] [--seed N] ... (the server under faults; lumen bench soak --help)")
            return 0
        }
        do {
            args = try Arguments(argv, valueOptions: ["iterations", "count", "seed"], flagOptions: ["json", "quick"])
            iterations = try args.int("iterations", range: 1...1000) ?? 5
            count = try args.int("count", range: 1...1_000_000) ?? 10_000
            seed = try args.traceSeed()
            for s in args.positionals where !scenarios.contains(s) {
                throw UsageError("unknown scenario '\(s)' (known: \(scenarios.joined(separator: ", ")))")
            }
            if (args.flag("quick") || args.string("seed") != nil) && !args.positionals.isEmpty && !args.positionals.contains("feed") {
                throw UsageError("--quick and --seed choose the feed's trace: add the feed scenario")
            }
        } catch {
            printError("lumen bench: \(error)\n\(usage)")
            return 2
        }
        let chosen = args.positionals.isEmpty ? scenarios : args.positionals
        do {
            for scenario in chosen {
                switch scenario {
                case "decode": try BenchDecode.run(json: args.flag("json"), iterations: iterations)
                case "coalesce", "overhead": try await BenchGraph.run(scenario, json: args.flag("json"), count: count, rounds: iterations)
                case "cache": try await BenchCache.run(json: args.flag("json"), iterations: iterations)
                case "feed":
                    try BenchFeed.run(json: args.flag("json"), rounds: args.string("iterations") == nil ? 3 : iterations,
                                      quick: args.flag("quick"), seed: seed)
                default: break
                }
            }
            return 0
        } catch {
            printError("lumen bench: \(error)")
            return 1
        }
    }

    /// Entry point of a benchmark child process (`lumen bench-child …`).
    static func child(_ argv: [String]) -> Int32 {
        if argv.first == "feed" { return BenchFeed.child(Array(argv.dropFirst())) }
        guard argv.count >= 5, argv[0] == "decode", let variant = BenchDecode.Variant(rawValue: argv[1]),
              let iterations = Int(argv[2]), let threads = Int(argv[3]) else {
            printError("lumen bench-child: bad arguments")
            return 2
        }
        do {
            try BenchDecode.child(variant: variant, files: argv[4...].map { URL(fileURLWithPath: $0) }, iterations: iterations, threads: threads)
            return 0
        } catch {
            printError("lumen bench-child: \(error)")
            return 1
        }
    }
}
