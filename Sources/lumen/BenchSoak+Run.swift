import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Synchronization

/// The soak's run: the server child, the drivers, the cache phases, the samples.
extension BenchSoak {
    struct Sample: Codable, Sendable {
        var seconds: Double
        var rssBytes: Int
        var openFDs: Int
    }

    struct CachePhase: Codable, Sendable {
        var name: String
        var atSeconds: Double
        var action: String
        /// What a write under the directory gave just after the change ("ENOTDIR"), if tried.
        var writeError: String?
    }

    struct Trend: Codable, Sendable {
        var verdict: String
        var rule: String
        var samplesUsed: Int
        var middleMeanRSSBytes: Double
        var lastMeanRSSBytes: Double
        var rssSlopeBytesPerMinute: Double
        var middleMeanFDs: Double
        var lastMeanFDs: Double
        var fdSlopePerMinute: Double
        var isRSSGrowing: Bool
        var isFDGrowing: Bool
    }

    struct ServerOutcome: Codable, Sendable {
        var pid: Int32
        /// The exit status after SIGTERM (nil when it was killed by a signal).
        var exitStatus: Int32?
        /// Died during the run, or by a signal.
        var crashed: Bool
        /// The access log, when kept.
        var log: String?
    }

    struct Report: Codable, Sendable {
        var seed: UInt64
        var minutes: Double
        var seconds: Double
        var sources: [String]
        var requests: Int
        var responsesByStatus: [String: Int]
        var byKind: [String: [String: Int]]
        var byPhase: [String: [String: Int]]
        var faultsInjected: [String: Int]
        var originRequests: Int
        var checkedImages: Int
        var wrongImages: Int
        var maximumMeanDifference: Double
        var unexpected: Int
        var unexpectedSamples: [String]
        /// Requests a client sent again on a new connection after the first failed (a kept-alive
        /// connection the server closed; not counted as unexpected, reported so a hidden reset shows).
        var clientRetries: Int
        var cachePhases: [CachePhase]
        var cacheFilesAtEnd: Int
        var samples: [Sample]
        /// A sample taken after every client has closed its connections.
        var idleAfterClients: Sample?
        var trend: Trend
        var server: ServerOutcome
        var passed: Bool
    }

