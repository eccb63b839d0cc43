import Foundation
import Lumen
import Synchronization

/// `lumen thumbnail <file>... --size N [--fill] --output DIR [--format png|jpeg|webp]
/// [--quality Q] [--concurrency N]`
///
/// Writes `DIR/<name without extension>.<format>` for each input: longest side at most N
/// (fit) or exactly N×N (fill), upright. Exit 0 when all succeeded, 1 when any failed, 2 for
/// a usage error.
enum ThumbnailCommand {
    static let usage = """
        usage: lumen thumbnail <file>... --size N [--fill] --output DIR
                               [--format png|jpeg|webp] [--quality Q] [--concurrency N]
        """

    static func run(_ argv: [String]) -> Int32 {
        let args: Arguments
        let size: Int, quality: Int?, concurrency: Int
        let format: String
        let output: String
        do {
            args = try Arguments(argv, valueOptions: ["size", "output", "format", "quality", "concurrency"], flagOptions: ["fill", "help"])
            if args.flag("help") { print(usage); return 0 }
            guard let s = try args.int("size", range: 1...65_535) else { throw UsageError("--size is required") }
            guard let o = args.string("output") else { throw UsageError("--output is required") }
            guard !args.positionals.isEmpty else { throw UsageError("no input files") }
            size = s
            output = o
            format = args.string("format") ?? "jpeg"
            guard ["png", "jpeg", "jpg", "webp"].contains(format) else {
                throw UsageError("--format must be png, jpeg or webp, got '\(format)'")
            }
            quality = try args.int("quality", range: 1...100)
            concurrency = try args.int("concurrency", range: 1...1024) ?? ProcessInfo.processInfo.activeProcessorCount
        } catch {
            printError("lumen thumbnail: \(error)\n\(usage)")
            return 2
        }
        do {
            try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        } catch {
            printError("lumen thumbnail: cannot create \(output): \(error.localizedDescription)")
            return 1
        }
        let encoding: EncodingFormat = switch format {
        case "png": .png
        case "webp": .webp(quality: quality ?? 80, lossless: false)
        default: .jpeg(quality: quality ?? 85, progressive: false)
        }
        let ext = format == "jpg" ? "jpeg" : format
        let decodeSize: DecodeSize = args.flag("fill")
            ? .size(width: size, height: size, contentMode: .aspectFill)
            : .maxPixelSize(size)
        let inputs = args.positionals
        let failures = Mutex<Int>(0)
        let start = monotonicSeconds()
        parallelForEach(inputs.count, concurrency: concurrency) { i in
            let input = inputs[i]
            do {
                let data = try readFile(input)
                let decoded = try ImageDecoder.decode(data, options: DecodeOptions(size: decodeSize))
                let encoded = try decoded.bitmap.encode(as: encoding)
                let name = ((input as NSString).lastPathComponent as NSString).deletingPathExtension
                let destination = (output as NSString).appendingPathComponent("\(name).\(ext)")
                try encoded.write(to: URL(fileURLWithPath: destination), options: .atomic)
            } catch {
                failures.withLock { $0 += 1 }
                printError("\(input): \(error)")
            }
        }
        let failed = failures.withLock { $0 }
        let seconds = monotonicSeconds() - start
        print("thumbnail: \(inputs.count - failed) done, \(failed) failed, \(String(format: "%.2f", seconds)) s")
        return failed == 0 ? 0 : 1
    }
}

/// Reads a whole file, turning POSIX failures into a readable error.
struct FileReadError: Error, CustomStringConvertible {
    var path: String
    var reason: String
    var description: String { "cannot read \(path): \(reason)" }
}

func readFile(_ path: String) throws -> Data {
    guard let data = FileManager.default.contents(atPath: path) else {
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
        throw FileReadError(path: path, reason: !exists ? "no such file" : isDirectory.boolValue ? "is a directory" : "unreadable")
    }
    return data
}
