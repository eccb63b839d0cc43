import Foundation

/// `lumen bench feed`: the demo's scroll trace replayed through Lumen with its defaults,
/// Lumen with coalescing off, and a naive `AsyncImage`-like loader, each replay in its own
/// child process (its own peak memory, cold caches) against one loopback server.
enum BenchFeed {
    static func run(json: Bool, rounds: Int, quick: Bool = false, seed: UInt64 = FeedTrace.defaultSeed) throws {
        let runner = try FeedRunner(quick: quick, seed: seed) { if !json { print("feed: " + $0) } }
        // Interleaved rounds; each variant keeps its fastest round (the machines are noisy).
        var best: [FeedVariant: FeedRunStats] = [:]
        for round in 1...rounds {
            for variant in FeedVariant.allCases {
                let stats = try runner.run(variant)
                if let old = best[variant], old.wallSeconds <= stats.wallSeconds { continue }
                best[variant] = stats
            }
            if !json { print("feed: round \(round) of \(rounds) done") }
        }
        let report = FeedReport(lumen: best[.lumen]!, noCoalescing: best[.noCoalescing]!, naive: best[.naive]!)
        if json {
            var object = report.json
            object["rounds"] = rounds
            object["quick"] = quick
            object["seed"] = seed
            printJSON(object)
            return
        }
        print("feed: the demo's scroll trace, fastest of \(rounds) interleaved rounds per variant")
        print(report.table)
        print(report.ratios(quick: quick))
        for violation in report.violations { print("MISSED: \(violation)") }
    }

    /// `lumen bench-child feed <variant> <baseURL> quick|full <seed> <cacheDir> <sheet.png|->`.
    static func child(_ argv: [String]) -> Int32 {
        guard argv.count == 6, let variant = FeedVariant(rawValue: argv[0]), let baseURL = URL(string: argv[1]),
              argv[2] == "quick" || argv[2] == "full", let seed = UInt64(argv[3]) else {
            printError("lumen bench-child feed: bad arguments")
            return 2
        }
        do {
            try FeedRunner.child(variant: variant, baseURL: baseURL, quick: argv[2] == "quick", seed: seed,
                                 cacheDirectory: URL(fileURLWithPath: argv[4]),
                                 sheet: argv[5] == "-" ? nil : URL(fileURLWithPath: argv[5]))
            return 0
        } catch {
            printError("lumen bench-child feed: \(error)")
            return 1
        }
    }
}
