import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Synchronization

/// `lumen bench soak --minutes N`: `lumen serve` as a child process (so its resident memory
/// and descriptors are its own) with a disk cache, a loopback origin that injects faults
/// chosen from the seed, a disk cache deleted and then made unwritable mid-run, and a mix of
/// clients. Every 200 is compared with a reference made from the pristine source; every other
/// status must be one the contract gives that request. Fails on a wrong image, an unexpected
/// status, a server that dies or does not drain, or growth of memory or descriptors.
enum BenchSoak {
    static let usage = """
        usage: lumen bench soak --minutes N [--json] [--seed N] [--clients N] [--source-timeout SECONDS]
                                [--sample-every SECONDS] [--corpus DIR] [--keep]
          Runs `lumen serve` (this binary, a child process on 127.0.0.1, --cache in a temporary directory) against
          a loopback origin that injects faults, for N minutes (fractional: 0.2 is 12 s), and checks every answer.
            origin faults (per request, chosen from --seed; the URL names the fault, so the status owed is known):
              good, trickle (10 pieces, 20 ms apart) → 200;  lie-short (700 bytes past Content-Length 20 ms later, kept open) → 200;
              reset (RST mid-body), 5xx, truncated (close mid-body), lie-long (Content-Length 1000 over the body),
              garbage-head → 502;  stall (a quarter of the body, then silence past the source timeout) → 504
            clients on keep-alive connections: distinct sizes, fits and formats of the sources; faulty sources; hot
              URLs; bursts (12 connections at once for a new source at 3 sizes, every 3 s); bad signatures → 403;
              signed bad options → 400; and, on new connections, malformed raw requests (bare LF, a 100 KB header,
              a 9 KB path, unknown method, POST with a body, Transfer-Encoding on GET, duplicate Content-Length,
              HTTP/9.9, binary garbage, no path) → 4xx (501/505 allowed); binary garbage may also be closed without
              a response (libmicrohttpd does so for a request line it cannot parse); a reset or silence is unexpected
            disk cache: at 30% of the run the cache directory is deleted (rm -r); at 50% it is replaced by a regular
              file of the same name, so every write under it fails with ENOTDIR even for root (chmod would not stop
              root); at 70% the file is removed and the directory made again, empty
            every 200 is decoded and compared with Lumen's own decode and resize of the pristine source bytes with
              the same options, encoded the same way: a wrong image is another size or a mean difference ≥ \(tolerance)
            the server's VmRSS and open descriptors (/proc/PID/status, /proc/PID/fd) are sampled every
              --sample-every seconds (default: 5, or a twelfth of a short run); after a warm-up third, growth is
              the last third's mean over the middle third's by more than 10% and 8 MB (RSS) or 20% and 8 (fds);
              runs under 2 minutes get the samples but no verdict (all warm-up)
          --minutes N              how long the clients run (required; 0.05 ... 1440)
          --seed N                 the faults' and clients' choices (default 1)
          --clients N              keep-alive clients of the main mix (default 4)
          --source-timeout S       the server's --source-timeout (default 1); stalls last S + 2 seconds
          --corpus DIR             real images to serve (default ../shared/corpus/real-world when present);
                                   two generated photo-like JPEGs are always served too
          --keep                   keep the temporary directory (cache and the server's access log)
          --json                   one JSON object: seed, minutes, seconds, sources, requests, responsesByStatus,
                                   byKind (kind → status → count; kinds: distinct, hot, burst, fault:NAME,
                                   bad-signature, bad-options, malformed:NAME; statuses "none": no response or a
                                   reset, "closed": closed without a response), byPhase (cache phase → status → count),
                                   faultsInjected (fault → responses the origin gave), originRequests, checkedImages,
                                   wrongImages, maximumMeanDifference, unexpected, unexpectedSamples, clientRetries
                                   (requests sent again on a new connection after a failed exchange), cachePhases
                                   ([{name, atSeconds, action, writeError}]), cacheFilesAtEnd, samples ([{seconds,
                                   rssBytes, openFDs}]), idleAfterClients (a sample once the clients
                                   have closed, not in the trend), trend ({verdict, rule, samplesUsed, middleMeanRSSBytes,
                                   lastMeanRSSBytes, rssSlopeBytesPerMinute, middleMeanFDs, lastMeanFDs,
                                   fdSlopePerMinute, isRSSGrowing, isFDGrowing}), server ({pid, exitStatus,
                                   crashed, log}), passed
          Exits 1 when wrong images > 0, unexpected > 0, a growth trend is found, or the server crashed or did not exit 0.
        """

