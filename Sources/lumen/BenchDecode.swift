import Foundation
import Lumen

/// `lumen bench decode`: decode-at-size against TurboJPEG's scaled decode alone (the floor),
/// against a full decode + resample (the naive way) and, when they are installed, against
/// Pillow's draft-mode thumbnail and libvips' in-process thumbnailer (`pyvips`), each variant
/// measured in its own child process so that its memory is its own.
///
/// Memory is reported two ways per variant: the whole process's peak RSS, and what the
/// thumbnailing adds above the process's baseline (RSS with the compressed files already in
/// memory, before the first decode), so that a runtime's start-up size (Swift + Foundation,
/// or a Python interpreter) is not mistaken for the pipeline's working memory.
enum BenchDecode {
    static let target = 256

    struct Inputs {
        var jpegs: [URL]
        /// A typical feed thumbnail's source: ~2 MP q85 photos, which 256 px takes at 1/4.
        var jpegs2mp: [URL]
        var png: URL
        var webp: URL
    }

    /// Generates (once per machine, cached in the temporary directory) the benchmark inputs.
    static func prepareInputs() throws -> Inputs {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-bench-decode-v1")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        func make(_ name: String, _ build: () throws -> Data) throws -> URL {
            let url = dir.appendingPathComponent(name)
            if !FileManager.default.fileExists(atPath: url.path) {
                try build().write(to: url, options: .atomic)
            }
            return url
        }
        var jpegs: [URL] = []
        for seed in 0..<4 {
            jpegs.append(try make("photo-12mp-\(seed).jpg") {
                try SyntheticPhotos.photo(width: 4000, height: 3000, seed: UInt64(100 + seed)).encode(as: .jpeg(quality: 88))
            })
        }
        var jpegs2mp: [URL] = []
        for seed in 0..<4 {
            jpegs2mp.append(try make("photo-2mp-\(seed).jpg") {
                try SyntheticPhotos.photo(width: 1800, height: 1200, seed: UInt64(200 + seed)).encode(as: .jpeg(quality: 85))
            })
        }
        let square = SyntheticPhotos.photo(width: 2000, height: 2000, seed: 7)
        let png = try make("photo-2000.png") { try square.encode(as: .png) }
        let webp = try make("photo-2000.webp") { try square.encode(as: .webp(quality: 85)) }
        return Inputs(jpegs: jpegs, jpegs2mp: jpegs2mp, png: png, webp: webp)
    }

    enum Variant: String, CaseIterable {
        case lumen, floor, naive
    }

    /// Runs in a child process: decodes `files` with `variant` `iterations` times on
    /// `threads` threads and prints `msPerImage peakRSSBytes`.
    static func child(variant: Variant, files: [URL], iterations: Int, threads: Int) throws {
        let datas = try files.map { try Data(contentsOf: $0) }
        let options = DecodeOptions(size: .maxPixelSize(target))
        let work: @Sendable (Data) -> Void = { data in
            do {
                switch variant {
                case .lumen:
                    _ = try ImageDecoder.decode(data, options: options)
                case .floor:
                    _ = try ImageDecoder.decodeAtCodecScale(data, options: options)
                case .naive:
                    let full = try ImageDecoder.decode(data, options: DecodeOptions())
                    let (w, h) = ImageDecoder.outputSize(width: full.bitmap.width, height: full.bitmap.height, options: options)
                    _ = Resampler.resample(full.bitmap, width: w, height: h)
                }
            } catch {
                printError("bench: decode failed: \(error)")
                exit(3)
            }
        }
        let memory = MemoryProbe()
        // Warm up once (page in code and libraries), then time.
        for d in datas { work(d) }
        let jobs = iterations * datas.count
        // CPU time moves much less than wall time on a shared, loaded machine: both are reported.
        let start = monotonicSeconds(), cpuStart = cpuSeconds()
        if threads == 1 {
            // On this thread, like the Python children: a worker thread's stack and malloc
            // arena would otherwise count as the decoder's working memory.
            for i in 0..<jobs { work(datas[i % datas.count]) }
        } else {
            parallelForEach(jobs, concurrency: threads) { i in work(datas[i % datas.count]) }
        }
        let seconds = monotonicSeconds() - start, cpu = cpuSeconds() - cpuStart
        let (peak, added) = memory.finish()
        print("\(seconds * 1000 / Double(jobs)) \(peak) \(memory.baseline) \(added) \(cpu * 1000 / Double(jobs))")
    }

    /// RSS bookkeeping of a benchmark child, from `/proc/self/status`: the baseline when
    /// created, then the peak since (the kernel's high-water mark is reset through
    /// `/proc/self/clear_refs`, so start-up transients do not count as working memory).
    struct MemoryProbe {
        let baseline: Int
        let peakBefore: Int
        let isReset: Bool

        init() {
            peakBefore = Self.status("VmHWM")
            baseline = Self.status("VmRSS")
            isReset = (try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)) != nil
        }

        /// The whole process's peak RSS and the peak's excess over the baseline.
        func finish() -> (peak: Int, added: Int) {
            let after = max(Self.status("VmHWM"), Self.status("VmRSS"))
            let peak = max(after, peakBefore)
            return (peak, max(0, (isReset ? after : peak) - baseline))
        }

        /// A `kB` field of `/proc/self/status` in bytes (0 when unavailable).
        static func status(_ key: String) -> Int { processStatusBytes(key) ?? 0 }
    }

    struct Measurement {
        var msPerImage: Double
        var peakRSSBytes: Int
        /// RSS before the first decode (runtime, libraries, compressed inputs).
        var baselineRSSBytes: Int = 0
        /// Peak RSS above the baseline: the thumbnailing's working memory.
        var addedRSSBytes: Int = 0
        /// CPU time (user + system) per image; 0 when the child did not report it.
        var cpuMsPerImage: Double = 0
    }

    static func measure(_ variant: Variant, files: [URL], iterations: Int, threads: Int) throws -> Measurement {
        try runChild(
            URL(fileURLWithPath: "/proc/self/exe"),
            ["bench-child", "decode", variant.rawValue, String(iterations), String(threads)] + files.map(\.path),
            what: variant.rawValue)
    }

    /// Runs a benchmark child and parses its line
    /// `msPerImage peakRSS [baselineRSS addedRSS [cpuMsPerImage …]]`.
    static func runChild(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil, what: String) throws -> Measurement {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let fields = String(decoding: output, as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard process.terminationStatus == 0, fields.count >= 2,
              let ms = Double(fields[0]), let rss = Int(fields[1]) else {
            throw BenchError("child for \(what) failed (status \(process.terminationStatus))")
        }
        var m = Measurement(msPerImage: ms, peakRSSBytes: rss)
        if fields.count >= 4, let baseline = Int(fields[2]), let added = Int(fields[3]) {
            m.baselineRSSBytes = baseline
            m.addedRSSBytes = added
        }
        if fields.count >= 5, let cpu = Double(fields[4]) { m.cpuMsPerImage = cpu }
        return m
    }

    static func run(json: Bool, iterations: Int) throws {
        let inputs = try prepareInputs()
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let tools = ComparisonTool.allCases.map { ($0, $0.locate()) }
        // The machines are noisy: every variant runs in several rounds, interleaved with the
        // others, and keeps its best round, so a burst of load hits them all alike.
        let rounds = 3
        var best: [String: Measurement] = [:]
        func record(_ name: String, _ m: Measurement) {
            let old = best[name]
            var kept = old.map { $0.msPerImage <= m.msPerImage ? $0 : m } ?? m
            // Memory is the worst seen in any round, not the fastest round's.
            kept.peakRSSBytes = max(old?.peakRSSBytes ?? 0, m.peakRSSBytes)
            kept.baselineRSSBytes = max(old?.baselineRSSBytes ?? 0, m.baselineRSSBytes)
            kept.addedRSSBytes = max(old?.addedRSSBytes ?? 0, m.addedRSSBytes)
            // CPU time: the lowest round, like wall time.
            kept.cpuMsPerImage = min(old?.cpuMsPerImage ?? .infinity, m.cpuMsPerImage)
            best[name] = kept
        }
        var order: [String] = []
        for _ in 0..<rounds {
            for v in Variant.allCases {
                record("jpeg12mp.\(v.rawValue)", try measure(v, files: inputs.jpegs, iterations: iterations, threads: 1))
            }
            for case let (tool, .found(python, _)) in tools {
                record("jpeg12mp.\(tool.rawValue)", try tool.measure(python: python, files: inputs.jpegs, iterations: iterations))
            }
            for v in [Variant.lumen, .floor] {
                record("jpeg2mp.\(v.rawValue)", try measure(v, files: inputs.jpegs2mp, iterations: iterations, threads: 1))
            }
            record("jpeg12mp.lumen.\(threads)threads", try measure(.lumen, files: inputs.jpegs, iterations: iterations * threads, threads: threads))
            for (name, file) in [("png2000", inputs.png), ("webp2000", inputs.webp)] {
                record("\(name).lumen", try measure(.lumen, files: [file], iterations: iterations, threads: 1))
                record("\(name).naive", try measure(.naive, files: [file], iterations: iterations, threads: 1))
            }
            if order.isEmpty { order = Array(best.keys).sorted() }
        }
        let parallel = best["jpeg12mp.lumen.\(threads)threads"]!
        let rows = order.filter { !$0.contains("threads") }.map { ($0, best[$0]!) }
        let m = Dictionary(uniqueKeysWithValues: rows)
        let lumen = m["jpeg12mp.lumen"]!, floor = m["jpeg12mp.floor"]!, naive = m["jpeg12mp.naive"]!
        let lumen2mp = m["jpeg2mp.lumen"]!, floor2mp = m["jpeg2mp.floor"]!
        let throughputSerial = 1000 / lumen.msPerImage
        let throughputParallel = 1000 / parallel.msPerImage
        var result: [String: Any] = [
            "scenario": "decode",
            "targetPixels": target,
            "jpegMsPerImage": ["lumen": lumen.msPerImage, "floor": floor.msPerImage, "naive": naive.msPerImage],
            "jpegPeakRSSBytes": ["lumen": lumen.peakRSSBytes, "floor": floor.peakRSSBytes, "naive": naive.peakRSSBytes],
            "jpegBaselineRSSBytes": ["lumen": lumen.baselineRSSBytes, "floor": floor.baselineRSSBytes, "naive": naive.baselineRSSBytes],
            "jpegAddedRSSBytes": ["lumen": lumen.addedRSSBytes, "floor": floor.addedRSSBytes, "naive": naive.addedRSSBytes],
            "jpegCPUMsPerImage": ["lumen": lumen.cpuMsPerImage, "floor": floor.cpuMsPerImage, "naive": naive.cpuMsPerImage],
            "lumenOverFloor": lumen.msPerImage / floor.msPerImage,
            "lumenOverFloorCPU": lumen.cpuMsPerImage / floor.cpuMsPerImage,
            "jpeg2mpMsPerImage": ["lumen": lumen2mp.msPerImage, "floor": floor2mp.msPerImage],
            "jpeg2mpCPUMsPerImage": ["lumen": lumen2mp.cpuMsPerImage, "floor": floor2mp.cpuMsPerImage],
            "jpeg2mpLumenOverFloor": lumen2mp.msPerImage / floor2mp.msPerImage,
            "jpeg2mpLumenOverFloorCPU": lumen2mp.cpuMsPerImage / floor2mp.cpuMsPerImage,
            "naiveOverLumen": naive.msPerImage / lumen.msPerImage,
            "parallelThreads": threads,
            "parallelSpeedup": throughputParallel / throughputSerial,
            "pngMsPerImage": ["lumen": m["png2000.lumen"]!.msPerImage, "naive": m["png2000.naive"]!.msPerImage],
            "webpMsPerImage": ["lumen": m["webp2000.lumen"]!.msPerImage, "naive": m["webp2000.naive"]!.msPerImage],
        ]
        var skipped: [String] = []
        for (tool, location) in tools {
            let key = tool.rawValue
            guard case .found(_, let version) = location, let t = m["jpeg12mp.\(key)"] else {
                skipped.append(key)
                continue
            }
            result["\(key)Version"] = version
            result["\(key)Millis"] = t.msPerImage
            result["\(key)CPUMillis"] = t.cpuMsPerImage
            result["\(key)OverLumenCPU"] = t.cpuMsPerImage / lumen.cpuMsPerImage
            result["\(key)PeakRSSBytes"] = t.peakRSSBytes
            result["\(key)BaselineRSSBytes"] = t.baselineRSSBytes
            result["\(key)AddedRSSBytes"] = t.addedRSSBytes
            result["\(key)OverLumen"] = t.msPerImage / lumen.msPerImage
        }
        result["comparisonSkipped"] = skipped
        if json {
            printJSON(result)
            return
        }
        print("decode: 12 MP JPEG → \(target) px (one core, \(iterations) passes over \(inputs.jpegs.count) photos, best of \(rounds) rounds);"
            + " jpeg2mp: \(inputs.jpegs2mp.count) 1800×1200 q85 photos → \(target) px")
        print(pad("variant", 20) + pad("ms/image", 10) + pad("CPU ms", 10) + pad("peak RSS", 11) + pad("baseline", 11) + "added by decoding")
        func mb(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1_048_576) }
        for (name, row) in rows {
            print(pad(name, 20) + pad(String(format: "%.2f", row.msPerImage), 10) + pad(String(format: "%.2f", row.cpuMsPerImage), 10)
                + pad(mb(row.peakRSSBytes), 11) + pad(mb(row.baselineRSSBytes), 11) + mb(row.addedRSSBytes))
        }
        print(String(format: "lumen / floor          %.2f×  (goal ≤ 1.15×; CPU time %.2f×)", lumen.msPerImage / floor.msPerImage,
                     lumen.cpuMsPerImage / floor.cpuMsPerImage))
        print(String(format: "lumen / floor, 2 MP    %.2f×  (1/4 scale; CPU time %.2f×)", lumen2mp.msPerImage / floor2mp.msPerImage,
                     lumen2mp.cpuMsPerImage / floor2mp.cpuMsPerImage))
        print(String(format: "naive / lumen          %.2f×  (goal ≥ 1.5×)", naive.msPerImage / lumen.msPerImage))
        print(String(format: "%d threads / 1 thread   %.2f×  (goal ≥ 1.8× on 2 cores)", threads, throughputParallel / throughputSerial))
        for (tool, location) in tools {
            switch location {
            case .found(_, let version):
                guard let t = m["jpeg12mp.\(tool.rawValue)"] else { continue }
                print(pad("\(tool.rawValue) / lumen", 23) + String(format: "%.2f×  (CPU time %.2f×; ", t.msPerImage / lumen.msPerImage, t.cpuMsPerImage / lumen.cpuMsPerImage)
                    + "\(version), \(tool.what); memory added \(mb(t.addedRSSBytes)) vs lumen \(mb(lumen.addedRSSBytes)))")
            case .missing(let reason):
                print("\(tool.rawValue): skipped (\(reason)); install with scripts/install-comparison-tools.sh or `make bench-compare`")
            }
        }
    }
}