    static func soak(_ options: Options) throws -> Report {
        let sources = try sources(options)
        let duration = options.minutes * 60
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-soak-\(getpid())-\(UInt64(Date().timeIntervalSince1970))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let cache = work.appendingPathComponent("cache")
        try FileManager.default.createDirectory(at: cache, withIntermediateDirectories: true)
        let logPath = work.appendingPathComponent("server.log").path
        defer { if !options.keep { try? FileManager.default.removeItem(at: work) } }

        let origin = try FaultyOrigin(sources: sources.map(\.data), stallSeconds: options.sourceTimeout + 2)
        defer { origin.stop() }
        let keyHex = "736f616b2d6b6579", saltHex = "736f616b2d73616c74"
        let signer = try URLSigner(keyHex: keyHex, saltHex: saltHex)
        let server = try ServerChild(arguments: [
            "serve", "--listen", "127.0.0.1:0", "--key", keyHex, "--salt", saltHex,
            "--allow-source-address", "127.0.0.1/32", "--cache", cache.path, "--cache-size", "64",
            "--memory-cache", "4", "--source-timeout", String(options.sourceTimeout), "--client-timeout", "5",
            "--drain-timeout", "5",
        ], log: logPath)
        printError("lumen bench soak: server pid \(server.pid) on 127.0.0.1:\(server.port), origin on 127.0.0.1:\(origin.port), \(sources.count) sources, \(options.minutes) min")

        let references = References(sources: sources.map(\.data))
        let tally = Tally()
        let start = monotonicSeconds()
        let deadline = start + duration
        let nonces = Atomic<UInt64>(1_000_000)
        @Sendable func path(_ variant: Variant, _ fault: FaultyOrigin.Fault, nonce: UInt64) -> String {
            signer.path(options: variant.options, source: origin.url(source: variant.source, fault: fault, nonce: nonce))
        }
        var orderRNG = SplitMix64(seed: options.seed &+ 0xFA17)
        let faultOrder = FaultyOrigin.Fault.allCases.filter { $0 != .good }.shuffled(using: &orderRNG)
        let faultTurn = Atomic<Int>(0)
        let hot = (0..<4).map { Variant(source: $0 % sources.count, width: 128, height: 128, format: "jpeg") }
        let port = server.port

        // The main mix.
        var threads: [ThreadJoin] = []
        for client in 0..<options.clients {
            threads.append(ThreadJoin {
                var rng = SplitMix64(seed: options.seed &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(client + 1))
                var connection = KeepAliveClient(port: port)
                connection.receiveTimeout = 30
                while monotonicSeconds() < deadline {
                    let roll = rng.next() % 100
                    let kind: String, target: String, expected: Set<Int>
                    var variant: Variant?
                    switch roll {
                    case 0..<35:
                        let v = Variant.random(sources: sources.count, &rng)
                        (kind, variant, expected) = ("distinct", v, [200])
                        target = path(v, .good, nonce: rng.next() % 40)
                    case 35..<62:
                        // In turn through an order the seed shuffles: every kind comes early.
                        let fault = faultOrder[faultTurn.add(1, ordering: .relaxed).oldValue % faultOrder.count]
                        let v = Variant.random(sources: sources.count, &rng)
                        (kind, expected) = ("fault:\(fault.rawValue)", fault.expected)
                        variant = fault.expected.contains(200) ? v : nil
                        target = path(v, fault, nonce: nonces.add(1, ordering: .relaxed).oldValue)
                    case 62..<82:
                        let v = hot[Int(rng.next() % UInt64(hot.count))]
                        (kind, variant, expected) = ("hot", v, [200])
                        target = path(v, .good, nonce: 0)
                    case 82..<91:
                        let good = path(Variant.random(sources: sources.count, &rng), .good, nonce: 1)
                        // Another valid-looking signature: its first character changed.
                        var characters = Array(good.dropFirst())
                        characters[0] = characters[0] == "A" ? "B" : "A"
                        (kind, expected, target) = ("bad-signature", [403], "/" + String(characters))
                    default:
                        let bad = badOptions[Int(rng.next() % UInt64(badOptions.count))]
                        (kind, expected) = ("bad-options", [400])
                        target = signer.path(options: bad, source: origin.url(source: 0, fault: .good, nonce: 2))
                    }
                    let response = connection.get(target, keepingBody: variant != nil)
                    tally.record(kind, status: response.status, expected: expected, detail: target)
                    if response.status == 200, let variant { tally.check(response.body, variant, references: references, detail: target) }
                }
                tally.state.withLock { $0.clientRetries += connection.retries }
                connection.close()
            })
        }
        // Bursts: 12 kept-alive connections at once for a new source at three sizes.
        threads.append(ThreadJoin {
            var rng = SplitMix64(seed: options.seed &+ 0xB0B5)
            var pool = (0..<12).map { _ in
                var c = KeepAliveClient(port: port)
                c.receiveTimeout = 30
                return c
            }
            while monotonicSeconds() + 1 < deadline {
                let nonce = nonces.add(1, ordering: .relaxed).oldValue
                let source = Int(rng.next() % UInt64(sources.count))
                let line = StartLine(count: pool.count)
                let results = Mutex<[(Int, KeepAliveClient)]>([])
                var joins: [ThreadJoin] = []
                for (i, client) in pool.enumerated() {
                    joins.append(ThreadJoin {
                        var client = client
                        _ = client.open()
                        let v = Variant(source: source, width: [96, 160, 256][i % 3], height: [96, 160, 256][i % 3], format: "jpeg")
                        let target = path(v, .good, nonce: nonce)
                        line.arrive()
                        let response = client.get(target, keepingBody: true)
                        tally.record("burst", status: response.status, expected: [200], detail: target)
                        if response.status == 200 { tally.check(response.body, v, references: references, detail: target) }
                        results.withLock { $0.append((i, client)) }
                    })
                }
                joins.forEach { $0.join() }
                pool = results.withLock { $0 }.sorted { $0.0 < $1.0 }.map(\.1)
                usleep(3_000_000)
            }
            for i in pool.indices {
                tally.state.withLock { [retries = pool[i].retries] in $0.clientRetries += retries }
                pool[i].close()
            }
        })
        // Malformed requests, raw, each on a new connection.
        threads.append(ThreadJoin {
            var i = 0
            while monotonicSeconds() < deadline {
                let (name, bytes) = malformed[i % malformed.count]
                let status = raw(bytes, port: port)
                tally.record("malformed:\(name)", status: status, expected: malformedStatuses(name), detail: name)
                i += 1
                usleep(100_000)
            }
        })

        // The cache's phases and the samples, on this thread.
        let sampleEvery = options.sampleEvery ?? min(5, max(0.5, duration / 12))
        var samples: [Sample] = []
        var phases: [CachePhase] = []
        var crashedDuringRun = false
        let marks: [(Double, String)] = [(0.3, "deleted"), (0.5, "unwritable"), (0.7, "restored")]
        var nextSample = start
        while monotonicSeconds() < deadline {
            let now = monotonicSeconds()
            if let (_, name) = marks.first(where: { mark in now >= start + mark.0 * duration && !phases.contains { $0.name == mark.1 } }) {
                phases.append(changeCache(cache, to: name, at: now - start))
                tally.phase.withLock { $0 = name }
            }
            if now >= nextSample {
                guard let sample = ServerChild.sample(server.pid, at: now - start) else { crashedDuringRun = true; break }
                samples.append(sample)
                nextSample += sampleEvery
            }
            usleep(50_000)
        }
        threads.forEach { $0.join() }
        // Once the clients have gone: what the server holds at rest (not part of the trend).
        let idle = ServerChild.sample(server.pid, at: monotonicSeconds() - start)
        if idle == nil { crashedDuringRun = true }
        let cacheFiles = FileManager.default.enumerator(atPath: cache.path)?.allObjects.count ?? 0
        let exit = server.stop()
        let seconds = monotonicSeconds() - start

        let state = tally.state.withLock { $0 }
        let trend = trend(samples)
        let outcome = ServerOutcome(pid: server.pid, exitStatus: exit, crashed: crashedDuringRun || exit == nil,
                                    log: options.keep ? logPath : nil)
        let passed = state.wrongImages == 0 && state.unexpected == 0 && !trend.isRSSGrowing && !trend.isFDGrowing
            && !outcome.crashed && exit == 0
        return Report(
            seed: options.seed, minutes: options.minutes, seconds: seconds, sources: sources.map(\.name),
            requests: state.requests, responsesByStatus: state.byStatus, byKind: state.byKind, byPhase: state.byPhase,
            faultsInjected: origin.injected, originRequests: origin.requests, checkedImages: state.checkedImages,
            wrongImages: state.wrongImages, maximumMeanDifference: state.maximumMeanDifference,
            unexpected: state.unexpected, unexpectedSamples: state.samples, clientRetries: state.clientRetries, cachePhases: phases,
            cacheFilesAtEnd: cacheFiles, samples: samples, idleAfterClients: idle, trend: trend, server: outcome, passed: passed)
    }

