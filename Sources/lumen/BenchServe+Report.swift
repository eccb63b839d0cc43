import Foundation

/// `lumen bench serve`'s table, Lumen's ratios to every other server, and the issue's goals.
extension BenchServe {
    static func text(_ report: Report, options: Options) -> String {
        let plan = options.quick ? Plan.quick : Plan.full
        var out = """
            lumen bench serve: 2048x1365 photo-like JPEG sources from one loopback origin, the same keep-alive client for every server
              distinct  \(plan.distinct) sources once each at 512x512 fit:contain, 2 clients
              burst     \(plan.burstClients) clients at once for one new source at \(burstSizes.map(String.init).joined(separator: ", ")) px
              hot       \(plan.hot) requests for a 512-px result already made, 2 clients\(options.hotURLs.isEmpty ? "" : " (\(options.hotURLs.keys.sorted().joined(separator: ", ")): a static file of Lumen's result)")
              Lumen × = Lumen's requests per second over the server's; peak RSS: the server's processes (Lumen's includes the origin and client)

            workload  server         req/s    p50 ms    p99 ms  origin fetches  decodes  peak RSS MB  mean KB  failures  Lumen ×

            """
        let lumen = report.servers.first
        for name in ["distinct", "burst", "hot"] {
            for server in report.servers {
                guard let w = server.workload(name) else { continue }
                var ratio = ""
                if server.name != "lumen", let mine = lumen?.workload(name), w.requestsPerSecond > 0 {
                    ratio = String(format: "%.2f×", mine.requestsPerSecond / w.requestsPerSecond)
                }
                let decodes = w.decodes.map(String.init) ?? "—"
                let rss = w.peakRSSBytes.map { String(format: "%.1f", Double($0) / 1e6) } ?? "—"
                out += name.padding(9) + " " + server.name.padding(10)
                    + String(format: " %9.1f %9.2f %9.2f %15d ", w.requestsPerSecond, w.p50Millis, w.p99Millis, w.originFetches)
                    + decodes.padding(8, right: true) + " " + rss.padding(12, right: true)
                    + String(format: " %8.1f %9d  ", Double(w.meanResponseBytes) / 1000, w.failures) + ratio + "\n"
            }
        }
        if options.wrk {
            out += "\nhot, driven by wrk \(Wrk.arguments.joined(separator: " ")) (second opinion)\n"
            for server in report.servers {
                var line = "  " + server.name.padding(10) + " "
                if let rate = server.wrkHotRequestsPerSecond {
                    line += String(format: "%9.1f req/s", rate)
                    if server.name != "lumen", let mine = lumen?.wrkHotRequestsPerSecond, rate > 0 {
                        line += String(format: "  Lumen × %.2f", mine / rate)
                    }
                } else {
                    line += "wrk failed (not installed, or non-2xx responses)"
                }
                out += line + "\n"
            }
        }
        if !report.goals.isEmpty {
            out += "\ngoals\n"
            for goal in report.goals {
                out += "  \(goal.isMet ? "met   " : "MISSED") \(goal.goal): \(goal.measured)\n"
            }
        }
        return out
    }

    /// The issue's goals, for the servers named thumbor and nginx that were compared.
    static func goals(_ servers: [ServerRun]) -> [Goal] {
        guard let lumen = servers.first(where: { $0.name == "lumen" }) else { return [] }
        let thumbor = servers.first { $0.name == "thumbor" }, nginx = servers.first { $0.name == "nginx" }
        var goals: [Goal] = []
        func rate(_ run: ServerRun?, _ workload: String) -> Double? { run?.workload(workload)?.requestsPerSecond }
        func ratio(_ goal: String, _ workload: String, _ other: ServerRun?, atLeast bound: Double) {
            guard let mine = rate(lumen, workload), let theirs = rate(other, workload), theirs > 0 else { return }
            let measured = String(format: "%.2f× (%.1f vs %.1f req/s)", mine / theirs, mine, theirs)
            goals.append(Goal(goal: goal, measured: measured, isMet: mine / theirs >= bound))
        }
        ratio("distinct ≥ 2.5× thumbor's requests per second", "distinct", thumbor, atLeast: 2.5)
        ratio("distinct ≥ 5× nginx image_filter's requests per second", "distinct", nginx, atLeast: 5)
        if let burst = lumen.workload("burst") {
            let sizes = burstSizes.count
            goals.append(Goal(
                goal: "burst: exactly 1 origin fetch and one decode per distinct decode size (\(sizes) sizes)",
                measured: "\(burst.originFetches) origin fetch\(burst.originFetches == 1 ? "" : "es"), \(burst.decodes.map(String.init) ?? "?") decodes",
                isMet: burst.originFetches == 1 && burst.decodes == sizes))
        }
        ratio("burst ≥ 10× thumbor's requests per second", "burst", thumbor, atLeast: 10)
        ratio("hot ≥ 50% of nginx serving the same bytes as a static file", "hot", nginx, atLeast: 0.5)
        if let mine = lumen.workload("burst")?.peakRSSBytes, let theirs = thumbor?.workload("burst")?.peakRSSBytes {
            goals.append(Goal(goal: "peak RSS under the burst below thumbor's",
                              measured: String(format: "%.1f MB vs %.1f MB", Double(mine) / 1e6, Double(theirs) / 1e6),
                              isMet: mine < theirs))
        }
        if let mine = servers.first(where: { $0.name == "lumen-serve" })?.workload("burst")?.peakRSSBytes,
           let theirs = thumbor?.workload("burst")?.peakRSSBytes {
            goals.append(Goal(goal: "peak RSS under the burst below thumbor's, Lumen as its own process (lumen-serve)",
                              measured: String(format: "%.1f MB vs %.1f MB", Double(mine) / 1e6, Double(theirs) / 1e6),
                              isMet: mine < theirs))
        }
        if let mine = lumen.wrkHotRequestsPerSecond, let theirs = nginx?.wrkHotRequestsPerSecond, theirs > 0 {
            goals.append(Goal(goal: "hot ≥ 50% of nginx's static file, measured by wrk (second opinion)",
                              measured: String(format: "%.2f× (%.0f vs %.0f req/s)", mine / theirs, mine, theirs),
                              isMet: mine / theirs >= 0.5))
        }
        return goals
    }
}

fileprivate extension String {
    /// The string padded with spaces to `width` characters, on the right (left-aligned) or,
    /// with `right`, on the left.
    func padding(_ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - count))
        return right ? fill + self : self + fill
    }
}
