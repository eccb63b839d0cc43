// A second process for the disk cache's cross-process tests.
//
//   lumen-cache-probe write DIR PREFIX N SIZE [ROUNDS] [SEED]
//       stores keys PREFIX-0 … PREFIX-(N-1), ROUNDS times over (seeds SEED, SEED+1, …),
//       then flushes. Each payload is derivable from its key and seed (see `payload`).
//   lumen-cache-probe write-and-exit DIR PREFIX N SIZE
//       stores keys PREFIX-0 … PREFIX-(N-1) (seed 1) and exits at once, without flushing,
//       while writes are still queued or running: the exit must be clean.
//   lumen-cache-probe read DIR PREFIX N [PASSES] [--require-all]
//       reads every key PASSES times and verifies every byte of every hit; with
//       --require-all any miss is a failure too (for pre-populated keys: an atomic
//       replacement never makes an entry disappear).
//
//   lumen-cache-probe full-disk DIR
//       simulates a full disk (RLIMIT_FSIZE of 64 KiB, so a larger write fails with EFBIG):
//       stores a small entry and a large one, and checks that the large write was dropped and
//       reported, nothing partial is left, and the small entry still reads back.
//   lumen-cache-probe exit-during-first-job FILE
//       FILE: a regular file, so that the cache's first job (creating its directory) fails
//       and reports it; the report holds that job until the process has begun to exit.
//       One write is queued behind it. The exit must wait for the first job and start no
//       other: a write that starts later (it hashes its key with OpenSSL, which cleans up
//       at exit) fails the probe, by its report or by a crash.
//   lumen-cache-probe pipeline-read-only DIR
//       DIR: an empty directory the caller made read-only (chmod 0555). As root, where
//       permissions do not bind, the probe first drops to uid and gid 65534 for real (exit 3
//       if it cannot). Then an `ImagePipeline` with a disk cache in DIR, a `MockDataLoader`
//       serving a small PNG, an event handler and a logger loads the image twice (memory
//       emptied in between) and checks: both loads come from the network, each dropped write
//       (EACCES) reached the event hook as `.cacheFailure(.writeFailed)` and the logger, and
//       DIR is still empty.
//   lumen-cache-probe pipeline-full-disk DIR
//       the same with a full disk (RLIMIT_FSIZE of 64 KiB, as `full-disk`) and a PNG larger
//       than that (EFBIG): DIR, empty at the start, holds nothing afterwards — no partial file.
//
// Exits 0 when every read was a miss or exactly right (the pipeline modes: every check
// passed), 1 on a wrong read (torn, mixed, mismatched metadata) or a failed check, 2 on bad
// usage, 3 when the pipeline-read-only mode cannot drop root's privileges. Prints one summary
// line.
import Foundation
import Lumen
import LumenTestSupport
import Synchronization

/// The payload stored under `key` by writer `seed`: 16 bytes of header (seed, length,
/// little-endian) then `size` pseudo-random bytes from (key, seed). A reader recomputes it
/// from the key and the seed it finds, so a torn or mixed file cannot pass.
func payload(key: String, seed: UInt64, size: Int) -> Data {
    var bytes = [UInt8]()
    bytes.reserveCapacity(16 + size)
    for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: seed >> (8 * UInt64(i)))) }
    for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: UInt64(size) >> (8 * UInt64(i)))) }
    var state: UInt64 = 0xcbf2_9ce4_8422_2325 ^ seed
    for b in key.utf8 { state = (state ^ UInt64(b)) &* 0x100_0000_01b3 }
    for _ in 0..<size {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        bytes.append(UInt8(truncatingIfNeeded: z ^ (z >> 31)))
    }
    return Data(bytes)
}

/// `nil` when `data` is exactly what some writer stored for `key` with metadata `etag`.
func verify(key: String, data: Data, etag: String?) -> String? {
    guard data.count >= 16 else { return "\(key): \(data.count) bytes, shorter than the header" }
    var seed: UInt64 = 0
    var size: UInt64 = 0
    for i in 0..<8 {
        seed |= UInt64(data[data.startIndex + i]) << (8 * UInt64(i))
        size |= UInt64(data[data.startIndex + 8 + i]) << (8 * UInt64(i))
    }
    guard size == UInt64(data.count - 16) else { return "\(key): length \(data.count - 16), header says \(size)" }
    guard etag == "\"\(seed)\"" else { return "\(key): ETag \(etag ?? "nil") does not match seed \(seed)" }
    guard payload(key: key, seed: seed, size: Int(size)) == data else { return "\(key): bytes differ from seed \(seed)" }
    return nil
}

