import Foundation
import Lumen
import LumenTestSupport

/// The loaders the feed is replayed through.
enum FeedVariant: String, CaseIterable, Sendable {
    /// (a) Lumen with its defaults: coalescing, caches, prefetching.
    case lumen
    /// (b) The same with `isTaskCoalescingEnabled = false`.
    case noCoalescing
    /// (c) What `AsyncImage` does: download and full decode per view, nothing shared.
    case naive

    var title: String {
        switch self {
        case .lumen: "lumen"
        case .noCoalescing: "noCoalescing"
        case .naive: "naive"
        }
    }
}

/// One replay's measurements: what the child process counted, plus what the server saw.
struct FeedRunStats: Codable, Sendable {
    // Counted by the child.
    var requests = 0
    var prefetches = 0
    var cancelledRequests = 0
    var failures: [String] = []
    var shownCells = 0
    var decodes = 0
    var decodedPixels = 0
    var memoryHits = 0
    var diskHits = 0
    var joins = 0
    var workCancelled = 0
    var peakRSSBytes = 0
    /// Resident memory when the replay started (the process's baseline: runtime, libraries,
    /// the loader set up).
    var startRSSBytes = 0
    /// From the first step until the last image showed and every load stopped.
    var wallSeconds = 0.0
    /// CPU time (user + system) the replay used, all threads, including the disk-cache writes
    /// still queued when it ended (finished right after).
    var cpuSeconds = 0.0
    // Seen by the server in the parent.
    var networkRequests = 0
    var distinctURLs = 0
    var maxRequestsPerURL = 0
    var bytesDownloaded = 0
    var peakConcurrentRequests = 0
    /// The most downloads in flight at once as the client saw them (request sent, response
    /// not yet complete), counted by the child: Lumen's pipeline metrics, the naive loader's
    /// data tasks.
    var peakClientDownloads = 0
    /// Bytes of decoded images Lumen's memory cache held when the replay ended (thumbnails
    /// and the detail view's full-size photo): the part of its memory growth that is the cache
    /// doing its job. 0 for the naive loader, which keeps nothing.
    var memoryCacheBytes = 0
    /// Bytes of the decoded full-size photo the detail view held: memory any loader must hold
    /// at once on top of what its process started with.
    var detailImageBytes = 0
    /// Network requests per path (not printed: the report compares runs with it).
    var requestsByPath: [String: Int] = [:]

    var decodedMegapixels: Double { Double(decodedPixels) / 1e6 }

    /// The keys `lumen bench feed --json` and `lumen demo --json` print for a variant.
    var json: [String: Any] {
        [
            "requests": requests, "prefetches": prefetches, "networkRequests": networkRequests,
            "distinctURLs": distinctURLs, "maxRequestsPerURL": maxRequestsPerURL,
            "bytesDownloaded": bytesDownloaded, "decodes": decodes,
            "decodedMegapixels": (decodedMegapixels * 1000).rounded() / 1000,
            "memoryHits": memoryHits, "diskHits": diskHits, "joins": joins,
            "cancelledRequests": cancelledRequests, "workCancelled": workCancelled,
            "peakRSSBytes": peakRSSBytes, "startRSSBytes": startRSSBytes,
            "peakRSSGrowthBytes": peakRSSBytes - startRSSBytes, "cpuSeconds": (cpuSeconds * 10000).rounded() / 10000,
            "wallSeconds": (wallSeconds * 10000).rounded() / 10000,
            "peakConcurrentRequests": peakConcurrentRequests, "peakClientDownloads": peakClientDownloads,
            "memoryCacheBytes": memoryCacheBytes, "detailImageBytes": detailImageBytes,
            "failures": failures.count,
        ]
    }
}

/// Runs feed replays, each in a child process of its own (its own peak memory, cold caches),
/// against one loopback server in this process.
struct FeedRunner {
    let quick: Bool
    /// The trace's seed (``FeedTrace/defaultSeed`` unless asked otherwise): which photo each
    /// cell reposts and which avatar it shows.
    let seed: UInt64
    let server: LoopbackServer
    let photos: [FeedAsset]
    let avatars: [FeedAsset]
    let trace: FeedTrace

