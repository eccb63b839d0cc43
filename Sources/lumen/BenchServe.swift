import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Synchronization

/// `lumen bench serve`: `ImageServer` and a loopback origin in this process, driven by an
/// HTTP/1.1 keep-alive client of its own over three workloads: distinct sources, a burst of
/// clients for one new source at three sizes, and hot (cached) results. `--compare` points the
/// same client and workloads, with the same source bytes from the same origin, at other
/// servers (thumbor, nginx's image filter), and the report gives Lumen's ratios to each.
enum BenchServe {
    static let usage = """
        usage: lumen bench serve [--json] [--quick] [--wrk] [--compare NAME=URL-TEMPLATE]... [--hot-url NAME=URL]...
                                 [--pid NAME=PID]... [--write-hot-result FILE]
          Lumen's server and a loopback origin of 2048x1365 photo-like JPEGs, in this process, under three workloads:
            distinct  every source once at 512x512 fit:contain, 2 clients (the image-servers benchmark's workload)
            burst     200 clients at once for one new source at 128, 256 and 512 px (contain)
            hot       requests for a 512-px result already made, 2 clients
          --compare NAME=URL-TEMPLATE  also drive another server on 127.0.0.1 (repeatable). The template is a URL
                                       http://127.0.0.1:PORT/... with {w} and {h} (the box, contain), and {source}
                                       (the origin URL of the source), {path} (its path, no leading /) or
                                       {origin-port}. Origin fetches are counted at the origin; decodes are Lumen's only.
                                         thumbor=http://127.0.0.1:8888/unsafe/fit-in/{w}x{h}/{source}
                                         nginx=http://127.0.0.1:8090/resize/{w}/{h}/{origin-port}/{path}
                                         lumen-serve=http://127.0.0.1:8080/_/w:{w},h:{h},fit:contain/plain/{source}
                                       (the last: `lumen serve` as its own process, for its peak RSS alone)
          --hot-url NAME=URL           NAME's hot workload GETs URL instead (a static file of the same bytes)
          --write-hot-result FILE      write Lumen's hot result to FILE before the other servers run (for --hot-url)
          --pid NAME=PID               NAME's peak RSS is the sum of VmHWM over PID and its children (repeatable)
          --wrk                        run wrk (\(Wrk.arguments.joined(separator: " "))) on every server's hot URL too
          --quick                      fewer requests (a smoke test, not a measurement)
          --json                       the report as one JSON object
          The issue's goals are checked for servers named thumbor, nginx and lumen-serve.
        """

    /// One workload on one server.
    struct Workload: Codable {
        var name: String
        var requests = 0
        var failures = 0
        var requestsPerSecond = 0.0
        var p50Millis = 0.0
        var p99Millis = 0.0
        /// Requests the origin received during the workload.
        var originFetches = 0
        /// Source decodes (Lumen's own counter; nil for other servers).
        var decodes: Int?
        /// The server's peak resident memory during the workload (nil when unknown).
        var peakRSSBytes: Int?
        var meanResponseBytes = 0
    }

    /// Every workload on one server.
    struct ServerRun: Codable {
        var name: String
        var workloads: [Workload] = []
        /// wrk's requests per second on the hot URL, with `--wrk`.
        var wrkHotRequestsPerSecond: Double?

        func workload(_ name: String) -> Workload? { workloads.first { $0.name == name } }
    }

    struct Goal: Codable {
        var goal: String
        var measured: String
        var isMet: Bool
    }

    struct Report: Codable {
        var servers: [ServerRun]
        var goals: [Goal]
    }

    /// A server on 127.0.0.1 to drive.
    struct Target: Sendable {
        var name: String
        var port: Int
        /// The request path for an origin path (`/d3.jpg`) resized to fit a box.
        var path: @Sendable (_ source: String, _ width: Int, _ height: Int) -> String
        /// Where the hot workload goes, when not to `path`'s result (nginx serving a static file).
        var hotURL: LoopbackURL?
        /// Whose memory is the server's: nil for this process.
        var pids: [Int32]?
        /// Source decodes so far, for Lumen.
        var decodes: (@Sendable () -> Int)?
    }

