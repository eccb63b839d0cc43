import Foundation
import Lumen

/// `lumen bench decode`: decode-at-size against TurboJPEG's scaled decode alone (the floor)
/// and against a full decode + resample (the naive way), each variant measured in its own
/// child process so that its peak memory is its own.
enum BenchDecode {
    static let target = 256

    struct Inputs {
        var jpegs: [URL]
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
        let square = SyntheticPhotos.photo(width: 2000, height: 2000, seed: 7)
        let png = try make("photo-2000.png") { try square.encode(as: .png) }
        let webp = try make("photo-2000.webp") { try square.encode(as: .webp(quality: 85)) }
        return Inputs(jpegs: jpegs, png: png, webp: webp)
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
        // Warm up once (page in code and libraries), then time.
        for d in datas { work(d) }
        let jobs = iterations * datas.count
        let start = monotonicSeconds()
        parallelForEach(jobs, concurrency: threads) { i in work(datas[i % datas.count]) }
        let seconds = monotonicSeconds() - start
        print("\(seconds * 1000 / Double(jobs)) \(peakResidentBytes())")
    }

    struct Measurement {
        var msPerImage: Double
        var peakRSSBytes: Int
    }

    static func measure(_ variant: Variant, files: [URL], iterations: Int, threads: Int) throws -> Measurement {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe")
        process.arguments = ["bench-child", "decode", variant.rawValue, String(iterations), String(threads)] + files.map(\.path)
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let fields = String(decoding: output, as: UTF8.self).split(separator: " ")
        guard process.terminationStatus == 0, fields.count == 2,
              let ms = Double(fields[0]), let rss = Int(fields[1].trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw BenchError("child for \(variant) failed (status \(process.terminationStatus))")
        }
        return Measurement(msPerImage: ms, peakRSSBytes: rss)
    }

    static func run(json: Bool, iterations: Int) throws {
        let inputs = try prepareInputs()
        let threads = ProcessInfo.processInfo.activeProcessorCount
        // The machines are noisy: every variant runs in several rounds, interleaved with the
        // others, and keeps its best round, so a burst of load hits them all alike.
        let rounds = 3
        var best: [String: Measurement] = [:]
        func record(_ name: String, _ m: Measurement) {
            if let old = best[name], old.msPerImage <= m.msPerImage {
                best[name] = Measurement(msPerImage: old.msPerImage, peakRSSBytes: max(old.peakRSSBytes, m.peakRSSBytes))
            } else {
                best[name] = Measurement(msPerImage: m.msPerImage, peakRSSBytes: max(best[name]?.peakRSSBytes ?? 0, m.peakRSSBytes))
            }
        }
        var order: [String] = []
        for _ in 0..<rounds {
            for v in Variant.allCases {
                record("jpeg12mp.\(v.rawValue)", try measure(v, files: inputs.jpegs, iterations: iterations, threads: 1))
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
        let throughputSerial = 1000 / lumen.msPerImage
        let throughputParallel = 1000 / parallel.msPerImage
        let result: [String: Any] = [
            "scenario": "decode",
            "targetPixels": target,
            "jpegMsPerImage": ["lumen": lumen.msPerImage, "floor": floor.msPerImage, "naive": naive.msPerImage],
            "jpegPeakRSSBytes": ["lumen": lumen.peakRSSBytes, "floor": floor.peakRSSBytes, "naive": naive.peakRSSBytes],
            "lumenOverFloor": lumen.msPerImage / floor.msPerImage,
            "naiveOverLumen": naive.msPerImage / lumen.msPerImage,
            "parallelThreads": threads,
            "parallelSpeedup": throughputParallel / throughputSerial,
            "pngMsPerImage": ["lumen": m["png2000.lumen"]!.msPerImage, "naive": m["png2000.naive"]!.msPerImage],
            "webpMsPerImage": ["lumen": m["webp2000.lumen"]!.msPerImage, "naive": m["webp2000.naive"]!.msPerImage],
        ]
        if json {
            printJSON(result)
            return
        }
        print("decode: 12 MP JPEG → \(target) px (one core, \(iterations) passes over \(inputs.jpegs.count) photos, best of \(rounds) rounds)")
        print(pad("variant", 28) + pad("ms/image", 12) + "peak RSS")
        for (name, row) in rows {
            print(pad(name, 28) + pad(String(format: "%.2f", row.msPerImage), 12) + "\(row.peakRSSBytes / 1_048_576) MB")
        }
        print(String(format: "lumen / floor          %.2f×  (goal ≤ 1.15×)", lumen.msPerImage / floor.msPerImage))
        print(String(format: "naive / lumen          %.2f×  (goal ≥ 1.5×)", naive.msPerImage / lumen.msPerImage))
        print(String(format: "%d threads / 1 thread   %.2f×  (goal ≥ 1.8× on 2 cores)", threads, throughputParallel / throughputSerial))
    }
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