/// The failures a cache reported, from any thread.
final class FailureLog: Sendable {
    private let failures = Mutex<[DataCache.Failure]>([])
    func add(_ failure: DataCache.Failure) { failures.withLock { $0.append(failure) } }
    var all: [DataCache.Failure] { failures.withLock { $0 } }
}

/// The lines a logger received, from any thread.
final class LineLog: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// Makes the file-size limit of this process `bytes` (writes past it fail with EFBIG).
func limitFileSize(to bytes: Int) {
    // A file-size limit is per process: here it cannot disturb the test runner.
    signal(SIGXFSZ, SIG_IGN)
    var limit = rlimit(rlim_cur: rlim_t(bytes), rlim_max: rlim_t(bytes))
    guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0 else {
        print("FAIL setrlimit: errno \(errno)")
        exit(1)
    }
}

/// As root, becomes uid and gid 65534 (no supplementary groups) for good, so that file
/// permissions bind; exits 3 if that is not possible. Does nothing for other users.
func dropRootPrivileges() {
    guard geteuid() == 0 else { return }
    func fail(_ call: String) -> Never {
        print("FAIL cannot drop privileges: \(call): errno \(errno) (\(String(cString: strerror(errno))))")
        exit(3)
    }
    guard setgroups(0, nil) == 0 else { fail("setgroups") }
    guard setgid(65534) == 0 else { fail("setgid(65534)") }
    guard setuid(65534) == 0 else { fail("setuid(65534)") }
    guard getuid() == 65534, geteuid() == 65534, getgid() == 65534, getegid() == 65534 else { fail("ids after setuid") }
    guard setuid(0) != 0 else { fail("root regained after setuid(65534)") }
}

/// A PNG of `side`×`side` pseudo-random RGB pixels (incompressible, so its size is about
/// 3 × side² bytes).
func noisePNG(side: Int) -> Data {
    let bytes = payload(key: "png", seed: UInt64(side), size: side * side * 3)
    let bitmap = Bitmap(width: side, height: side, format: .rgb8) { buffer in
        for i in 0..<(side * side * 3) { buffer[i] = bytes[bytes.startIndex + 16 + i] }
    }
    do {
        return try bitmap.encode(as: .png)
    } catch {
        print("FAIL cannot encode the test image: \(error)")
        exit(1)
    }
}

/// Loads one image twice (memory emptied in between) through a pipeline whose disk cache, in
/// `directory`, drops every write with `errorCode`; returns the problems found (empty: all
/// checks passed) and a description of what happened.
func checkPipeline(directory: URL, image: Data, errorCode: Int32) async -> (problems: [String], summary: String) {
    // A load that never ends kills the probe with SIGALRM instead of leaving it behind the
    // test that launched it.
    alarm(30)
    let names = { () -> [String] in
        do { return try FileManager.default.contentsOfDirectory(atPath: directory.path) } catch { return ["(unreadable: \(error))"] }
    }
    if !names().isEmpty { return (["directory as uid \(geteuid()) at the start: \(names())"], "") }
    let loader = MockDataLoader(defaultData: image)
    let dataCache = DataCache(name: "probe", directory: directory)
    let recorder = PipelineEventRecorder()
    let logged = LineLog()
    var configuration = ImagePipeline.Configuration(dataLoader: loader)
    configuration.dataCache = dataCache
    configuration.eventHandler = recorder.handler
    configuration.logger = { logged.add($0) }
    let pipeline = ImagePipeline(configuration: configuration)
    let url = URL(string: "https://probe.example/image.png")!

    var images: [ImageResponse] = []
    for attempt in 1...2 {
        pipeline.cache.removeAllFromMemory()
        do {
            images.append(try await pipeline.image(for: url))
        } catch {
            return (["load \(attempt) failed: \(error)"], "")
        }
        // The fetch queues its disk write before the bytes go on to be decoded, and the cache
        // reports a dropped write from its queue (event hook, then logger): once the image is
        // here, a flush waits for the write and its report.
        await dataCache.flush()
    }
    var problems: [String] = []
    for (i, response) in images.enumerated() where response.cacheType != nil {
        problems.append("load \(i + 1) came from \(String(describing: response.cacheType))")
    }
    if images[0].image != images[1].image { problems.append("the two loads differ") }
    if loader.loadCount != 2 { problems.append("loader loads \(loader.loadCount)") }
    let failures = recorder.events.compactMap { event -> DataCache.Failure? in
        if case .cacheFailure(let failure) = event { return failure }
        return nil
    }
    let key = DataCache.key(imageID: url.absoluteString)
    if failures.count != 2 || !failures.allSatisfy({ $0.kind == .writeFailed && $0.key == key && $0.errorCode == errorCode }) {
        problems.append("cache failure events \(failures)")
    }
    if pipeline.metrics.diskCache.writes != 2 { problems.append("disk writes queued \(pipeline.metrics.diskCache.writes)") }
    if pipeline.metrics.cacheFailures != 2 { problems.append("pipeline cacheFailures \(pipeline.metrics.cacheFailures)") }
    if dataCache.metrics.writeFailures != 2 { problems.append("writeFailures \(dataCache.metrics.writeFailures)") }
    let reports = logged.all.filter { $0.contains("cache failure") && $0.contains("writeFailed") }
    if reports.count != 2 { problems.append("logger lines \(logged.all)") }
    if !names().isEmpty { problems.append("files left \(names())") }
    let summary = "2 loads from the network, 2 dropped writes reported (errno \(errorCode)) to the event hook and logger, directory empty"
    return (problems, summary)
}

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: lumen-cache-probe write DIR PREFIX N SIZE [ROUNDS] [SEED] | write-and-exit DIR PREFIX N SIZE | exit-during-first-job FILE | read DIR PREFIX N [PASSES] [--require-all] | full-disk DIR | pipeline-read-only DIR | pipeline-full-disk DIR\n".utf8))
    exit(2)
}