    /// A `http://127.0.0.1:PORT/...` URL, split.
    struct LoopbackURL: Sendable {
        var port: Int
        var path: String

        init(_ text: String) throws {
            let prefix = "http://127.0.0.1:"
            guard text.hasPrefix(prefix) else { throw UsageError("'\(text)' is not a URL on http://127.0.0.1:PORT/") }
            let rest = text.dropFirst(prefix.count)
            let digits = rest.prefix { $0.isNumber }
            guard let port = Int(digits), (1...65535).contains(port), rest.dropFirst(digits.count).hasPrefix("/") else {
                throw UsageError("'\(text)' is not a URL on http://127.0.0.1:PORT/")
            }
            self.port = port
            self.path = String(rest.dropFirst(digits.count))
        }
    }

    struct Options {
        var json = false, quick = false, wrk = false
        var compares: [(name: String, template: LoopbackURL)] = []
        var hotURLs: [String: LoopbackURL] = [:]
        var pids: [String: [Int32]] = [:]
        var hotResultFile: String?
    }

    static let placeholders: Set<String> = ["w", "h", "source", "path", "origin-port"]

    static func parse(_ arguments: [String]) throws -> Options {
        let args = try Arguments(arguments, valueOptions: ["compare", "hot-url", "pid", "write-hot-result"],
                                 flagOptions: ["json", "quick", "wrk"], repeatableOptions: ["compare", "hot-url", "pid"])
        if let extra = args.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
        var options = Options(json: args.flag("json"), quick: args.flag("quick"), wrk: args.flag("wrk"))
        options.hotResultFile = args.string("write-hot-result")
        func split(_ value: String, _ option: String) throws -> (String, String) {
            guard let eq = value.firstIndex(of: "="), eq != value.startIndex else { throw UsageError("--\(option) takes NAME=VALUE, got '\(value)'") }
            return (String(value[..<eq]), String(value[value.index(after: eq)...]))
        }
        for value in args.strings("compare") {
            let (name, template) = try split(value, "compare")
            guard name != "lumen", !options.compares.contains(where: { $0.name == name }) else {
                throw UsageError("--compare: '\(name)' is named twice (lumen is the server under test)")
            }
            var names = Set<String>()
            var rest = Substring(template)
            while let open = rest.firstIndex(of: "{") {
                guard let close = rest[open...].firstIndex(of: "}") else { throw UsageError("--compare \(name): unclosed { in the template") }
                names.insert(String(rest[rest.index(after: open)..<close]))
                rest = rest[rest.index(after: close)...]
            }
            if let unknown = names.subtracting(placeholders).sorted().first {
                throw UsageError("--compare \(name): unknown placeholder {\(unknown)} (known: {w} {h} {source} {path} {origin-port})")
            }
            guard names.contains("source") || names.contains("path") else {
                throw UsageError("--compare \(name): the template names no source ({source} or {path})")
            }
            options.compares.append((name, try LoopbackURL(template)))
        }
        let compared = Set(options.compares.map(\.name))
        for value in args.strings("hot-url") {
            let (name, url) = try split(value, "hot-url")
            guard compared.contains(name) else { throw UsageError("--hot-url: no --compare \(name)") }
            options.hotURLs[name] = try LoopbackURL(url)
        }
        for value in args.strings("pid") {
            let (name, text) = try split(value, "pid")
            guard compared.contains(name) else { throw UsageError("--pid: no --compare \(name)") }
            guard let pid = Int32(text), pid > 0 else { throw UsageError("--pid \(name): '\(text)' is not a process id") }
            options.pids[name, default: []].append(pid)
        }
        return options
    }

