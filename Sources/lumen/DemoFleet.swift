import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Synchronization

/// `lumen demo --fleet [--json] [--quick]`: three `lumen serve` nodes behind nginx, with and
/// without Redis, round robin and consistent hashing, one node killed halfway, all on
/// loopback in temporary directories; the same request mix through each.
enum DemoFleet {
    static let usage = "usage: lumen demo --fleet [--quick] [--json]"

    struct Scenario: Codable {
        var originFetches = 0
        var distinctSources = 0
        var decodes = 0
        var requests = 0
        var failures = 0
        var requestsPerSecond = 0.0
        var p99Millis = 0.0
        /// (d) only: sources fetched again although their node stayed up.
        var refetchedFromLiveNodes: Int?
    }

    struct Report: Codable {
        var roundRobin: Scenario
        var roundRobinRedis: Scenario
        var consistentHash: Scenario
        var consistentHashNodeKilled: Scenario
    }

    static func run(_ arguments: [String]) -> Int32 {
        let known: Set = ["--fleet", "--json", "--quick"]
        if let unknown = arguments.first(where: { !known.contains($0) }) {
            printError("lumen demo --fleet: unknown argument '\(unknown)'\n\(usage)")
            return 2
        }
        let json = arguments.contains("--json")
        let quick = arguments.contains("--quick")
        do {
            try installServicesIfMissing()
            let template = try nginxTemplate()
            let sources = quick ? 40 : 200
            let images = (0..<8).map { index in
                try! SyntheticPhotos.photo(width: 800, height: 533, seed: UInt64(index + 1)).encode(as: .jpeg(quality: 85))
            }
            let origin = try LoopbackServer()
            defer { origin.stop() }
            func log(_ line: String) { if !json { printError(line) } }
            var results: [String: Scenario] = [:]
            for (name, redis, hashing, kill) in [
                ("roundRobin", false, false, false), ("roundRobinRedis", true, false, false),
                ("consistentHash", false, true, false), ("consistentHashNodeKilled", false, true, true),
            ] {
                log("fleet: \(name)…")
                for index in 0..<sources {
                    origin.serve(path: "/\(name)/\(index).jpg", data: images[index % images.count], contentType: "image/jpeg")
                }
                results[name] = try scenario(name, sources: sources, origin: origin, template: template,
                                             redis: redis, hashing: hashing, kill: kill)
            }
            let report = Report(roundRobin: results["roundRobin"]!, roundRobinRedis: results["roundRobinRedis"]!,
                                consistentHash: results["consistentHash"]!, consistentHashNodeKilled: results["consistentHashNodeKilled"]!)
            let violations = check(report)
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                writeOut(String(decoding: try encoder.encode(report), as: UTF8.self) + "\n")
            } else {
                print(table(report))
                for violation in violations { print("MISSED: \(violation)") }
                if violations.isEmpty { print("every fleet goal met") }
            }
            return violations.isEmpty ? 0 : 1
        } catch {
            printError("lumen demo --fleet: \(error)")
            return 1
        }
    }

    // MARK: - One scenario

    static func scenario(_ name: String, sources: Int, origin: LoopbackServer, template: String,
                         redis useRedis: Bool, hashing: Bool, kill: Bool) throws -> Scenario {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-fleet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var redis: ServiceProcess?
        var redisURL: String?
        if useRedis {
            let port = ServiceProcess.freePort()
            let process = try ServiceProcess("redis-server", [
                "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", directory.path, "--logfile", ""])
            try process.waitForLine(containing: "Ready to accept connections")
            redis = process
            redisURL = "redis://127.0.0.1:\(port)"
        }
        defer { redis?.stop() }
        let key = randomHex(16), salt = randomHex(8)
        let signer = try URLSigner(keyHex: key, saltHex: salt)
        var nodes: [(process: ServiceProcess, port: Int)] = []
        defer { for node in nodes { node.process.stop(signal: SIGKILL) } }
        for index in 0..<3 {
            var arguments = ["serve", "--listen", "127.0.0.1:0", "--key", key, "--salt", salt,
                             "--allow-source-address", "127.0.0.1/32", "--cache", directory.appendingPathComponent("node\(index)").path,
                             "--workers", "1", "--threads", "2", "--max-queue", "1024"]
            if let redisURL { arguments += ["--redis", redisURL] }
            let process = try ServiceProcess("/proc/self/exe", arguments)
            try process.waitForLine(containing: "listening on http://")
            guard let line = process.outputText.split(separator: "\n").first(where: { $0.contains("listening on http://") }),
                  let port = Int(line.split(separator: ":").last ?? "")
            else { throw DemoFleetError("node \(index) printed no port") }
            nodes.append((process, port))
        }
        let nginx = try NginxFront(template: template, nodes: nodes.map(\.port), consistentHashing: hashing)
        defer { nginx.stop() }

        // The mix: every source at 4 sizes, in a shuffled order (so that one source's sizes
        // arrive apart), and a burst of 5 at once for every tenth source's sizes.
        let sizes = ["w:160", "w:320", "w:240,h:240,fit:cover", "w:480"]
        var rng = SplitMix64(seed: 7)
        var groups: [[(source: Int, path: String)]] = []
        for source in 0..<sources {
            let url = origin.url(for: "/\(name)/\(source).jpg").absoluteString
            for size in sizes {
                let path = signer.path(options: size, source: url)
                groups.append(Array(repeating: (source, path), count: source % 10 == 0 ? 5 : 1))
            }
        }
        for i in stride(from: groups.count - 1, to: 0, by: -1) { groups.swapAt(i, Int(rng.next() % UInt64(i + 1))) }
        let work = groups.flatMap { $0 }

        let next = Atomic<Int>(0)
        let outcomes = Mutex([(status: Int, seconds: Double, node: String?, source: Int)]())
        let killed = Mutex<(port: Int, decodes: Int)?>(nil)
        let first = nodes[0]
        let started = monotonicSeconds()
        let clients = 8
        let group = DispatchGroup()
        for _ in 0..<clients {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                var client = KeepAliveClient(port: nginx.port)
                while true {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    guard index < work.count else { break }
                    if kill && index == work.count / 2 {
                        // Halfway: node 0 dies (SIGKILL), requests in flight on it included.
                        let victim = first
                        let decodes = decodeCount(port: victim.port)
                        kill9(victim.process)
                        killed.withLock { $0 = (victim.port, decodes) }
                    }
                    let begin = monotonicSeconds()
                    let response = client.get(work[index].path)
                    let seconds = monotonicSeconds() - begin
                    outcomes.withLock { $0.append((response.status, seconds, response.node, work[index].source)) }
                }
                client.close()
            }
            thread.start()
        }
        group.wait()
        let elapsed = monotonicSeconds() - started
        let all = outcomes.withLock { $0 }
        let victim = killed.withLock { $0 }
        var decodes = victim?.decodes ?? 0
        for node in nodes where node.port != victim?.port { decodes += decodeCount(port: node.port) }
        var fetches = 0
        var refetched: [Int] = []
        for source in 0..<sources {
            let count = origin.requestCount(for: "/\(name)/\(source).jpg")
            fetches += count
            if count > 1 { refetched.append(source) }
        }
        var result = Scenario(
            originFetches: fetches, distinctSources: sources, decodes: decodes, requests: all.count,
            failures: all.filter { $0.status != 200 }.count,
            requestsPerSecond: Double(all.count) / max(elapsed, 1e-9),
            p99Millis: percentile(all.map(\.seconds), 0.99) * 1000)
        if let victim {
            // A source fetched again is fine when its node was the one killed: some answer for
            // it came from that node, or was retried away from it (nginx lists every node it
            // tried, "127.0.0.1:A, 127.0.0.1:B").
            let victimAddress = "127.0.0.1:\(victim.port)"
            result.refetchedFromLiveNodes = refetched.filter { source in
                !all.contains { $0.source == source && ($0.node ?? "").contains(victimAddress) }
            }.count
        }
        return result
    }

    static func kill9(_ process: ServiceProcess) { process.stop(signal: SIGKILL) }

    /// `lumen_decodes_total` from a node's /metrics (0 when it cannot be read).
    static func decodeCount(port: Int) -> Int {
        var client = KeepAliveClient(port: port)
        defer { client.close() }
        let response = client.get("/metrics", keepingBody: true)
        let text = String(decoding: response.body ?? [], as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("lumen_decodes_total ") }) else { return 0 }
        return Int(line.split(separator: " ").last ?? "") ?? 0
    }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    static func monotonicSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    // MARK: - Goals and the table

    static func check(_ r: Report) -> [String] {
        var missed: [String] = []
        for (name, s) in [("round robin with Redis", r.roundRobinRedis), ("consistent hashing", r.consistentHash)] {
            let ratio = Double(s.originFetches) / Double(max(1, s.distinctSources))
            if ratio > 1.05 { missed.append(String(format: "\(name): %.2f origin fetches per source (goal ≤ 1.05)", ratio)) }
        }
        for (name, s) in [("round robin", r.roundRobin), ("round robin with Redis", r.roundRobinRedis),
                          ("consistent hashing", r.consistentHash), ("one node killed", r.consistentHashNodeKilled)] where s.failures > 0 {
            missed.append("\(name): \(s.failures) of \(s.requests) requests failed (goal 0)")
        }
        if let stray = r.consistentHashNodeKilled.refetchedFromLiveNodes, stray > 0 {
            missed.append("one node killed: \(stray) sources of nodes that stayed up were fetched again (goal 0)")
        }
        return missed
    }

    static func table(_ r: Report) -> String {
        var out = "scenario                         fetches/source  decodes  requests  failures     req/s   p99 ms\n"
        for (name, s) in [("(a) round robin", r.roundRobin), ("(b) round robin + Redis", r.roundRobinRedis),
                          ("(c) consistent hashing", r.consistentHash), ("(d) consistent, node killed", r.consistentHashNodeKilled)] {
            out += name.padding(toLength: 32, withPad: " ", startingAt: 0) + String(format: " %14.2f %8d %9d %9d %9.0f %8.1f\n",
                          Double(s.originFetches) / Double(max(1, s.distinctSources)), s.decodes, s.requests, s.failures,
                          s.requestsPerSecond, s.p99Millis)
        }
        if let stray = r.consistentHashNodeKilled.refetchedFromLiveNodes {
            out += "(d): sources refetched although their node stayed up: \(stray)\n"
        }
        return out
    }

    // MARK: - Setting up

    /// nginx and redis-server from Debian when missing (as root, or through sudo), without
    /// starting them as system services.
    static func installServicesIfMissing() throws {
        var missing: [String] = []
        if ServiceProcess.find("nginx") == nil { missing.append("nginx") }
        if ServiceProcess.find("redis-server") == nil { missing.append("redis-server") }
        guard !missing.isEmpty else { return }
        printError("lumen demo --fleet: installing \(missing.joined(separator: " ")) (apt)")
        let sudo = getuid() == 0 ? "" : "sudo "
        let script = """
            set -e
            made=0
            if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\\nexit 101\\n' | \(sudo)tee /usr/sbin/policy-rc.d >/dev/null; \(sudo)chmod +x /usr/sbin/policy-rc.d; made=1; fi
            status=0
            \(sudo)env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \(sudo)env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \(missing.joined(separator: " ")) || status=$?
            if [ "$made" = 1 ]; then \(sudo)rm -f /usr/sbin/policy-rc.d; fi
            exit $status
            """
        let install = try ServiceProcess("/bin/sh", ["-c", script])
        let status = install.waitForExit()
        guard status == 0 else { throw DemoFleetError("installing \(missing.joined(separator: " ")) failed:\n\(install.outputText)") }
    }

    /// deploy/nginx/lumen.conf: from `LUMEN_NGINX_CONF`, the working directory, or beside the
    /// checkout the binary was built in.
    static func nginxTemplate() throws -> String {
        var candidates = ["deploy/nginx/lumen.conf"]
        if let path = ProcessInfo.processInfo.environment["LUMEN_NGINX_CONF"] { candidates.insert(path, at: 0) }
        if let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
            for _ in 0..<4 {
                url = url.deletingLastPathComponent()
                candidates.append(url.appendingPathComponent("deploy/nginx/lumen.conf").path)
            }
        }
        for path in candidates {
            if let text = try? String(contentsOfFile: path, encoding: .utf8) { return text }
        }
        throw DemoFleetError("cannot find deploy/nginx/lumen.conf (run from the checkout, or set LUMEN_NGINX_CONF)")
    }
}

struct DemoFleetError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `count` random bytes as hex (a throwaway signing key for the demo's nodes).
func randomHex(_ count: Int) -> String {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
}