    /// Deletes the cache directory, replaces it by a regular file, or makes it again.
    static func changeCache(_ cache: URL, to phase: String, at seconds: Double) -> CachePhase {
        let manager = FileManager.default
        switch phase {
        case "deleted":
            try? manager.removeItem(at: cache)
            return CachePhase(name: phase, atSeconds: seconds, action: "rm -r \(cache.lastPathComponent)/ while the server runs")
        case "unwritable":
            // The server may make the directory again between the removal and the file's
            // creation: until a regular file holds the name.
            for _ in 0..<1000 {
                try? manager.removeItem(at: cache)
                let file = open(cache.path, O_CREAT | O_EXCL | O_WRONLY, 0o644)
                if file >= 0 { close(file); break }
            }
            // Proof that writes fail, for root too.
            let probe = open(cache.path + "/originals", O_CREAT | O_WRONLY, 0o644)
            let error = probe < 0 ? String(cString: strerror(errno)) + (errno == ENOTDIR ? " (ENOTDIR)" : "") : "none: the write succeeded"
            if probe >= 0 { close(probe) }
            return CachePhase(name: phase, atSeconds: seconds,
                              action: "\(cache.lastPathComponent)/ replaced by a regular file of that name (chmod does not stop root)",
                              writeError: error)
        default:
            try? manager.removeItem(at: cache)
            try? manager.createDirectory(at: cache, withIntermediateDirectories: true)
            return CachePhase(name: phase, atSeconds: seconds, action: "the file removed, \(cache.lastPathComponent)/ made again, empty")
        }
    }

    /// The shortest run whose samples get a growth verdict.
    static let minimumJudgedSeconds = 120.0