let arguments = Array(CommandLine.arguments.dropFirst())

if arguments.first == "full-disk", arguments.count >= 2 {
    limitFileSize(to: 64 * 1024)
    let failures = FailureLog()
    let cache = DataCache(name: "full", directory: URL(fileURLWithPath: arguments[1], isDirectory: true)) { failures.add($0) }
    let small = payload(key: "small", seed: 1, size: 16 * 1024)
    cache.storeData(small, metadata: CacheMetadata(etag: "\"1\"", storedAt: Date()), for: "small")
    cache.storeData(payload(key: "large", seed: 1, size: 200 * 1024), metadata: CacheMetadata(etag: "\"1\"", storedAt: Date()), for: "large")
    cache.flushSynchronously()
    var problems: [String] = []
    let reported = failures.all
    if cache.metrics.writeFailures != 1 { problems.append("writeFailures \(cache.metrics.writeFailures)") }
    if reported.map(\.kind) != [.writeFailed] || reported.first?.key != "large" { problems.append("reported \(reported)") }
    if reported.first?.errorCode != EFBIG { problems.append("errno \(String(describing: reported.first?.errorCode))") }
    if cache.cachedData(for: "large") != nil { problems.append("large entry readable") }
    if cache.cachedData(for: "small")?.data != small { problems.append("small entry lost") }
    let names = (try? FileManager.default.contentsOfDirectory(atPath: arguments[1])) ?? []
    if names != [DataCache.filename(for: "small")] { problems.append("files \(names)") }
    print(problems.isEmpty ? "ok" : "FAIL \(problems.joined(separator: "; "))")
    exit(problems.isEmpty ? 0 : 1)
}

/// What `exit-during-first-job` watches, shared with its exit handlers (C function pointers,
/// which capture nothing).
final class ExitWatch: Sendable {
    static let shared = ExitWatch()
    /// The process has begun to exit (set by the exit handler that runs first).
    let isExiting = Atomic<Bool>(false)
    /// A write reported a failure after the exit began: it started too late.
    let wroteLate = Atomic<Bool>(false)
}

if arguments.first == "exit-during-first-job", arguments.count == 2 {
    // Registered first, so it runs last at exit, after OpenSSL's clean-up: gives a write that
    // started after the exit began half a second to show itself, then judges.
    atexit {
        let watch = ExitWatch.shared
        for _ in 0..<500 where !watch.wroteLate.load(ordering: .acquiring) { usleep(1000) }
        if watch.wroteLate.load(ordering: .acquiring) {
            print("FAIL a write started after the exit began")
            fflush(nil)
            _exit(1)
        }
    }
    let cache = DataCache(name: "probe", directory: URL(fileURLWithPath: arguments[1], isDirectory: true)) { failure in
        let watch = ExitWatch.shared
        if failure.key == nil {
            // The first job (the directory cannot be made): held until the exit began, 10 s at most.
            for _ in 0..<10_000 where !watch.isExiting.load(ordering: .acquiring) { usleep(1000) }
        } else if watch.isExiting.load(ordering: .acquiring) {
            watch.wroteLate.store(true, ordering: .releasing)
        }
    }
    cache.storeData(payload(key: "k", seed: 1, size: 1024), metadata: CacheMetadata(etag: "\"1\"", storedAt: Date()), for: "k")
    // Registered last, so it runs first at exit: lets the first job go on.
    atexit { ExitWatch.shared.isExiting.store(true, ordering: .releasing) }
    print("queued")
    exit(0)
}