    /// Generates (or finds) the images, starts the server and serves them.
    init(quick: Bool, seed: UInt64 = FeedTrace.defaultSeed, progress: (String) -> Void) throws {
        self.quick = quick
        self.seed = seed
        let (photos, avatars) = FeedAssets.catalogue(quick: quick)
        self.photos = photos
        self.avatars = avatars
        let totalMP = (photos + avatars).reduce(0) { $0 + $1.megapixels }
        let prepared = try FeedAssets.prepare(photos + avatars) { missing in
            progress("generating \(missing) photo-like images (once per machine; later runs reuse them)…")
        }
        if prepared.generated > 0 {
            progress(String(format: "generated %d of %d images (%.0f MP in all) in %.1f s into %@",
                            prepared.generated, photos.count + avatars.count, totalMP, prepared.seconds, FeedAssets.directory.path))
        } else {
            progress(String(format: "%d images (%.0f MP in all) already generated in %@",
                            photos.count + avatars.count, totalMP, FeedAssets.directory.path))
        }
        server = try LoopbackServer()
        let bytes = try FeedAssets.serve(photos + avatars, on: server)
        trace = Self.trace(quick: quick, seed: seed, photos: photos, avatars: avatars)
        let largeShown = trace.shownCells.filter { photos[trace.cells[$0].photo].megapixels > 10 }.count
        progress(String(format: "serving them at %@ (%.1f MB); trace (seed %llu): %d cells, %d steps, %d shown (%d of them with a 12 MP photo), %d distinct images",
                        server.baseURL.absoluteString, Double(bytes) / 1e6, seed, trace.cells.count, trace.steps.count,
                        trace.shownCells.count, largeShown, trace.distinctImages))
    }

    static func trace(quick: Bool, seed: UInt64, photos: [FeedAsset], avatars: [FeedAsset]) -> FeedTrace {
        // 12 MP photos go to cells; the detail view shows the largest of the others (3 MP; the
        // quick catalogue's 1.9 MP one).
        let large = photos.indices.filter { photos[$0].megapixels > 10 }
        let detail = photos.indices.filter { !large.contains($0) }.max { photos[$0].megapixels < photos[$1].megapixels }!
        return FeedTrace.make(quick: quick, photoCount: photos.count, largePhotos: large, detailPhoto: detail, avatarCount: avatars.count, seed: seed)
    }

    /// Set in a replay child's environment to have it print its progress.
    static let progressVariable = "LUMEN_FEED_PROGRESS"

    /// Set to a command (split at spaces) to run each replay child under it — a profiler.
    static let wrapperVariable = "LUMEN_FEED_CHILD_WRAPPER"

    /// Set to 1 to have each replay child print its resident size as it goes, on stderr.
    static let rssTraceVariable = "LUMEN_FEED_RSS_TRACE"

    /// Set to 1 to have Lumen's replay children print every pipeline event, on stderr.
    static let eventTraceVariable = "LUMEN_FEED_EVENT_TRACE"

    /// How long a replay may take before it is stopped, in seconds.
    static let childTimeLimit = 120.0

