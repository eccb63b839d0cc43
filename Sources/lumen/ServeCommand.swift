import Dispatch
import Foundation
import Lumen
import LumenServer

/// `lumen serve`: the image server. Every option also reads from its `LUMEN_*` variable; a
/// flag on the command line wins over the environment.
enum ServeCommand {
    /// One option: its flag, its variable, its default (as shown in `--help`) and what it does.
    struct Option {
        let name: String
        let valueName: String?  // nil: a flag without a value
        let defaultText: String
        let help: String
        var isRepeatable = false
        var environment: String { "LUMEN_" + name.uppercased().replacingOccurrences(of: "-", with: "_") }
    }

    static let options: [Option] = [
        Option(name: "listen", valueName: "HOST:PORT", defaultText: "127.0.0.1:8080", help: "where to listen ([::1]:8080 for IPv6; port 0 picks one)"),
        Option(name: "key", valueName: "HEX", defaultText: "none", help: "signing key; repeat with --salt for rotation (LUMEN_KEY: comma-separated)", isRepeatable: true),
        Option(name: "salt", valueName: "HEX", defaultText: "none", help: "signing salt, one per --key", isRepeatable: true),
        Option(name: "allow-unsigned", valueName: nil, defaultText: "off", help: "accept _ as the signature segment (needed without a key)"),
        Option(name: "allow-host", valueName: "PATTERN", defaultText: "every host", help: "source hosts allowed: a.example or *.a.example (repeatable)", isRepeatable: true),
        Option(name: "allow-source-address", valueName: "CIDR", defaultText: "none", help: "special-purpose address ranges allowed anyway, e.g. 127.0.0.1/32 (repeatable)", isRepeatable: true),
        Option(name: "local-root", valueName: "DIR", defaultText: "off", help: "serve local:///path sources from inside DIR"),
        Option(name: "max-output-side", valueName: "PIXELS", defaultText: "4096", help: "largest w or h (after dpr)"),
        Option(name: "max-source-bytes", valueName: "BYTES", defaultText: "50000000", help: "largest source download (413 over it)"),
        Option(name: "max-source-pixels", valueName: "PIXELS", defaultText: "50000000", help: "largest source image, frames x area (413 over it)"),
        Option(name: "max-queue", valueName: "N", defaultText: "256", help: "requests that may wait for work; more get 429"),
        Option(name: "source-timeout", valueName: "SECONDS", defaultText: "10", help: "longest origin load, start to end (504 over it)"),
        Option(name: "client-timeout", valueName: "SECONDS", defaultText: "10", help: "idle or slow client connections are closed after this"),
        Option(name: "max-connections", valueName: "N", defaultText: "1024", help: "most client connections at once"),
        Option(name: "drain-timeout", valueName: "SECONDS", defaultText: "10", help: "on SIGTERM/SIGINT, time in-flight requests get to finish"),
        Option(name: "max-age", valueName: "SECONDS", defaultText: "86400", help: "Cache-Control max-age of images"),
        Option(name: "memory-cache", valueName: "MB", defaultText: "256", help: "encoded results kept in memory"),
        Option(name: "cache", valueName: "DIR", defaultText: "off", help: "original bytes and encoded results on disk"),
        Option(name: "cache-size", valueName: "MB", defaultText: "1024", help: "disk cache budget"),
        Option(name: "metrics-listen", valueName: "HOST:PORT", defaultText: "off", help: "serve /metrics on a listener of its own"),
        Option(name: "log-format", valueName: "text|json", defaultText: "text", help: "access log on stderr, one line per request"),
        Option(name: "redis", valueName: "redis://HOST:PORT[/DB]", defaultText: "off", help: "share results, original bytes and origin fetches with a fleet's other nodes"),
        Option(name: "redis-ttl", valueName: "SECONDS", defaultText: "86400", help: "lifetime of values stored in Redis"),
        Option(name: "redis-max-value", valueName: "BYTES", defaultText: "4194304", help: "largest value stored in Redis"),
        Option(name: "redis-timeout", valueName: "SECONDS", defaultText: "0.5", help: "a Redis connect or command slower than this counts as Redis down"),
        Option(name: "workers", valueName: "N", defaultText: "one per core", help: "decode and encode workers"),
        Option(name: "threads", valueName: "N", defaultText: "one per core", help: "HTTP threads"),
    ]