if arguments.first == "pipeline-read-only", arguments.count == 2 {
    dropRootPrivileges()
    let (problems, summary) = await checkPipeline(
        directory: URL(fileURLWithPath: arguments[1], isDirectory: true), image: noisePNG(side: 8), errorCode: EACCES)
    print(problems.isEmpty ? "ok read-only as uid \(geteuid()): \(summary)" : "FAIL \(problems.joined(separator: "; "))")
    exit(problems.isEmpty ? 0 : 1)
}

if arguments.first == "pipeline-full-disk", arguments.count == 2 {
    let limit = 64 * 1024
    let image = noisePNG(side: 256)
    guard image.count > limit else {
        print("FAIL the test image (\(image.count) bytes) fits under the limit")
        exit(1)
    }
    limitFileSize(to: limit)
    let (problems, summary) = await checkPipeline(
        directory: URL(fileURLWithPath: arguments[1], isDirectory: true), image: image, errorCode: EFBIG)
    print(problems.isEmpty ? "ok full disk, \(image.count)-byte image: \(summary)" : "FAIL \(problems.joined(separator: "; "))")
    exit(problems.isEmpty ? 0 : 1)
}

guard arguments.count >= 4, let count = Int(arguments[3]) else { usage() }
let directory = URL(fileURLWithPath: arguments[1], isDirectory: true)
let prefix = arguments[2]
let cache = DataCache(name: "probe", directory: directory, sizeLimit: Int.max / 4, ttl: 365 * 24 * 3600) { failure in
    FileHandle.standardError.write(Data("probe: \(failure)\n".utf8))
}

switch arguments[0] {
case "write":
    guard arguments.count >= 5, let size = Int(arguments[4]) else { usage() }
    let rounds = arguments.count > 5 ? Int(arguments[5]) ?? 1 : 1
    let seed = arguments.count > 6 ? UInt64(arguments[6]) ?? 1 : 1
    for round in 0..<rounds {
        let s = seed + UInt64(round)
        for i in 0..<count {
            let key = "\(prefix)-\(i)"
            let metadata = CacheMetadata(etag: "\"\(s)\"", contentType: "application/octet-stream", storedAt: Date())
            cache.storeData(payload(key: key, seed: s, size: size), metadata: metadata, for: key)
        }
        // Keep the queue (and so the memory held by pending writes) short.
        cache.flushSynchronously()
    }
    let failures = cache.metrics.writeFailures
    print("wrote \(cache.metrics.writes) failures \(failures)")
    exit(failures == 0 ? 0 : 1)
case "write-and-exit":
    guard arguments.count >= 5, let size = Int(arguments[4]) else { usage() }
    for i in 0..<count {
        let key = "\(prefix)-\(i)"
        let metadata = CacheMetadata(etag: "\"1\"", contentType: "application/octet-stream", storedAt: Date())
        cache.storeData(payload(key: key, seed: 1, size: size), metadata: metadata, for: key)
    }
    print("queued \(count)")
    exit(0)
case "read":
    let passes = arguments.count > 4 ? Int(arguments[4]) ?? 1 : 1
    let requireAll = arguments.contains("--require-all")
    var hits = 0
    var misses = 0
    for _ in 0..<passes {
        for i in 0..<count {
            let key = "\(prefix)-\(i)"
            guard let (data, metadata) = cache.cachedData(for: key) else {
                misses += 1
                if requireAll {
                    print("FAIL \(key): missing")
                    exit(1)
                }
                continue
            }
            if let problem = verify(key: key, data: data, etag: metadata.etag) {
                print("FAIL \(problem)")
                exit(1)
            }
            hits += 1
        }
    }
    let corrupt = cache.metrics.corruptEntriesRemoved
    print("hits \(hits) misses \(misses) corrupt \(corrupt)")
    exit(corrupt == 0 ? 0 : 1)
default:
    usage()
}