    /// After a warm-up third: the last third's mean against the middle third's, and a
    /// least-squares slope for the record.
    static func trend(_ samples: [Sample]) -> Trend {
        let rule = "after a warm-up third, growing = last third's mean over the middle third's by > 10% and > 8 MB (RSS), > 20% and > 8 (fds); "
            + "runs under \(Int(minimumJudgedSeconds)) s are not judged (their caches are still filling)"
        let n = samples.count
        let judged = (samples.last?.seconds ?? 0) >= minimumJudgedSeconds * 0.95
        guard n >= 6, judged else {
            return Trend(verdict: n < 6 ? "not judged: too few samples (\(n))" : "not judged: a run under \(Int(minimumJudgedSeconds)) s", rule: rule, samplesUsed: n, middleMeanRSSBytes: 0, lastMeanRSSBytes: 0,
                         rssSlopeBytesPerMinute: 0, middleMeanFDs: 0, lastMeanFDs: 0, fdSlopePerMinute: 0, isRSSGrowing: false, isFDGrowing: false)
        }
        let middle = samples[(n / 3)..<(2 * n / 3)], last = samples[(2 * n / 3)...]
        func mean(_ s: ArraySlice<Sample>, _ value: (Sample) -> Double) -> Double { s.map(value).reduce(0, +) / Double(s.count) }
        func slope(_ value: (Sample) -> Double) -> Double {
            let used = samples[(n / 3)...]
            let mx = mean(used) { $0.seconds }, my = mean(used, value)
            let sxx = used.reduce(0) { $0 + ($1.seconds - mx) * ($1.seconds - mx) }
            let sxy = used.reduce(0) { $0 + ($1.seconds - mx) * (value($1) - my) }
            return sxx > 0 ? sxy / sxx * 60 : 0
        }
        let rss: (Sample) -> Double = { Double($0.rssBytes) }, fds: (Sample) -> Double = { Double($0.openFDs) }
        let (mr, lr, mf, lf) = (mean(middle, rss), mean(last, rss), mean(middle, fds), mean(last, fds))
        let rssGrowing = lr > mr * 1.10 && lr - mr > 8_000_000
        let fdGrowing = lf > mf * 1.20 && lf - mf > 8
        let verdict = rssGrowing || fdGrowing
            ? "growth: " + [rssGrowing ? "RSS" : nil, fdGrowing ? "open descriptors" : nil].compactMap { $0 }.joined(separator: " and ")
            : "no growth"
        return Trend(verdict: verdict, rule: rule, samplesUsed: n - n / 3, middleMeanRSSBytes: mr, lastMeanRSSBytes: lr,
                     rssSlopeBytesPerMinute: slope(rss), middleMeanFDs: mf, lastMeanFDs: lf, fdSlopePerMinute: slope(fds),
                     isRSSGrowing: rssGrowing, isFDGrowing: fdGrowing)
    }

