import Foundation
import Lumen
import Synchronization

/// `lumen thumbnail <file or URL>... --size N [--fill] --output DIR [--format png|jpeg|webp]
/// [--quality Q] [--concurrency N] [--cache DIR | --no-cache]`
///
/// Loads every input through an ``ImagePipeline`` (files and `file:`/`data:` URLs without the
/// network, `http(s):` through its loader, duplicates fetched once, downloaded bytes kept in
/// a disk cache), decodes it at the thumbnail size and writes
/// `DIR/<name without extension>.<format>`: longest side at most N (fit) or exactly N×N
/// (fill), upright. Exit 0 when all succeeded, 1 when any failed, 2 for a usage error.
enum ThumbnailCommand {
    static let usage = """
        usage: lumen thumbnail <file or URL>... --size N [--fill] --output DIR
                               [--format png|jpeg|webp] [--quality Q] [--concurrency N]
                               [--cache DIR | --no-cache]
        """

    struct Options: Sendable {
        var inputs: [String]
        var size: Int
        var fill: Bool
        var output: String
        var format: String
        var quality: Int?
        var concurrency: Int
        var cacheDirectory: String?
        var usesCache: Bool
    }

    static func parse(_ argv: [String]) throws -> Options? {
        let args = try Arguments(
            argv, valueOptions: ["size", "output", "format", "quality", "concurrency", "cache"],
            flagOptions: ["fill", "help", "no-cache"])
        if args.flag("help") { return nil }
        guard let size = try args.int("size", range: 1...65_535) else { throw UsageError("--size is required") }
        guard let output = args.string("output") else { throw UsageError("--output is required") }
        guard !args.positionals.isEmpty else { throw UsageError("no inputs") }
        let format = args.string("format") ?? "jpeg"
        guard ["png", "jpeg", "jpg", "webp"].contains(format) else {
            throw UsageError("--format must be png, jpeg or webp, got '\(format)'")
        }
        if args.flag("no-cache") && args.string("cache") != nil {
            throw UsageError("--cache and --no-cache exclude each other")
        }
        return Options(
            inputs: args.positionals, size: size, fill: args.flag("fill"), output: output,
            format: format == "jpg" ? "jpeg" : format, quality: try args.int("quality", range: 1...100),
            concurrency: try args.int("concurrency", range: 1...1024) ?? ProcessInfo.processInfo.activeProcessorCount,
            cacheDirectory: args.string("cache"), usesCache: !args.flag("no-cache"))
    }

    static func run(_ argv: [String]) async -> Int32 {
        let options: Options
        do {
            guard let parsed = try parse(argv) else { print(usage); return 0 }
            options = parsed
        } catch {
            printError("lumen thumbnail: \(error)\n\(usage)")
            return 2
        }
        do {
            try FileManager.default.createDirectory(atPath: options.output, withIntermediateDirectories: true)
        } catch {
            printError("lumen thumbnail: cannot create \(options.output): \(error.localizedDescription)")
            return 1
        }
        let pipeline = ImagePipeline(configuration: configuration(for: options))
        let encoding: EncodingFormat = switch options.format {
        case "png": .png
        case "webp": .webp(quality: options.quality ?? 80, lossless: false)
        default: .jpeg(quality: options.quality ?? 85, progressive: false)
        }
        let decodeSize: DecodeSize = options.fill
            ? .size(width: options.size, height: options.size, contentMode: .aspectFill)
            : .maxPixelSize(options.size)
        // Each distinct input is loaded once; a repeated input counts as done with it.
        var seen = Set<String>()
        let inputs = options.inputs.filter { seen.insert($0).inserted }
        let progress = ProgressReporter(total: inputs.count, isTerminal: isStandardOutputTerminal)
        let start = monotonicSeconds()
        await withTaskGroup(of: Void.self) { group in
            var next = 0
            func startNext() {
                guard next < inputs.count else { return }
                let input = inputs[next]
                next += 1
                group.addTask {
                    let outcome: String?
                    do {
                        try await thumbnail(input, pipeline: pipeline, size: decodeSize, encoding: encoding, options: options)
                        outcome = nil
                    } catch {
                        outcome = "\(error)"
                    }
                    progress.finished(input, error: outcome)
                }
            }
            for _ in 0..<options.concurrency { startNext() }
            while await group.next() != nil { startNext() }
        }
        progress.close()
        let failures = progress.failures
        let metrics = pipeline.metrics
        print(String(
            format: "thumbnail: %d done, %d failed, %d network requests, %d cache hits, %.2f s",
            options.inputs.count - failures, failures, metrics.networkRequestsStarted,
            cacheHits(metrics), monotonicSeconds() - start))
        return failures == 0 ? 0 : 1
    }

