import Foundation
import Lumen
import Synchronization

/// `lumen thumbnail <file or URL>... --size N [--fill] --output DIR [--format png|jpeg|webp]
/// [--quality Q] [--concurrency N] [--timeout SECONDS] [--cache DIR | --no-cache]`
///
/// Loads every input through an ``ImagePipeline`` (files and `file:`/`data:` URLs without the
/// network, `http(s):` through its loader, downloaded bytes kept in a disk cache), decodes it
/// at the thumbnail size and writes it to `DIR`: longest side at most N (fit) or exactly N×N
/// (fill), upright. Exit 0 when all succeeded, 1 when any failed, 2 for a usage error.
///
/// Inputs: `http:`, `https:`, `file:` and `data:` URLs (the scheme in any case; the `#fragment`
/// is ignored, as a server never sees it); another `scheme://…` is an unsupported scheme;
/// anything else is a file path. Inputs naming the same URL (or the same file) are loaded
/// once and share one outcome and one output; the summary counts every input given, so
/// done + failed is the number of inputs.
///
/// Output names: `DIR/<name>.<format>`, `<name>` being the input's last path component
/// without its extension and query (`image` for `data:` URLs). Names are given in input order
/// before anything loads: when distinct inputs would share a name, the first keeps it and the
/// next ones get `<name>-2`, `<name>-3`, … A name that would replace an input file (an input
/// in DIR with the output format's extension) takes the next one the same way. Control
/// characters and Unicode format characters (bidi overrides and isolates, zero-width
/// characters: see ``isControlOrFormat(_:)``) in a name become `_`, and in printed lines Swift
/// escapes (`\n`, `\u{202E}`): one input, one line, its text in the order it was written.
/// Each plain progress line names the file written (`done 3/5: <input> -> <file>`); on a
/// terminal, the outputs of inputs that share a name
/// (the first one and the renamed ones) are listed above the bar.
enum ThumbnailCommand {
    static let usage = """
        usage: lumen thumbnail <file or URL>... --size N [--fill] --output DIR
                               [--format png|jpeg|webp] [--quality Q] [--concurrency N]
                               [--timeout SECONDS] [--cache DIR | --no-cache]

          -s, --size N           longest side at most N pixels (1...65535); an image smaller
                                 than that is kept at its size, never enlarged
              --fill             exactly N x N instead: cropped to the square, and enlarged
                                 (scaled up) when the image is smaller than N on a side
          -o, --output DIR       where the thumbnails go (created when missing)
          -f, --format F         png, jpeg (or jpg; any case) or webp; default jpeg
          -q, --quality Q        1...100, for jpeg (default 85) and webp (default 80); with
                                 png (lossless) it is a usage error
          -j, --concurrency N    inputs loaded and decoded at once (default: one per core)
              --timeout SECONDS  the longest a download may take, start to end (default 600);
                                 over it the input fails ("timed out")
              --cache DIR        keep downloaded bytes in DIR (default ~/.cache/lumen/thumbnail,
                                 or under $XDG_CACHE_HOME). DIR must be new, empty, or a cache
                                 made by lumen (it holds the file .lumen-cache): only there are
                                 files ever removed, and only its own entries
              --no-cache         no disk cache
          -h, --help             this text

        Inputs are files or http(s):, file: or data: URLs (scheme in any case, #fragment
        ignored); repeated inputs are loaded once; an input that starts with - goes after --.
        A download that receives no bytes for 60 seconds (the idle limit) fails too ("timed
        out": "no bytes came for 60.0 s"), however long --timeout is. Each thumbnail goes to DIR/<name>.<format>, <name> being the input's
        file name without extension and query ("image" for data: URLs); when distinct inputs
        share a name, the later ones in input order get <name>-2, <name>-3, ... A thumbnail never
        replaces an input file: it takes the next name. An option given twice is a usage error.
        Exit status: 0 when every input succeeded, 1 when any failed, 2 for a usage error.
        """

    struct Options: Sendable {
        /// `--timeout`'s default: the loaders' own resource timeout.
        static let defaultTimeout: Double = 600

        var inputs: [String]
        var size: Int
        var fill: Bool
        var output: String
        var format: String
        var quality: Int?
        var concurrency: Int
        /// The longest a download may take, start to end, in seconds.
        var timeout: Double = Self.defaultTimeout
        var cacheDirectory: String?
        var usesCache: Bool
    }

    /// Why an input cannot be loaded, found before it reaches the pipeline.
    struct InputError: Error, CustomStringConvertible {
        var description: String
    }