/// An optional third-party thumbnailer `lumen bench decode` compares against, run by a Python
/// interpreter in a child process. Lumen itself never needs Python.
///
/// The interpreter is `$LUMEN_COMPARE_PYTHON`, else the virtual environment
/// `scripts/install-comparison-tools.sh` creates (`$LUMEN_COMPARE_VENV`, default
/// `/tmp/lumen-compare-venv`), else `python3` on the `PATH`. The child reads the files into
/// memory, notes its RSS, warms up on each file once, then times the loop only (interpreter
/// start-up and imports are excluded), exactly like Lumen's own child.
enum ComparisonTool: String, CaseIterable {
    case pillow, vips

    /// What is measured.
    var what: String {
        switch self {
        case .pillow: "Image.draft + thumbnail"
        case .vips: "pyvips Image.thumbnail_buffer + write_to_memory, VIPS_CONCURRENCY=1, cache off"
        }
    }

    enum Location {
        case found(python: URL, version: String)
        case missing(String)
    }

    static func candidates() -> [URL] {
        let env = ProcessInfo.processInfo.environment
        if let python = env["LUMEN_COMPARE_PYTHON"], !python.isEmpty { return [URL(fileURLWithPath: python)] }
        var list = [URL(fileURLWithPath: (env["LUMEN_COMPARE_VENV"] ?? "/tmp/lumen-compare-venv") + "/bin/python")]
        for dir in (env["PATH"] ?? "/usr/bin").split(separator: ":") {
            let url = URL(fileURLWithPath: String(dir)).appendingPathComponent("python3")
            if FileManager.default.isExecutableFile(atPath: url.path) { list.append(url); break }
        }
        return list
    }

