import Foundation
@testable import LumenImaging

#if canImport(Glibc)
import Glibc
#endif

/// Shared helpers for the PNG and GIF suites: the corpus on disk, reference pixels, memory.
enum CorpusPNG {
    /// `../shared/corpus` relative to the package root, found from this file's path.
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Support
        .deletingLastPathComponent()  // LumenImagingTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
        .appendingPathComponent("../shared/corpus").standardizedFileURL

    static func url(_ relative: String) -> URL { root.appendingPathComponent(relative) }

    static func data(_ relative: String) throws -> Data { try Data(contentsOf: url(relative)) }

    /// File names (without extension) in `pngsuite/png`, sorted; `corrupt` selects the `x*` files.
    static func pngSuiteNames(corrupt: Bool) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: url("pngsuite/png").path)) ?? []
        return names.filter { $0.hasSuffix(".png") && $0.hasPrefix("x") == corrupt }
            .map { String($0.dropLast(4)) }
            .sorted()
    }

    /// The PngSuite reference pixels for `name` as 8-bit RGBA (the `_to8` file when present;
    /// a 16-bit reference without one, e.g. `basn6a16`, is scaled with rounding, v·255/65535).
    static func reference(_ name: String) throws -> [Int] {
        let to8 = url("pngsuite/json/\(name)_to8.json")
        if FileManager.default.fileExists(atPath: to8.path) {
            return try JSONDecoder().decode([Int].self, from: Data(contentsOf: to8))
        }
        let values = try JSONDecoder().decode([Int].self, from: Data(contentsOf: url("pngsuite/json/\(name).json")))
        guard values.contains(where: { $0 > 255 }) || name.hasSuffix("16") else { return values }
        return values.map { ($0 * 255 + 32767) / 65535 }
    }

    /// The image's pixels as RGBA bytes (alpha 255 for `.rgb8`).
    static func rgba(_ bitmap: Bitmap) -> [UInt8] { bitmap.converted(to: .rgba8).pixels }

    /// Largest per-channel difference between two RGBA buffers of the same length.
    static func maxDifference(_ a: [UInt8], _ b: [Int]) -> Int {
        precondition(a.count == b.count)
        var worst = 0
        for i in a.indices { worst = max(worst, abs(Int(a[i]) - b[i])) }
        return worst
    }

    /// Mean absolute per-channel difference of two same-size bitmaps, compared as RGBA.
    static func meanDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
        let pa = rgba(a), pb = rgba(b)
        precondition(pa.count == pb.count)
        var sum = 0
        for i in pa.indices { sum += abs(Int(pa[i]) - Int(pb[i])) }
        return Double(sum) / Double(pa.count)
    }

    /// The process's peak resident set size in bytes (a high-water mark: it never goes down).
    static func peakRSS() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss * 1024  // Linux reports kilobytes
    }

    /// `name` with its typed error, or `nil` when it decoded.
    static func decodeError(_ data: Data, options: DecodeOptions = DecodeOptions()) -> ImagingError? {
        do {
            _ = try ImageDecoder.decode(data, options: options)
            return nil
        } catch {
            return error
        }
    }

    /// Whether `error` is a `.corrupted` error.
    static func isCorrupted(_ error: ImagingError?) -> Bool {
        if case .corrupted = error { return true }
        return false
    }
}