    /// One distinct input: what to load and where its thumbnail goes.
    struct Job: Sendable {
        /// The input as first given; progress and failure lines name it.
        var input: String
        /// How many inputs name it: its outcome counts once for each.
        var count = 1
        /// The URL to load and the file to write, or why the input cannot be loaded.
        var plan: Result<Plan, InputError>

        /// The input as progress and error lines show it: `""` for an empty one, and a long
        /// one (a `data:` URL, say) cut to its first 60 characters.
        var shownInput: String {
            if input.isEmpty { return "\"\"" }
            let shown = redacted(input)
            return shown.count > 80 ? "\(shown.prefix(60))… (\(shown.count) characters)" : shown
        }

        /// `text` with the credentials of the input's URL (`scheme://user:password@host/…`)
        /// replaced: the password by `***`, or a user without one (a token, as often as not)
        /// entirely. Wherever they appear — as typed, as the URL spells them (percent-encoded),
        /// in a path made of the input — lines and error messages that name the URL never show
        /// them. An input that is no valid URL (a `/` in the password, say) hides everything
        /// up to its last `@`.
        func redacted(_ text: String) -> String {
            let isValid = (try? plan.get()) != nil
            var result = text
            for spelling in [input, URL(string: input)?.absoluteString].compactMap({ $0 }) {
                guard let userInfo = Self.userInfo(in: spelling, upToLastAt: !isValid) else { continue }
                let hidden = userInfo.firstIndex(of: ":").map { userInfo[..<$0] + ":***" } ?? "***"
                result = result.replacingOccurrences(of: userInfo + "@", with: hidden + "@")
            }
            return result
        }

        /// The user information of a URL as written: after `scheme:` and any slashes (libcurl
        /// reads `http:/user:pw@host` as credentials too) — or after the first `://` of a file
        /// path that holds a URL (` http://…`, `dir/http://…`) — up to the last `@` before the
        /// first `/`, `?` or `#`; `upToLastAt`, up to the last `@` of all. `nil` without one.
        static func userInfo(in text: String, upToLastAt: Bool = false) -> Substring? {
            let rest: Substring
            if let colon = text.firstIndex(of: ":"), ThumbnailCommand.scheme(text[..<colon]) != nil {
                rest = text[text.index(after: colon)...].drop { $0 == "/" }
            } else if let separator = text.range(of: "://") {
                rest = text[separator.upperBound...]
            } else {
                return nil
            }
            let authority = upToLastAt ? rest : rest[..<(rest.firstIndex { "/?#".contains($0) } ?? rest.endIndex)]
            guard let at = authority.lastIndex(of: "@") else { return nil }
            let userInfo = authority[..<at]
            return userInfo.isEmpty ? nil : userInfo
        }
    }

