// A second process for the disk cache's cross-process tests.
//
//   lumen-cache-probe write DIR PREFIX N SIZE [ROUNDS] [SEED]
//       stores keys PREFIX-0 … PREFIX-(N-1), ROUNDS times over (seeds SEED, SEED+1, …),
//       then flushes. Each payload is derivable from its key and seed (see `payload`).
//   lumen-cache-probe read DIR PREFIX N [PASSES] [--require-all]
//       reads every key PASSES times and verifies every byte of every hit; with
//       --require-all any miss is a failure too (for pre-populated keys: an atomic
//       replacement never makes an entry disappear).
//
//   lumen-cache-probe full-disk DIR
//       simulates a full disk (RLIMIT_FSIZE of 64 KiB, so a larger write fails with EFBIG):
//       stores a small entry and a large one, and checks that the large write was dropped and
//       reported, nothing partial is left, and the small entry still reads back.
//   lumen-cache-probe bench-memory            ns per synchronous memory-cache hit
//   lumen-cache-probe bench-sweep DIR N       ms for a sweep over N entries (N small entries written first)
//
// Exits 0 when every read was a miss or exactly right, 1 on a wrong read (torn, mixed,
// mismatched metadata), 2 on bad usage. Prints one summary line.
import Foundation
import Lumen
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

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: lumen-cache-probe write DIR PREFIX N SIZE [ROUNDS] [SEED] | read DIR PREFIX N [PASSES] [--require-all]\n".utf8))
    exit(2)
}

let arguments = Array(CommandLine.arguments.dropFirst())

if arguments.first == "bench-memory" {
    let cache = ImageCache(costLimit: 1 << 30)
    let keys = (0..<1000).map { ImageCacheKey(imageID: "https://example.com/\($0).jpg", decodeSize: .maxPixelSize(256)) }
    let image = ImageContainer(image: Bitmap(width: 16, height: 16, format: .rgba8, pixels: [UInt8](repeating: 0, count: 1024)))
    for key in keys { cache[key] = image }
    let rounds = 2000
    var found = 0
    let start = ContinuousClock.now
    for _ in 0..<rounds {
        for key in keys where cache[key] != nil { found += 1 }
    }
    let elapsed = ContinuousClock.now - start
    let nanos = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
    print("syncHitNanos \(nanos / Double(found)) hits \(found)")
    // Baseline: the same keys in a plain dictionary, no lock.
    var plain: [ImageCacheKey: ImageContainer] = [:]
    for key in keys { plain[key] = image }
    var plainFound = 0
    let plainStart = ContinuousClock.now
    for _ in 0..<rounds {
        for key in keys where plain[key] != nil { plainFound += 1 }
    }
    let plainElapsed = ContinuousClock.now - plainStart
    let plainNanos = Double(plainElapsed.components.seconds) * 1e9 + Double(plainElapsed.components.attoseconds) / 1e9
    print("dictionaryHitNanos \(plainNanos / Double(plainFound))")
    exit(0)
}

if arguments.first == "full-disk", arguments.count >= 2 {
    // A file-size limit is per process: here it cannot disturb the test runner.
    signal(SIGXFSZ, SIG_IGN)
    var limit = rlimit(rlim_cur: 64 * 1024, rlim_max: 64 * 1024)
    guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0 else {
        print("FAIL setrlimit")
        exit(1)
    }
    let failures = FailureLog()
    let cache = DataCache(name: "full", directory: URL(fileURLWithPath: arguments[1], isDirectory: true)) { failures.add($0) }
    let small = payload(key: "small", seed: 1, size: 16 * 1024)
    cache.storeData(small, metadata: CacheMetadata(etag: "\"1\"", storedAt: Date()), for: "small")
    cache.storeData(payload(key: "large", seed: 1, size: 200 * 1024), metadata: CacheMetadata(etag: "\"1\"", storedAt: Date()), for: "large")
    cache.flush()
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

if arguments.first == "bench-sweep", arguments.count >= 3, let n = Int(arguments[2]) {
    let directory = URL(fileURLWithPath: arguments[1], isDirectory: true)
    let cache = DataCache(name: "bench", directory: directory, sizeLimit: Int.max / 4)
    for i in 0..<n {
        cache.storeData(Data(repeating: UInt8(i & 0xff), count: 256), metadata: CacheMetadata(storedAt: Date()), for: "key-\(i)")
    }
    cache.flush()
    let start = ContinuousClock.now
    cache.sweep()
    cache.flush()
    let elapsed = ContinuousClock.now - start
    print("sweepMillis \(Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000) entries \(n)")
    exit(0)
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
        cache.flush()
    }
    let failures = cache.metrics.writeFailures
    print("wrote \(cache.metrics.writes) failures \(failures)")
    exit(failures == 0 ? 0 : 1)
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