    static func configuration(for options: Options) -> ImagePipeline.Configuration {
        var configuration = ImagePipeline.Configuration()
        configuration.decodingQueue = WorkQueue(name: "lumen.decode", maxConcurrentCount: options.concurrency, execution: .threads)
        if options.usesCache {
            // Downloaded bytes are kept on disk (default `$XDG_CACHE_HOME/lumen/thumbnail`, else
            // `~/.cache/lumen/thumbnail`), so a second run over the same URLs needs no network.
            configuration.dataCache = DataCache(
                name: "thumbnail", directory: options.cacheDirectory.map { URL(fileURLWithPath: $0) },
                onFailure: { failure in printError("lumen thumbnail: cache: \(failure)") })
        }
        return configuration
    }

    /// Requests answered by a cache layer (memory or disk) instead of the network.
    static func cacheHits(_ metrics: ImagePipeline.Metrics) -> Int {
        metrics.memoryCache.hits + metrics.diskCache.hits
    }

    /// The URL an input names: `http(s):`, `file:` and `data:` URLs as given, anything else a
    /// file path.
    static func url(for input: String) -> URL {
        if let url = URL(string: input), let scheme = url.scheme?.lowercased(),
           ["http", "https", "file", "data"].contains(scheme) {
            return url
        }
        return URL(fileURLWithPath: input)
    }

    /// `photo` for `…/photo.jpg?x=1`, `image` when the URL has no usable name.
    static func outputName(for url: URL) -> String {
        if url.scheme == "data" { return "image" }
        let name = (url.lastPathComponent as NSString).deletingPathExtension
        return name.isEmpty || name == "/" ? "image" : name
    }

    static func thumbnail(_ input: String, pipeline: ImagePipeline, size: DecodeSize, encoding: EncodingFormat, options: Options) async throws {
        let url = url(for: input)
        let response = try await pipeline.image(for: ImageRequest(url: url, thumbnail: size))
        let encoded = try response.image.encode(as: encoding)
        let destination = (options.output as NSString).appendingPathComponent("\(outputName(for: url)).\(options.format)")
        try encoded.write(to: URL(fileURLWithPath: destination), options: .atomic)
    }
}

/// A progress bar on a terminal, plain lines otherwise; failures always go to stderr.
final class ProgressReporter: Sendable {
    private let total: Int
    private let isTerminal: Bool
    private let counts = Mutex<(done: Int, failed: Int)>((0, 0))

    init(total: Int, isTerminal: Bool) {
        self.total = total
        self.isTerminal = isTerminal
    }

    func finished(_ input: String, error: String?) {
        counts.withLock { counts in
            counts.done += 1
            let count = counts.done
            if let error {
                counts.failed += 1
                printError("\(input): \(error)")
            }
            if isTerminal {
                let width = 30
                let filled = total == 0 ? width : count * width / total
                let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
                FileHandle.standardOutput.write(Data("\r[\(bar)] \(count)/\(total)".utf8))
            } else {
                print("\(error == nil ? "done" : "failed") \(count)/\(total): \(input)")
            }
        }
    }

    /// Inputs that failed so far.
    var failures: Int { counts.withLock { $0.failed } }

    func close() {
        if isTerminal { FileHandle.standardOutput.write(Data("\n".utf8)) }
    }
}