    /// Largest mean difference per channel byte between a 200's image and its reference (the
    /// tests' tolerance for one decode path against another).
    static let tolerance = 1.5

    struct Options {
        var minutes = 0.0
        var json = false
        var seed: UInt64 = 1
        var clients = 4
        var sourceTimeout = 1.0
        var sampleEvery: Double?
        var corpus: String?
        var keep = false
    }

    static func parse(_ arguments: [String]) throws -> Options {
        let args = try Arguments(arguments, valueOptions: ["minutes", "seed", "clients", "source-timeout", "sample-every", "corpus"],
                                 flagOptions: ["json", "keep"])
        if let extra = args.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
        func seconds(_ name: String, _ range: ClosedRange<Double>) throws -> Double? {
            guard let text = args.string(name) else { return nil }
            guard let value = Double(text), range.contains(value) else {
                throw UsageError("--\(name) must be a number in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
            }
            return value
        }
        var options = Options(json: args.flag("json"), keep: args.flag("keep"))
        guard let minutes = try seconds("minutes", 0.05...1440) else { throw UsageError("--minutes N is required") }
        options.minutes = minutes
        if let text = args.string("seed") {
            guard let seed = UInt64(text) else { throw UsageError("--seed must be a whole number, got '\(text)'") }
            options.seed = seed
        }
        options.clients = try args.int("clients", range: 1...64) ?? 4
        options.sourceTimeout = try seconds("source-timeout", 0.2...30) ?? 1
        options.sampleEvery = try seconds("sample-every", 0.2...600)
        options.corpus = args.string("corpus")
        return options
    }

    static func run(_ arguments: [String]) async -> Int32 {
        if arguments.contains("--help") || arguments.contains("-h") {
            writeOut(usage + "\n")
            return 0
        }
        let options: Options
        do { options = try parse(arguments) } catch {
            printError("lumen bench soak: \(error)\n\(usage)")
            return 2
        }
        do {
            let report = try await Thread.detached { try soak(options) }
            if options.json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                writeOut(String(decoding: try encoder.encode(report), as: UTF8.self) + "\n")
            } else {
                writeOut(text(report))
            }
            return report.passed ? 0 : 1
        } catch {
            printError("lumen bench soak: \(error)")
            return 1
        }
    }

    /// The sources: real files from the corpus (those Lumen decodes) and two generated photos.
    static func sources(_ options: Options) throws -> [(name: String, data: Data)] {
        var sources: [(String, Data)] = []
        let directory = options.corpus ?? "../shared/corpus/real-world"
        let names = ["flower.jpg", "hopper.jpg", "pil_sample_rgb.jpg", "hopper_gray.jpg", "hopper_orientation_6.jpg",
                     "hopper.png", "transparent.png", "flower.webp", "transparent.webp"]
        for name in names {
            let path = directory + "/" + name
            guard let data = FileManager.default.contents(atPath: path), (try? ImageDecoder.decode(data)) != nil else {
                if options.corpus != nil { throw UsageError("--corpus: \(path) is missing or not decodable") }
                continue
            }
            sources.append((name, data))
        }
        for seed in 1...2 {
            sources.append(("generated-\(seed).jpg", try SyntheticPhotos.photo(width: 1200, height: 800, seed: UInt64(seed)).encode(as: .jpeg(quality: 85))))
        }
        return sources
    }
}

extension Thread {
    /// Runs `body` on a thread of its own (the soak blocks on sockets) and returns its result.
    static func detached<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
            }
        }
    }
}
