import Foundation
import Lumen

/// `lumen demo`: generates a deterministic set of photo-like images, thumbnails them with
/// Lumen, writes a contact sheet and prints timings.
enum DemoCommand {
    static func run(_ argv: [String]) -> Int32 {
        let output: String
        do {
            let args = try Arguments(argv, valueOptions: ["output"], flagOptions: [])
            output = args.string("output") ?? "out/demo"
        } catch {
            printError("lumen demo: \(error)\nusage: lumen demo [--output DIR]")
            return 2
        }
        do {
            try runDemo(output: output)
            return 0
        } catch {
            printError("lumen demo: \(error)")
            return 1
        }
    }

    static func runDemo(output: String) throws {
        let fm = FileManager.default
        let originals = (output as NSString).appendingPathComponent("originals")
        try fm.createDirectory(atPath: originals, withIntermediateDirectories: true)
        // 12 images: three 12 MP, the rest 2–6 MP, as JPEG, PNG and WebP.
        let specs: [(w: Int, h: Int, format: EncodingFormat)] = [
            (4000, 3000, .jpeg(quality: 88)), (3000, 4000, .jpeg(quality: 88)), (4000, 3000, .jpeg(quality: 80, progressive: true)),
            (2400, 1600, .jpeg(quality: 85)), (1600, 2400, .jpeg(quality: 85)), (3000, 2000, .webp(quality: 80)),
            (2000, 2000, .webp(quality: 80, lossless: false)), (1920, 1080, .png), (1080, 1920, .jpeg(quality: 85)),
            (2560, 1440, .jpeg(quality: 90)), (1200, 1200, .png), (3200, 1800, .webp(quality: 75)),
        ]
        print("lumen demo: generating \(specs.count) photo-like images (deterministic)…")
        let t0 = monotonicSeconds()
        var files: [String] = []
        for (i, spec) in specs.enumerated() {
            let bitmap = SyntheticPhotos.photo(width: spec.w, height: spec.h, seed: UInt64(i + 1))
            let data = try bitmap.encode(as: spec.format)
            let ext: String = switch spec.format {
            case .png: "png"
            case .webp: "webp"
            default: "jpg"
            }
            let path = (originals as NSString).appendingPathComponent(String(format: "photo-%02d.%@", i + 1, ext))
            try data.write(to: URL(fileURLWithPath: path))
            files.append(path)
            print("  \(path)  \(spec.w)×\(spec.h)  \(data.count / 1024) KB")
        }
        let t1 = monotonicSeconds()
        print("thumbnailing to 256 px on \(ProcessInfo.processInfo.activeProcessorCount) cores…")
        let thumbnails = ThumbnailBatch(count: files.count)
        let inputs = files
        parallelForEach(files.count, concurrency: ProcessInfo.processInfo.activeProcessorCount) { i in
            let start = monotonicSeconds()
            do {
                let data = try readFile(inputs[i])
                let image = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(256)))
                thumbnails.set(i, image.bitmap, ms: (monotonicSeconds() - start) * 1000)
            } catch {
                printError("\(inputs[i]): \(error)")
            }
        }
        let t2 = monotonicSeconds()
        let images = thumbnails.results()
        for (i, entry) in images.enumerated() {
            if let entry {
                print(String(format: "  photo-%02d  %@  %.1f ms", i + 1, "\(entry.bitmap.width)×\(entry.bitmap.height)", entry.ms))
            }
        }
        let sheet = ContactSheet.make(images.compactMap { $0?.bitmap }, cell: 256, columns: 4)
        let sheetPath = (output as NSString).appendingPathComponent("contact-sheet.png")
        try sheet.encode(as: .png).write(to: URL(fileURLWithPath: sheetPath))
        print(String(format: "generate %.2f s, thumbnail %.2f s (%.1f ms per image wall), peak RSS %d MB",
                     t1 - t0, t2 - t1, (t2 - t1) * 1000 / Double(files.count), peakResidentBytes() / 1_048_576))
        print("contact sheet: \(sheetPath)")
    }
}

/// Collects per-index results from worker threads.
final class ThumbnailBatch: @unchecked Sendable {  // guarded by `lock`
    private let lock = NSLock()
    private var entries: [(bitmap: Bitmap, ms: Double)?]
    init(count: Int) { entries = Array(repeating: nil, count: count) }
    func set(_ i: Int, _ bitmap: Bitmap, ms: Double) { lock.withLock { entries[i] = (bitmap, ms) } }
    func results() -> [(bitmap: Bitmap, ms: Double)?] { lock.withLock { entries } }
}