    static var help: String {
        var text = """
            usage: lumen serve [options]

            Serves GET /{signature}/{options}/{source}. Ready when it prints
            'listening on http://HOST:PORT'. SIGTERM or SIGINT drain and exit 0.

            options (each also read from its environment variable):

            """
        for option in options {
            let flag = "--\(option.name)" + (option.valueName.map { " " + $0 } ?? "")
            text += "  \(flag.padding(toLength: 34, withPad: " ", startingAt: 0)) \(option.help)\n"
            text += "  \("".padding(toLength: 34, withPad: " ", startingAt: 0)) default: \(option.defaultText); \(option.environment)\n"
        }
        return text
    }

    /// Parses flags over the environment: name → values (a flag's value is "1").
    static func parse(_ arguments: [String], environment: [String: String]) throws -> [String: [String]] {
        var values: [String: [String]] = [:]
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            guard argument.hasPrefix("--") else {
                // As every command says it: a dash is an option this command does not have.
                throw UsageError(argument.hasPrefix("-") && argument.count > 1
                    ? "unknown option \(argument)" : "unexpected argument '\(argument)'")
            }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let eq = name.firstIndex(of: "=") {
                value = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard let option = options.first(where: { $0.name == name }) else { throw UsageError("unknown option --\(name)") }
            if option.valueName == nil {
                guard value == nil else { throw UsageError("--\(name) takes no value") }
                value = "1"
            } else if value == nil {
                i += 1
                guard i < arguments.count else { throw UsageError("--\(name) needs a value") }
                value = arguments[i]
            }
            if values[name] != nil && !option.isRepeatable { throw UsageError("--\(name) given twice") }
            values[name, default: []].append(value!)
            i += 1
        }
        for option in options where values[option.name] == nil {
            guard let text = environment[option.environment], !text.isEmpty else { continue }
            values[option.name] = option.isRepeatable ? text.split(separator: ",").map(String.init) : [text]
        }
        return values
    }

    static func configuration(from values: [String: [String]]) throws -> ImageServer.Configuration {
        var c = ImageServer.Configuration()
        func one(_ name: String) -> String? { values[name]?.last }
        func int(_ name: String, _ range: ClosedRange<Int>) throws -> Int? {
            guard let text = one(name) else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw UsageError("--\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
            }
            return value
        }
        func seconds(_ name: String) throws -> Double? {
            guard let text = one(name) else { return nil }
            guard let value = Double(text), value.isFinite, value > 0, value <= 86400 else {
                throw UsageError("--\(name) must be seconds above 0, got '\(text)'")
            }
            return value
        }
        if let listen = one("listen") { (c.host, c.port) = try hostPort(listen, "listen") }
        let keys = values["key"] ?? [], salts = values["salt"] ?? []
        guard keys.count == salts.count else { throw UsageError("give one --salt for each --key (\(keys.count) keys, \(salts.count) salts)") }
        c.signers = try zip(keys, salts).map { key, salt in
            do throws(URLSigner.InvalidHex) { return try URLSigner(keyHex: key, saltHex: salt) } catch { throw UsageError(error.description) }
        }
        c.allowsUnsigned = one("allow-unsigned") == "1" || one("allow-unsigned")?.lowercased() == "true"
        c.allowedHosts = values["allow-host"] ?? []
        c.allowedSourceAddresses = try (values["allow-source-address"] ?? []).map { text in
            guard let range = IPAddressRange(text) else { throw UsageError("--allow-source-address: not a CIDR range: '\(text)'") }
            return range
        }
        if let root = one("local-root") { c.localRoot = URL(fileURLWithPath: root) }
        c.maximumOutputSide = try int("max-output-side", 1...65535) ?? c.maximumOutputSide
        c.maximumSourceBytes = try int("max-source-bytes", 1...Int(Int32.max)) ?? c.maximumSourceBytes
        c.maximumSourcePixels = try int("max-source-pixels", 1...Int(Int32.max)) ?? c.maximumSourcePixels
        c.maximumQueue = try int("max-queue", 0...1_000_000) ?? c.maximumQueue
        c.sourceTimeout = try seconds("source-timeout") ?? c.sourceTimeout
        c.clientTimeout = try int("client-timeout", 1...86400) ?? c.clientTimeout
        c.maximumConnections = try int("max-connections", 1...1_000_000) ?? c.maximumConnections
        c.drainTimeout = try seconds("drain-timeout") ?? c.drainTimeout
        c.maxAge = try int("max-age", 0...(10 * 365 * 86400)) ?? c.maxAge
        c.memoryCacheBytes = (try int("memory-cache", 0...1_000_000) ?? 256) * 1024 * 1024
        if let directory = one("cache") { c.cacheDirectory = URL(fileURLWithPath: directory) }
        c.cacheSizeBytes = (try int("cache-size", 1...100_000_000) ?? 1024) * 1024 * 1024
        if let listen = one("metrics-listen") { c.metricsListen = try hostPort(listen, "metrics-listen") }
        if let format = one("log-format") {
            guard let parsed = ImageServer.Configuration.LogFormat(rawValue: format) else {
                throw UsageError("--log-format must be text or json, got '\(format)'")
            }
            c.logFormat = parsed
        }
        if let text = one("redis") {
            do throws(ServerError) { c.redis = try RedisAddress(text) } catch { throw UsageError(error.description) }
        }
        c.redisTTL = try int("redis-ttl", 1...(365 * 86400)) ?? c.redisTTL
        c.redisMaximumValueBytes = try int("redis-max-value", 0...512 * 1024 * 1024) ?? c.redisMaximumValueBytes
        c.redisTimeout = try seconds("redis-timeout") ?? c.redisTimeout
        c.workers = try int("workers", 1...1024) ?? c.workers
        c.httpThreads = try int("threads", 1...1024) ?? c.httpThreads
        return c
    }