    static func run(_ arguments: [String]) async -> Int32 {
        if arguments.contains("--help") || arguments.contains("-h") {
            writeOut(usage + "\n")
            return 0
        }
        let options: Options
        do { options = try parse(arguments) } catch {
            printError("lumen bench serve: \(error)\n\(usage)")
            return 2
        }
        do {
            let servers = try await measure(options)
            let report = Report(servers: servers, goals: goals(servers))
            if options.json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                writeOut(String(decoding: try encoder.encode(report), as: UTF8.self) + "\n")
            } else {
                writeOut(text(report, options: options))
            }
            return servers.allSatisfy { $0.workloads.allSatisfy { $0.failures == 0 } } ? 0 : 1
        } catch {
            printError("lumen bench serve: \(error)")
            return 1
        }
    }

    /// The workloads' sizes.
    struct Plan {
        var images: Int, distinct: Int, burstClients: Int, hot: Int
        static let full = Plan(images: 24, distinct: 120, burstClients: 200, hot: 20_000)
        static let quick = Plan(images: 3, distinct: 6, burstClients: 12, hot: 200)
    }

    static let burstSizes = [128, 256, 512]

    static func measure(_ options: Options) async throws -> [ServerRun] {
        let plan = options.quick ? Plan.quick : Plan.full
        let origin = try LoopbackServer()
        defer { origin.stop() }
        printError("making \(plan.images + 1) photo-like 2048x1365 JPEG sources...")
        var photos: [Data] = []
        for i in 0...plan.images {
            photos.append(try SyntheticPhotos.photo(width: 2048, height: 1365, seed: UInt64(i + 1)).encode(as: .jpeg(quality: 85)))
        }
        // Distinct URLs cycle through the images: each is a new source to every server.
        for i in 0..<plan.distinct {
            origin.serve(path: "/d\(i).jpg", data: photos[i % plan.images], contentType: "image/jpeg")
        }
        origin.serve(path: "/burst.jpg", data: photos[plan.images], contentType: "image/jpeg")

        var configuration = ImageServer.Configuration()
        configuration.port = 0
        configuration.allowsUnsigned = true
        configuration.allowedSourceAddresses = [IPAddressRange("127.0.0.1/32")!]
        let server = try ImageServer(configuration: configuration)
        defer { server.stop() }
        let originURL = origin.baseURL.absoluteString
        let lumen = Target(
            name: "lumen", port: server.port,
            path: { source, width, height in
                URLSigner.unsignedPath(options: "w:\(width),h:\(height),fit:contain", source: originURL + source)
            },
            decodes: { server.metrics.decodes })
        var runs = [await measure(lumen, plan: plan, origin: origin, wrk: options.wrk)]
        if let file = options.hotResultFile {
            var client = KeepAliveClient(port: lumen.port)
            let response = client.get(lumen.path("/d1.jpg", 512, 512), keepingBody: true)
            client.close()
            guard response.status == 200, let body = response.body else { throw UsageError("Lumen's hot result: status \(response.status)") }
            try Data(body).write(to: URL(fileURLWithPath: file))
        }
        let originPort = String(origin.port)
        for (name, template) in options.compares {
            let target = Target(
                name: name, port: template.port,
                path: { source, width, height in
                    template.path.replacingOccurrences(of: "{w}", with: String(width))
                        .replacingOccurrences(of: "{h}", with: String(height))
                        .replacingOccurrences(of: "{source}", with: originURL + source)
                        .replacingOccurrences(of: "{path}", with: String(source.dropFirst()))
                        .replacingOccurrences(of: "{origin-port}", with: originPort)
                },
                hotURL: options.hotURLs[name], pids: options.pids[name] ?? [])
            runs.append(await measure(target, plan: plan, origin: origin, wrk: options.wrk))
        }
        return runs
    }

    /// The three workloads on one server, in order: distinct (which also makes the hot
    /// result), burst, hot.
    static func measure(_ target: Target, plan: Plan, origin: LoopbackServer, wrk: Bool) async -> ServerRun {
        printError("driving \(target.name)...")
        var run = ServerRun(name: target.name)
        let distinct = (0..<plan.distinct).map { target.path("/d\($0).jpg", 512, 512) }
        run.workloads.append(await drive("distinct", target, port: target.port, clients: 2, paths: distinct, origin: origin))
        let burst = (0..<plan.burstClients).map { target.path("/burst.jpg", burstSizes[$0 % 3], burstSizes[$0 % 3]) }
        run.workloads.append(await drive("burst", target, port: target.port, clients: plan.burstClients, paths: burst, origin: origin))
        let hotPath = target.hotURL?.path ?? target.path("/d1.jpg", 512, 512)
        let port = target.hotURL?.port ?? target.port
        var warm = KeepAliveClient(port: port)
        _ = warm.get(hotPath)
        warm.close()
        run.workloads.append(await drive("hot", target, port: port, clients: 2, paths: Array(repeating: hotPath, count: plan.hot), origin: origin))
        if wrk { run.wrkHotRequestsPerSecond = Wrk.requestsPerSecond("http://127.0.0.1:\(port)\(hotPath)") }
        return run
    }

    /// Sends `paths` from `clients` keep-alive connections (each takes the next path); the
    /// clock starts when every client is connected.
    static func drive(_ name: String, _ target: Target, port: Int, clients: Int, paths: [String], origin: LoopbackServer) async -> Workload {
        let pids = target.pids.map { PeakMemory.tree($0) } ?? [getpid()]
        PeakMemory.reset(pids)
        let fetchesBefore = origin.statistics.totalRequests
        let decodesBefore = target.decodes?()
        let tally = Tally()
        let startLine = StartLine(count: clients)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                group.addTask {
                    await onThread {
                        var connection = KeepAliveClient(port: port)
                        _ = connection.open()
                        startLine.arrive()
                        var latencies: [Double] = []
                        var bytes = 0
                        while true {
                            let i = tally.next.add(1, ordering: .relaxed).oldValue
                            guard i < paths.count else { break }
                            let t0 = monotonicSeconds()
                            let response = connection.get(paths[i])
                            latencies.append(monotonicSeconds() - t0)
                            if response.status != 200 { tally.failures.add(1, ordering: .relaxed) }
                            bytes += response.bodyBytes
                        }
                        connection.close()
                        tally.finish(latencies, bytes: bytes)
                    }
                }
            }
        }
        let elapsed = monotonicSeconds() - startLine.startedAt
        let (latencies, bytes) = tally.results.withLock { $0 }
        let sorted = latencies.sorted()
        func percentile(_ p: Double) -> Double { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000 }
        let peak = PeakMemory.sum(target.pids.map { PeakMemory.tree($0) } ?? [getpid()])
        return Workload(
            name: name, requests: paths.count, failures: tally.failures.load(ordering: .relaxed),
            requestsPerSecond: Double(paths.count) / elapsed, p50Millis: percentile(0.5), p99Millis: percentile(0.99),
            originFetches: origin.statistics.totalRequests - fetchesBefore,
            decodes: decodesBefore.flatMap { before in target.decodes.map { $0() - before } },
            peakRSSBytes: peak > 0 ? peak : nil, meanResponseBytes: paths.isEmpty ? 0 : bytes / paths.count)
    }

    final class Tally: Sendable {
        let next = Atomic<Int>(0)
        let failures = Atomic<Int>(0)
        let results = Mutex<(latencies: [Double], bytes: Int)>(([], 0))

        func finish(_ latencies: [Double], bytes: Int) {
            results.withLock { $0.latencies += latencies; $0.bytes += bytes }
        }
    }

    static func onThread(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                body()
                continuation.resume()
            }
        }
    }
}