    /// Replays the trace through `variant` in a child process; writes the contact sheet of
    /// the shown cells to `sheet` when given. `progress`, when given, is told (steps done,
    /// steps in all) as the replay goes.
    func run(_ variant: FeedVariant, sheet: URL? = nil, progress: ((Int, Int) -> Void)? = nil) throws -> FeedRunStats {
        let cacheDirectory = FileManager.default.temporaryDirectory
            .appendingPathComponent("lumen-feed-cache-\(ProcessInfo.processInfo.processIdentifier)-\(variant.rawValue)-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: cacheDirectory) }
        server.resetStatistics()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe")
        process.arguments = ["bench-child", "feed", variant.rawValue, server.baseURL.absoluteString,
                             quick ? "quick" : "full", String(seed), cacheDirectory.path, sheet?.path ?? "-"]
        // For profiling a replay: `LUMEN_FEED_CHILD_WRAPPER="/usr/bin/perf record -q -o /tmp/x"`
        // runs each child under that command (split at spaces; an absolute path), with this
        // executable's path and the child's arguments appended. The child's stdout must come
        // through unchanged: wrap a tool that prints there (heaptrack) in a script that drops
        // its lines.
        if let wrapper = ProcessInfo.processInfo.environment[Self.wrapperVariable]?.split(separator: " ").map(String.init),
           let tool = wrapper.first {
            let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "/proc/self/exe"
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = wrapper.dropFirst() + [executable] + (process.arguments ?? [])
        }
        if progress != nil {
            process.environment = ProcessInfo.processInfo.environment.merging([Self.progressVariable: "1"]) { $1 }
        }
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        // A replay takes seconds; one that hangs is stopped (and reported) rather than
        // hanging the demo.
        let watchdog = DispatchWorkItem { [process] in if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.childTimeLimit, execute: watchdog)
        // Lines "progress DONE TOTAL" while it runs, then one line of JSON.
        var output = Data(), lastLine = Data()
        while case let chunk = pipe.fileHandleForReading.availableData, !chunk.isEmpty {
            output.append(chunk)
            while let newline = output.firstIndex(of: UInt8(ascii: "\n")) {
                let line = output[output.startIndex..<newline]
                output.removeSubrange(output.startIndex...newline)
                let fields = String(decoding: line, as: UTF8.self).split(separator: " ")
                if fields.count == 3, fields[0] == "progress", let done = Int(fields[1]), let total = Int(fields[2]) {
                    progress?(done, total)
                } else {
                    lastLine = Data(line)
                }
            }
        }
        if !output.isEmpty { lastLine = output }
        process.waitUntilExit()
        watchdog.cancel()
        if process.terminationReason == .uncaughtSignal {
            throw BenchError("the \(variant.title) replay was stopped (signal \(process.terminationStatus)) after at most \(Int(Self.childTimeLimit)) s")
        }
        guard process.terminationStatus == 0,
              var stats = try? JSONDecoder().decode(FeedRunStats.self, from: lastLine) else {
            throw BenchError("the \(variant.title) replay failed (child exit status \(process.terminationStatus))")
        }
        let seen = server.statistics
        stats.networkRequests = seen.totalRequests
        stats.distinctURLs = seen.requestsByPath.count
        stats.maxRequestsPerURL = seen.requestsByPath.values.max() ?? 0
        stats.bytesDownloaded = seen.bodyBytesSent
        stats.peakConcurrentRequests = seen.peakInFlightRequests
        stats.requestsByPath = seen.requestsByPath
        return stats
    }

    /// The replay itself, in the child process (`lumen bench-child feed …`): prints one line
    /// of JSON (``FeedRunStats``).
    static func child(variant: FeedVariant, baseURL: URL, quick: Bool, seed: UInt64, cacheDirectory: URL, sheet: URL?) throws {
        let (photos, avatars) = FeedAssets.catalogue(quick: quick)
        let trace = trace(quick: quick, seed: seed, photos: photos, avatars: avatars)
        let photoURLs = photos.map { URL(string: baseURL.absoluteString + $0.path)! }
        let avatarURLs = avatars.map { URL(string: baseURL.absoluteString + $0.path)! }
        let loader: any FeedLoading = switch variant {
        case .lumen: LumenFeedLoader(coalescing: true, cacheDirectory: cacheDirectory)
        case .noCoalescing: LumenFeedLoader(coalescing: false, cacheDirectory: cacheDirectory)
        case .naive: NaiveFeedLoader()
        }
        // The contact sheet shows every shown cell (56 in the full trace: 8 × 7 cells of 256 px).
        var replayer = FeedReplayer(trace: trace, photos: photoURLs, avatars: avatarURLs, loader: loader,
                                    sheetLimit: sheet == nil ? 0 : trace.shownCells.count)
        if ProcessInfo.processInfo.environment[progressVariable] == "1" {
            replayer.onStep = { done, total in
                // Every few steps: enough for a bar, too few writes to matter to the timing.
                if done % 4 == 0 || done == total { print("progress \(done) \(total)") }
            }
        }
        if ProcessInfo.processInfo.environment[rssTraceVariable] == "1" {
            if let smaps = FileHandle(forReadingAtPath: "/proc/self/smaps").map({ String(decoding: $0.readDataToEndOfFile(), as: UTF8.self) }) {
                printError("smaps at the start:\n" + smaps)
            }
            // Diagnostics on stderr: the resident size after each step, and a 2 ms sampler.
            let start = monotonicSeconds()
            let previous = replayer.onStep
            replayer.onStep = { done, total in
                previous?(done, total)
                printError(String(format: "step %d t %.3f rss %.1f MB", done, monotonicSeconds() - start, Double(currentResidentBytes()) / 1_048_576))
            }
            Thread.detachNewThread {
                var last = 0
                while true {
                    let rss = currentResidentBytes()
                    if abs(rss - last) > 1 << 20 {
                        printError(String(format: "t %.3f rss %.1f MB", monotonicSeconds() - start, Double(rss) / 1_048_576))
                        last = rss
                    }
                    usleep(2000)
                }
            }
        }
        var stats = FeedRunStats()
        stats.startRSSBytes = currentResidentBytes()
        let cpuStart = cpuSeconds()
        let start = monotonicSeconds()
        let outcome = runBlocking { [replayer] in await replayer.run() }
        stats.wallSeconds = monotonicSeconds() - start
        // Disk-cache writes still queued at the lowest CPU priority are finished now: after the
        // last image showed (no view waits for them), but within the CPU time.
        ((loader as? LumenFeedLoader)?.pipeline.configuration.dataCache as? DataCache)?.flushSynchronously()
        stats.cpuSeconds = cpuSeconds() - cpuStart
        stats.peakRSSBytes = ownPeakResidentBytes() ?? peakResidentBytes()
        if ProcessInfo.processInfo.environment[rssTraceVariable] == "1",
           let smaps = FileHandle(forReadingAtPath: "/proc/self/smaps").map({ String(decoding: $0.readDataToEndOfFile(), as: UTF8.self) }) {
            printError("peak RSS: VmHWM \(ownPeakResidentBytes() ?? -1) bytes, ru_maxrss \(peakResidentBytes()) bytes")
            printError("smaps at the end:\n" + smaps)
            // glibc's per-arena totals (malloc.h is not in the Glibc module).
            if let symbol = dlsym(nil, "malloc_stats") {
                unsafeBitCast(symbol, to: (@convention(c) () -> Void).self)()
            }
        }
        stats.requests = outcome.requests
        stats.prefetches = outcome.prefetches
        stats.cancelledRequests = outcome.cancelledRequests
        stats.failures = outcome.failures
        stats.shownCells = outcome.shownCells
        stats.detailImageBytes = outcome.detailImageBytes
        if let lumen = loader as? LumenFeedLoader {
            (stats.decodes, stats.decodedPixels) = lumen.counter.snapshot
            let m = lumen.pipeline.metrics
            stats.joins = m.fetch.joined + m.decode.joined + m.process.joined
            stats.workCancelled = m.fetch.cancelled + m.decode.cancelled + m.process.cancelled
            stats.memoryHits = m.memoryCache.hits
            stats.diskHits = m.diskCache.hits
            stats.peakClientDownloads = m.peakNetworkRequestsInFlight
            stats.memoryCacheBytes = (lumen.pipeline.configuration.imageCache as? ImageCache)?.totalCost ?? 0
        } else if let naive = loader as? NaiveFeedLoader {
            (stats.decodes, stats.decodedPixels) = naive.counter.snapshot
            stats.peakClientDownloads = naive.downloads.peak
        }
        if let sheet, !outcome.sheet.isEmpty {
            let cells = outcome.sheet.map { FeedSheet.cell(photo: $0.photo, avatar: $0.avatar, size: trace.thumbnailPixels) }
            try FileManager.default.createDirectory(at: sheet.deletingLastPathComponent(), withIntermediateDirectories: true)
            try ContactSheet.make(cells, cell: trace.thumbnailPixels, columns: 8).encode(as: .png).write(to: sheet, options: .atomic)
        }
        let data = try JSONEncoder().encode(stats)
        print(String(decoding: data, as: UTF8.self))
    }
}

/// This process's resident set size now, in bytes (`VmRSS`; 0 where it is not available).
func currentResidentBytes() -> Int {
    processStatusBytes("VmRSS") ?? 0
}

/// This process's own peak resident set size in bytes: `VmHWM` in `/proc/self/status`, the
/// high-water mark of the memory map the process runs in now.
///
/// Not `getrusage`'s `ru_maxrss`: on Linux that survives `execve` and starts from the
/// high-water mark of the memory map the process had before — for a child started with
/// `posix_spawn` (which `Process` uses, sharing the parent's memory until the exec), the
/// parent's. The feed's parent holds the loopback server's images (17–36 MB) and, on a first
/// run, has just generated them, so `ru_maxrss` reported the parent's peak for any child
/// that stayed below it.
func ownPeakResidentBytes() -> Int? { processStatusBytes("VmHWM") }

/// Runs `body` on the cooperative pool and blocks this (non-pool) thread until it returns.
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        box.value = await body()
        done.signal()
    }
    done.wait()
    return box.value!
}