    /// The first interpreter that can import the tool, with the tool's version.
    func locate() -> Location {
        for python in Self.candidates() where FileManager.default.isExecutableFile(atPath: python.path) {
            let process = Process()
            process.executableURL = python
            process.arguments = ["-c", Self.script, rawValue, "0", String(BenchDecode.target)]
            process.environment = environment
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { continue }
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            if process.terminationStatus == 0 {
                return .found(python: python, version: String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        switch self {
        case .pillow: return .missing("no Python with Pillow")
        case .vips: return .missing("no Python with pyvips and libvips")
        }
    }

    /// The child's environment: libvips single-threaded, like the one-core Lumen row.
    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        if self == .vips { env["VIPS_CONCURRENCY"] = "1" }
        return env
    }

    func measure(python: URL, files: [URL], iterations: Int) throws -> BenchDecode.Measurement {
        try BenchDecode.runChild(
            python, ["-c", Self.script, rawValue, String(iterations), String(BenchDecode.target)] + files.map(\.path),
            environment: environment, what: rawValue)
    }

    /// The Python child: `tool iterations target files…`; with no files it prints the tool's
    /// version (the availability probe). Output:
    /// `msPerImage peakRSS baselineRSS addedRSS cpuMsPerImage WxH`.
    static let script = #"""
import io, os, sys, time

def status(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0

tool, iterations, target = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
paths = sys.argv[4:]
if tool == "pillow":
    from PIL import Image
    version = "Pillow " + Image.__version__
    def work(data):
        im = Image.open(io.BytesIO(data))
        im.draft("RGB", (target, target))
        im.thumbnail((target, target))
        return im.size
elif tool == "vips":
    import pyvips
    pyvips.cache_set_max(0)
    version = "libvips %d.%d.%d" % (pyvips.version(0), pyvips.version(1), pyvips.version(2))
    def work(data):
        im = pyvips.Image.thumbnail_buffer(data, target)
        im.write_to_memory()
        return (im.width, im.height)
else:
    sys.exit("unknown tool " + tool)
if not paths:
    print(version)
    sys.exit(0)
datas = []
for p in paths:
    with open(p, "rb") as f:
        datas.append(f.read())
peak_before = status("VmHWM")
baseline = status("VmRSS")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
size = None
for d in datas:
    size = work(d)
jobs = iterations * len(datas)
start, cpu_start = time.perf_counter(), time.process_time()
for i in range(jobs):
    work(datas[i % len(datas)])
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
after = max(status("VmHWM"), status("VmRSS"))
peak = max(after, peak_before)
added = max(0, (after if reset else peak) - baseline)
print(seconds * 1000 / jobs, peak, baseline, added, cpu * 1000 / jobs, "%dx%d" % size)
"""#
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func pad(_ s: String, _ width: Int) -> String {
    s.count >= width ? s + " " : s + String(repeating: " ", count: width - s.count)
}

/// Prints one JSON object on one line (keys sorted, so output is stable).
func printJSON(_ object: [String: Any]) {
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}