    /// Whether `scalar` is a control character (general category Cc: a line feed, an escape)
    /// or a format character (Cf: the bidi overrides, embeddings and isolates U+202A–U+202E
    /// and U+2066–U+2069, the zero-width space and marks U+200B, U+200E, U+200F, U+FEFF, …).
    /// The first kind can split a line or drive the terminal; the second can reorder or hide
    /// the text around it, so that a name reads as something it is not (`…\u{202E}gpj.exe`
    /// shows as `…exe.jpg`). The zero-width non-joiner and joiner (U+200C, U+200D) are kept:
    /// words in Persian or Indic scripts and emoji sequences (👩‍💻) need them, and they move
    /// nothing.
    static func isControlOrFormat(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control: true
        case .format: scalar != "\u{200C}" && scalar != "\u{200D}"
        default: false
        }
    }

    /// `text` with its control and format characters (see ``isControlOrFormat(_:)``) written as
    /// Swift escapes (`\n`, `\r`, `\u{1B}`, `\u{202E}`): an input or a reason printed in a line
    /// can neither split it, reach the terminal as a control sequence, nor show its text
    /// reordered or hidden.
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControlOrFormat) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            guard isControlOrFormat(scalar) else {
                result.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default: result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            }
        }
        return result
    }

    /// Where a loadable input comes from and where its thumbnail goes.
    struct Plan: Sendable {
        var url: URL
        var destination: String
        /// Whether another input's output has the same base name (this one, or the other,
        /// got a `-2`, `-3`, … suffix): on a terminal such outputs are listed above the bar.
        var sharesName: Bool
    }

    /// The short forms: `-s 256`, `-o DIR`, `-f png`, `-q 80`, `-j 4`, `-h`.
    static let shortNames: [Character: String] = [
        "s": "size", "o": "output", "f": "format", "q": "quality", "j": "concurrency", "h": "help",
    ]

    static func parse(_ argv: [String]) throws -> Options? {
        let args = try Arguments(
            argv, valueOptions: ["size", "output", "format", "quality", "concurrency", "timeout", "cache"],
            flagOptions: ["fill", "help", "no-cache"], shortNames: shortNames)
        if args.flag("help") { return nil }
        guard let size = try args.int("size", range: 1...65_535) else { throw UsageError("--size is required") }
        guard let output = args.string("output") else { throw UsageError("--output is required") }
        guard !output.isEmpty else { throw UsageError("--output needs a directory, got an empty value") }
        // An empty --cache would make the current directory the cache's own (its clean-up
        // removes the files it recognises as its entries there).
        if args.string("cache")?.isEmpty == true { throw UsageError("--cache needs a directory, got an empty value") }
        guard !args.positionals.isEmpty else { throw UsageError("no inputs") }
        let given = args.string("format") ?? "jpeg"
        // Case-insensitive; `jpg` is `jpeg` (and the thumbnails are named `.jpeg`).
        let format = given.lowercased() == "jpg" ? "jpeg" : given.lowercased()
        guard ["png", "jpeg", "webp"].contains(format) else {
            throw UsageError("--format must be png, jpeg (or jpg) or webp, got '\(given)'")
        }
        if format == "png", args.string("quality") != nil {
            throw UsageError("--quality applies to jpeg and webp; png is lossless and has no quality")
        }
        if args.flag("no-cache") && args.string("cache") != nil {
            throw UsageError("--cache and --no-cache exclude each other")
        }
        var timeout = Options.defaultTimeout
        if let text = args.string("timeout") {
            guard let seconds = Double(text), seconds.isFinite, seconds > 0, seconds <= 86_400 else {
                throw UsageError("--timeout must be a number of seconds above 0 and at most 86400, got '\(text)'")
            }
            timeout = seconds
        }
        return Options(
            inputs: args.positionals, size: size, fill: args.flag("fill"), output: output,
            format: format, quality: try args.int("quality", range: 1...100),
            concurrency: try args.int("concurrency", range: 1...1024) ?? ProcessInfo.processInfo.activeProcessorCount,
            timeout: timeout, cacheDirectory: args.string("cache"), usesCache: !args.flag("no-cache"))
    }

    static func run(_ argv: [String]) async -> Int32 {
        // The thumbnails are the product, the lines only report on them: a reader of stdout
        // or stderr that went away makes writes fail (`EPIPE`, dropped), not the run.
        signal(SIGPIPE, SIG_IGN)
        var options: Options
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
            // No input can be written: every one fails (exit 1), and this line says why.
            printError("lumen thumbnail: cannot create the output directory \(options.output): \(posixReason(error, path: options.output, creatingDirectory: true))")
            return 1
        }
        if options.usesCache, let directory = options.cacheDirectory {
            do {
                try claimCacheDirectory(directory)
            } catch {
                // Not fatal: the thumbnails are made without a disk cache.
                printError("lumen thumbnail: cache: \(error); the run goes on without a disk cache")
                options.usesCache = false
            }
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
        let jobs = jobs(for: options.inputs, output: options.output, format: options.format)
        let progress = ProgressReporter(total: options.inputs.count, isTerminal: isStandardOutputTerminal)
        let start = monotonicSeconds()
        progress.start()
        await withTaskGroup(of: Void.self) { group in
            var next = 0
            func startNext() {
                guard next < jobs.count else { return }
                let job = jobs[next]
                next += 1
                group.addTask {
                    let outcome: String?
                    do {
                        try await thumbnail(job.plan.get(), pipeline: pipeline, size: decodeSize, encoding: encoding)
                        outcome = nil
                    } catch {
                        outcome = "\(error)"
                    }
                    progress.finished(job, error: outcome)
                }
            }
            for _ in 0..<options.concurrency { startNext() }
            while await group.next() != nil { startNext() }
        }
        progress.close()
        // Downloaded bytes are written to the disk cache in the background: finish before
        // exiting, so that the next run finds them.
        if let dataCache = pipeline.configuration.dataCache as? DataCache { await dataCache.flush() }
        let counts = progress.counts
        let metrics = pipeline.metrics
        print(String(
            format: "thumbnail: %d done, %d failed, %d network requests, %d cache hits, %.2f s",
            counts.done, counts.failed, metrics.networkRequestsStarted,
            cacheHits(metrics), monotonicSeconds() - start))
        return counts.failed == 0 ? 0 : 1
    }

    /// The file that marks a `--cache DIR` as lumen's own (see ``claimCacheDirectory(_:)``).
    static let cacheMarker = ".lumen-cache"

    /// Why a `--cache DIR` is not used.
    struct CacheDirectoryError: Error, CustomStringConvertible {
        var description: String
    }

    /// Makes sure that `path` is a directory the disk cache may own before the cache touches
    /// it: the cache's clean-up removes files that are named like its entries (64 hex
    /// characters), and a user's directory may hold such a file. A directory that holds
    /// ``cacheMarker`` is used as it is; a new or empty one is created (with its parents) and
    /// marked; anything else (a directory with files and no marker, a file) is refused, and
    /// nothing in it is touched.
    static func claimCacheDirectory(_ path: String) throws {
        let directory = URL(fileURLWithPath: path)
        let marker = directory.appendingPathComponent(cacheMarker)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw CacheDirectoryError(description: "cannot use \(path): \(String(cString: strerror(EEXIST))) and is not a directory")
            }
            if FileManager.default.fileExists(atPath: marker.path) { return }
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: path)
            } catch {
                throw CacheDirectoryError(description: "cannot list \(path): \(posixReason(error, path: path, creatingDirectory: false))")
            }
            guard names.isEmpty else {
                throw CacheDirectoryError(description: "\(path) holds files and is not a lumen cache (it has no \(cacheMarker)): nothing in it is used or removed; give a new or empty directory")
            }
        } else {
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            } catch {
                throw CacheDirectoryError(description: "cannot create \(path): \(posixReason(error, path: path, creatingDirectory: true))")
            }
        }
        // The entries hold URLs, which may carry credentials: the directory and the marker are
        // the owner's only, as the disk cache makes its own directories.
        guard chmod(path, 0o700) == 0 else {
            throw CacheDirectoryError(description: "cannot make \(path) private (chmod 700): \(String(cString: strerror(errno)))")
        }
        let text = "This directory is a disk cache of `lumen thumbnail --cache`: files named by 64 hex characters in it are its entries and may be removed.\n"
        do {
            try Data(text.utf8).write(to: marker, options: .atomic)
        } catch {
            throw CacheDirectoryError(description: "cannot write \(marker.path): \(posixReason(error, path: marker.path, creatingDirectory: false))")
        }
        _ = chmod(marker.path, 0o600)
    }

    /// The kinds of disk-cache failure already reported (see ``configuration(for:)``).
    private static let reportedCacheFailures = Mutex<Set<String>>([])

    static func configuration(for options: Options) -> ImagePipeline.Configuration {
        let loader: any DataLoading
        #if os(Linux)
        // The default loader there (libcurl directly: the URLs are anyone's, and a server can
        // make FoundationNetworking's URLSession trap), with a connection per decode.
        loader = CurlDataLoader(resourceTimeout: options.timeout, maximumConnectionsPerHost: max(6, options.concurrency))
        #else
        let session = DataLoader.defaultConfiguration
        session.httpMaximumConnectionsPerHost = max(6, options.concurrency)
        session.timeoutIntervalForResource = options.timeout
        loader = DataLoader(configuration: session)
        #endif
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decodingQueue = WorkQueue(name: "lumen.decode", maxConcurrentCount: options.concurrency, execution: .threads)
        // --concurrency bounds downloads too: neither the pipeline's network queue nor the
        // loader's per-host connection limit (6 by default) may hold it lower.
        if options.concurrency > 6 {
            configuration.dataLoadingQueue = WorkQueue(name: "lumen.data", maxConcurrentCount: options.concurrency, execution: .tasks)
        }
        if options.usesCache {
            // Downloaded bytes are kept on disk (default `$XDG_CACHE_HOME/lumen/thumbnail`, else
            // `~/.cache/lumen/thumbnail`), so a second run over the same URLs needs no network.
            configuration.dataCache = DataCache(
                name: "thumbnail", directory: options.cacheDirectory.map { URL(fileURLWithPath: $0) },
                onFailure: { failure in
                    // An unusable cache directory fails every write the same way: one line per
                    // kind of failure, not one per input.
                    let first = reportedCacheFailures.withLock { $0.insert("\(failure.kind)").inserted }
                    if first { printError("lumen thumbnail: cache: \(failure) (further failures like it are not shown)") }
                })
        }
        return configuration
    }

    /// Requests answered by a cache layer instead of a download: from memory, from a fresh
    /// disk entry, or from a stale one the server confirmed (`304 Not Modified`). A stale entry
    /// that the server answered with a new body is a download, not a hit.
    static func cacheHits(_ metrics: ImagePipeline.Metrics) -> Int {
        metrics.memoryCache.hits + metrics.diskCacheFreshHits + metrics.notModified
    }

    /// The distinct inputs in input order, each with its output file (see the naming rule
    /// above); an input naming the same URL as an earlier one adds to that one's count.
    static func jobs(for inputs: [String], output: String, format: String) -> [Job] {
        enum Key: Hashable {
            case url(URL)
            case invalid(String)
        }
        var jobs: [Job] = []
        var indices: [Key: Int] = [:]
        var taken = Set<String>()
        // Input files the output directory holds: a thumbnail never replaces one (an input
        // in the output directory with the output format's extension gets the next name).
        // Each by the file it reads and by the name it was given there (a symbolic link
        // given as input is an input file too: a thumbnail written there replaces the link).
        let inputFiles = Set(inputs.flatMap { input -> [String] in
            guard let url = try? url(for: input), url.isFileURL else { return [] }
            let named = url.deletingLastPathComponent().resolvingSymlinksInPath().appendingPathComponent(url.lastPathComponent)
            return [url.resolvingSymlinksInPath().path, named.path]
        })
        let outputDirectory = URL(fileURLWithPath: output).standardizedFileURL.resolvingSymlinksInPath()
        var firstWithBase: [String: Int] = [:]  // an output base name → the first job that has it
        for input in inputs {
            let resolved = Result { () throws(InputError) in try url(for: input) }
            let key: Key = switch resolved {
            case .success(let url): .url(url)
            case .failure: .invalid(input)
            }
            if let index = indices[key] {
                jobs[index].count += 1
                continue
            }
            indices[key] = jobs.count
            let plan = resolved.map { url in
                let base = outputName(for: url)
                var name = base
                var suffix = 1
                while inputFiles.contains(outputDirectory.appendingPathComponent("\(name).\(format)").path)
                        || !taken.insert(name).inserted {
                    suffix += 1
                    name = "\(base)-\(suffix)"
                }
                let destination = (output as NSString).appendingPathComponent("\(name).\(format)")
                // A second input with this base name marks itself and the first one.
                var sharesName = false
                if let first = firstWithBase[base] {
                    sharesName = true
                    if case .success(var firstPlan) = jobs[first].plan {
                        firstPlan.sharesName = true
                        jobs[first].plan = .success(firstPlan)
                    }
                } else {
                    firstWithBase[base] = jobs.count
                }
                return Plan(url: url, destination: destination, sharesName: sharesName)
            }
            jobs.append(Job(input: input, plan: plan))
        }
        return jobs
    }

    /// The URL an input names: `http(s):`, `file:` and `data:` URLs (scheme in any case) with
    /// the scheme and an http(s) host lowercased (both are case-insensitive, so
    /// `HTTP://Example.COM/a.jpg` is `http://example.com/a.jpg`: one download, one cache entry)
    /// and without their fragment; another `scheme://…` is an error;
    /// anything else a file path. File URLs of this machine (no host, or `localhost`) are
    /// standardized, so `a.jpg`, `./a.jpg` and `file:///…/a.jpg` are one input; one naming
    /// another host is kept as it is (standardizing would drop the host, and the loader
    /// refuses it).
    static func url(for input: String) throws(InputError) -> URL {
        guard !input.isEmpty else { throw InputError(description: "an empty input names no file or URL") }
        guard let colon = input.firstIndex(of: ":"), let scheme = scheme(input[..<colon]) else {
            return URL(fileURLWithPath: input).standardizedFileURL
        }
        let rest = input[input.index(after: colon)...]
        guard ["http", "https", "file", "data"].contains(scheme) else {
            guard rest.hasPrefix("//") else { return URL(fileURLWithPath: input).standardizedFileURL }
            throw InputError(description: "unsupported URL scheme '\(scheme)' (http, https, file or data)")
        }
        guard var url = URL(string: scheme + ":" + rest.prefix { $0 != "#" }) else {
            throw InputError(description: "invalid URL")
        }
        // `http:/host/a.jpg`, `http:///host/…`, `http:host/…`: no host as a URL reads them,
        // though libcurl would find one (and credentials) in the path.
        if scheme == "http" || scheme == "https", url.host?.isEmpty ?? true {
            throw InputError(description: "invalid URL: no host (an \(scheme) URL is \(scheme)://host/path)")
        }
        if scheme == "http" || scheme == "https",
           var components = URLComponents(url: url, resolvingAgainstBaseURL: false),
           let host = components.percentEncodedHost, host != host.lowercased() {
            components.percentEncodedHost = host.lowercased()
            url = components.url ?? url
        }
        let isLocal = url.host.map { $0.isEmpty || $0.lowercased() == "localhost" } ?? true
        guard url.isFileURL && isLocal else { return url }
        // `file:img/a.jpg` (relative, not RFC 8089 but read so) is the file `img/a.jpg` names.
        return (url.path.hasPrefix("/") ? url : URL(fileURLWithPath: url.path)).standardizedFileURL
    }

    /// `text` lowercased when it is a URL scheme (a letter, then letters, digits, `+`, `-`, `.`).
    static func scheme(_ text: Substring) -> String? {
        guard let first = text.first, first.isASCII, first.isLetter,
              text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
        else { return nil }
        return text.lowercased()
    }

    /// `photo` for `…/photo.jpg?x=1`, `image` when the URL has no usable name.
    ///
    /// The name is always one file name inside the output directory: a URL's last path
    /// component is percent-decoded, so `..%2F..%2Fx.jpg` would otherwise name `../../x`; each
    /// `/`, control character (NUL, a line feed, an escape: `%0A`, `%1B`…) and format character
    /// (a bidi override, a zero-width space: `%E2%80%AE`, `%E2%80%8B`…; see
    /// ``isControlOrFormat(_:)``) becomes `_`, `.` and `..` become `image`, and a name longer
    /// than 200 bytes is cut to its first 200 (at a character boundary).
    static func outputName(for url: URL) -> String {
        if url.scheme == "data" || url.lastPathComponent == "/" { return "image" }
        var name = String(String.UnicodeScalarView((url.lastPathComponent as NSString).deletingPathExtension.unicodeScalars.map {
            $0 == "/" || isControlOrFormat($0) ? "_" : $0
        }))
        if name.isEmpty || name == "." || name == ".." { return "image" }
        while name.utf8.count > 200 { name.removeLast() }
        return name
    }

    static func thumbnail(_ plan: Plan, pipeline: ImagePipeline, size: DecodeSize, encoding: EncodingFormat) async throws {
        var request = ImageRequest(url: plan.url, thumbnail: size)
        if case .size(let width, let height, .aspectFill) = size {
            // Fill means exactly N×N: an image smaller than that on a side (which the decode
            // never enlarges) is scaled up and cropped by a processor; a no-op otherwise.
            request.processors = [ImageProcessors.Resize(size: (width, height), contentMode: .aspectFill, crop: true, upscale: true)]
        }
        let response = try await pipeline.image(for: request)
        var image = response.image
        // JPEG has no alpha: a transparent area shows white, not the colour its pixels store.
        if case .jpeg = encoding { image = image.flattened(onto: (red: 255, green: 255, blue: 255)) }
        let encoded = try image.encode(as: encoding)
        do {
            try encoded.write(to: URL(fileURLWithPath: plan.destination), options: .atomic)
        } catch {
            throw OutputError(path: plan.destination, reason: posixReason(error, path: plan.destination, creatingDirectory: false))
        }
    }

    /// A thumbnail that was made but could not be written.
    struct OutputError: Error, CustomStringConvertible {
        var path: String
        var reason: String
        var description: String { "writeFailed(\(path): \(reason))" }
    }

    /// The system's reason for a failed write or directory creation at `path`: the POSIX error
    /// under Foundation's, else what the same call made directly reports, else Foundation's text.
    static func posixReason(_ error: any Error, path: String, creatingDirectory: Bool) -> String {
        if let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError,
           underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        if creatingDirectory {
            // A directory cannot be made at or below something that is not one: name the
            // reason (Foundation reports only its own error code then).
            var ancestor = URL(fileURLWithPath: path).standardizedFileURL
            while ancestor.path != "/" {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: ancestor.path, isDirectory: &isDirectory) {
                    if !isDirectory.boolValue { return String(cString: strerror(ENOTDIR)) }
                    break
                }
                ancestor.deleteLastPathComponent()
            }
        }
        // A write fails on a directory in the way (the walk above covered the other case).
        var isDirectory: ObjCBool = false
        if !creatingDirectory, FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            return String(cString: strerror(EISDIR))
        }
        return error.localizedDescription
    }
}