/// Carries a result from a task to the thread waiting for it.
final class ResultBox<T: Sendable>: @unchecked Sendable { // written once before the semaphore is signalled, read after
    var value: T?
}

/// Draws a feed cell for the contact sheet: the photo thumbnail with its avatar in the corner.
enum FeedSheet {
    static func cell(photo: Bitmap, avatar: Bitmap, size: Int) -> Bitmap {
        let w = min(size, photo.width), h = min(size, photo.height)
        var pixels = [UInt8](repeating: 0x2A, count: w * h * 3)
        let pc = photo.format.channels
        for y in 0..<h {
            for x in 0..<w {
                let s = (y * photo.width + x) * pc, d = (y * w + x) * 3
                pixels[d] = photo.pixels[s]; pixels[d + 1] = photo.pixels[s + 1]; pixels[d + 2] = photo.pixels[s + 2]
            }
        }
        // The avatar, inset 6 px from the bottom-left corner, blended over the photo.
        let ac = avatar.format.channels
        let ox = 6, oy = max(0, h - avatar.height - 6)
        for y in 0..<min(avatar.height, h - oy) {
            for x in 0..<min(avatar.width, w - ox) {
                let s = (y * avatar.width + x) * ac, d = ((oy + y) * w + ox + x) * 3
                let a = ac == 4 ? Int(avatar.pixels[s + 3]) : 255
                for k in 0..<3 {
                    pixels[d + k] = UInt8((Int(avatar.pixels[s + k]) * a + Int(pixels[d + k]) * (255 - a) + 127) / 255)
                }
            }
        }
        return Bitmap(width: w, height: h, format: .rgb8, pixels: pixels)
    }
}