    static func text(_ r: Report) -> String {
        func counts(_ d: [String: Int]) -> String { d.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " ") }
        var out = "lumen bench soak: \(String(format: "%.1f", r.seconds)) s, seed \(r.seed), server pid \(r.server.pid) (`lumen serve` child), \(r.sources.count) sources\n"
        out += "  requests \(r.requests): \(counts(r.responsesByStatus))\n"
        out += "  images checked \(r.checkedImages), wrong \(r.wrongImages) (largest mean difference \(String(format: "%.3f", r.maximumMeanDifference)), tolerance \(tolerance))\n"
        out += "  unexpected \(r.unexpected); requests sent again on a new connection after a failed exchange: \(r.clientRetries)\n"
        for sample in r.unexpectedSamples { out += "    \(sample)\n" }
        out += "  faults injected (origin responses): \(counts(r.faultsInjected)); origin requests \(r.originRequests)\n"
        out += "  by kind:\n"
        for (kind, statuses) in r.byKind.sorted(by: { $0.key < $1.key }) { out += "    \(kind.padding(toLength: 32, withPad: " ", startingAt: 0)) \(counts(statuses))\n" }
        out += "  cache phases:\n"
        for phase in r.cachePhases {
            out += "    \(String(format: "%6.1f", phase.atSeconds)) s  \(phase.name): \(phase.action)\(phase.writeError.map { "; a write under it: \($0)" } ?? "")\n"
        }
        for (phase, statuses) in r.byPhase.sorted(by: { $0.key < $1.key }) { out += "    during \(phase.padding(toLength: 11, withPad: " ", startingAt: 0)) \(counts(statuses))\n" }
        out += "    files in the cache at the end: \(r.cacheFilesAtEnd)\n"
        out += "  samples (s, RSS MB, open fds):"
        for (i, s) in r.samples.enumerated() {
            if i % 6 == 0 { out += "\n   " }
            out += String(format: "  %6.1f %6.1f %4d", s.seconds, Double(s.rssBytes) / 1e6, s.openFDs)
        }
        if let idle = r.idleAfterClients {
            out += String(format: "\n    after the clients closed: %.1f s, %.1f MB, %d fds", idle.seconds, Double(idle.rssBytes) / 1e6, idle.openFDs)
        }
        let t = r.trend
        out += "\n  trend: \(t.verdict) — RSS middle \(String(format: "%.1f", t.middleMeanRSSBytes / 1e6)) MB, last \(String(format: "%.1f", t.lastMeanRSSBytes / 1e6)) MB, slope \(String(format: "%.2f", t.rssSlopeBytesPerMinute / 1e6)) MB/min;"
        out += " fds middle \(String(format: "%.1f", t.middleMeanFDs)), last \(String(format: "%.1f", t.lastMeanFDs)), slope \(String(format: "%.2f", t.fdSlopePerMinute))/min\n"
        out += "    (\(t.rule))\n"
        out += "  server: exit status \(r.server.exitStatus.map(String.init) ?? "none (signal)")\(r.server.crashed ? ", CRASHED" : "")\(r.server.log.map { ", log \($0)" } ?? "")\n"
        out += r.passed ? "PASSED\n" : "FAILED\n"
        return out
    }
}

/// A plain thread whose end can be waited for.
final class ThreadJoin: Sendable {
    private let done = DispatchSemaphore(value: 0)

    init(_ body: @escaping @Sendable () -> Void) {
        Thread.detachNewThread { [done] in
            body()
            done.signal()
        }
    }

    func join() { done.wait() }
}

/// `lumen serve` as a child: stdout read until its `listening on` line, stderr (the access
/// log) to a file, every signal at its default so SIGTERM drains it.
struct ServerChild {
    let pid: pid_t
    let port: Int

    init(arguments: [String], log: String) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw UsageError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addclose(&actions, fds[1])
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LUMEN_") }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        close(fds[1])
        guard result == 0 else { close(fds[0]); throw UsageError("could not start \(executable): errno \(result)") }
        pid = child
        // Ready is the line `listening on http://127.0.0.1:PORT`.
        var text = ""
        var byte: UInt8 = 0
        var port: Int?
        while port == nil, read(fds[0], &byte, 1) == 1 {
            if byte == 10 {
                if let range = text.range(of: "listening on http://127.0.0.1:") { port = Int(text[range.upperBound...].prefix { $0.isNumber }) }
                text = ""
            } else {
                text.append(Character(UnicodeScalar(byte)))
            }
        }
        guard let port else {
            close(fds[0])
            kill(child, SIGKILL)
            var status: Int32 = 0
            waitpid(child, &status, 0)
            throw UsageError("lumen serve did not start (see \(log))")
        }
        self.port = port
        // The rest of stdout, drained so the child never blocks on it.
        let out = fds[0]
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while buffer.withUnsafeMutableBytes({ read(out, $0.baseAddress, $0.count) }) > 0 {}
            close(out)
        }
    }

    /// VmRSS and the number of open descriptors now; nil when the process is gone.
    static func sample(_ pid: pid_t, at seconds: Double) -> Sample? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              !status.contains("State:\tZ"),
              let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return nil }
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
        let kilobytes = line?.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return Sample(seconds: seconds, rssBytes: kilobytes * 1024, openFDs: fds.count)
    }

    typealias Sample = BenchSoak.Sample

    /// SIGTERM, then waits (SIGKILL after 30 s); the exit status, nil when a signal ended it.
    func stop() -> Int32? {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<300 {
            if waitpid(pid, &status, WNOHANG) == pid { return Self.exitStatus(status) }
            usleep(100_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        return nil
    }

    private static func exitStatus(_ status: Int32) -> Int32? {
        (status & 0x7f) == 0 ? (status >> 8) & 0xff : nil
    }
}