    /// `HOST:PORT` or `[V6]:PORT`.
    static func hostPort(_ text: String, _ name: String) throws -> (String, Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            throw UsageError("--\(name) must be HOST:PORT, got '\(text)'")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host.isEmpty ? "0.0.0.0" : host, port)
    }

    static func run(_ arguments: [String]) async -> Int32 {
        if arguments.contains("--help") || arguments.contains("-h") {
            writeOut(help)
            return 0
        }
        var configuration: ImageServer.Configuration
        do {
            configuration = try Self.configuration(from: parse(arguments, environment: ProcessInfo.processInfo.environment))
        } catch {
            printError("lumen serve: \(error)\n\nlumen serve --help lists the options")
            return 2
        }
        configuration.accessLog = { line in printError(line) }
        // A JSON log stays one object per line: the server formats its diagnostics itself.
        let jsonLog = configuration.logFormat == .json
        configuration.logger = { line in printError(jsonLog ? line : "lumen serve: \(line)") }
        let server: ImageServer
        do {
            server = try ImageServer(configuration: configuration)
        } catch {
            printError("lumen serve: \(error)")
            return 1
        }
        let shown = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        writeOut("listening on http://\(shown):\(server.port)\n")
        if let port = server.metricsPort, let listen = configuration.metricsListen {
            printError("lumen serve: metrics on http://\(listen.host):\(port)/metrics")
        }
        let signal = await Self.nextStopSignal()
        printError("lumen serve: \(signal == SIGTERM ? "SIGTERM" : "SIGINT"): draining (up to \(configuration.drainTimeout) s)")
        await server.drain()
        printError("lumen serve: stopped")
        return 0
    }

    /// Waits for SIGTERM or SIGINT.
    static func nextStopSignal() async -> Int32 {
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        let sources = [SIGTERM, SIGINT].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }
        for await number in stream { return number }
        return SIGTERM
    }
}

/// `lumen sign`: prints the path to request for a source with options.
enum SignCommand {
    static let usage = """
        usage: lumen sign --key HEX --salt HEX [--b64] OPTIONS SOURCE_URL

        Prints /{signature}/{options}/{source} for `lumen serve` (OPTIONS: _ or w:256,h:256,...).
        --b64 writes the source as b64/ + base64url instead of plain/ + percent-encoding.
        LUMEN_KEY and LUMEN_SALT are read when --key and --salt are not given (the first pair).
        """

    static func run(_ arguments: [String]) -> Int32 {
        do {
            let parsed = try Arguments(arguments, valueOptions: ["key", "salt"], flagOptions: ["b64", "help"], shortNames: ["h": "help"])
            if parsed.flag("help") {
                writeOut(usage + "\n")
                return 0
            }
            let environment = ProcessInfo.processInfo.environment
            guard let key = parsed.string("key") ?? environment["LUMEN_KEY"]?.split(separator: ",").first.map(String.init),
                  let salt = parsed.string("salt") ?? environment["LUMEN_SALT"]?.split(separator: ",").first.map(String.init) else {
                throw UsageError("--key and --salt are required")
            }
            guard parsed.positionals.count == 2 else { throw UsageError("give OPTIONS and SOURCE_URL") }
            let signer: URLSigner
            do throws(URLSigner.InvalidHex) { signer = try URLSigner(keyHex: key, saltHex: salt) } catch { throw UsageError(error.description) }
            writeOut(signer.path(options: parsed.positionals[0], source: parsed.positionals[1], base64: parsed.flag("b64")) + "\n")
            return 0
        } catch {
            printError("lumen sign: \(error)\n\(usage)")
            return 2
        }
    }
}
