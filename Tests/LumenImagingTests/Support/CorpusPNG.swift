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

/// A small seeded generator (SplitMix64) so that fuzz runs are reproducible.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Builds PNG files byte by byte (stored deflate blocks), independent of libspng.
enum SyntheticPNG {
    /// A PNG with the given IHDR fields and already-filtered scanlines (`raw` = the zlib input).
    static func make(width: Int, height: Int, bitDepth: UInt8 = 8, colorType: UInt8, raw: [UInt8]) -> Data {
        make(width: width, height: height, bitDepth: bitDepth, colorType: colorType, zlib: zlibStored(raw))
    }

    /// A PNG around the zlib stream `zlib`, cut into IDAT chunks of `idatSize` bytes, with
    /// `after` (chunks, or any bytes) following the image data.
    static func make(
        width: Int, height: Int, bitDepth: UInt8 = 8, colorType: UInt8, zlib: [UInt8], idatSize: Int = 1 << 20,
        after: [UInt8] = chunk("IEND", [])
    ) -> Data {
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        png += chunk("IHDR", be32(width) + be32(height) + [bitDepth, colorType, 0, 0, 0])
        var p = 0
        repeat {
            let n = min(idatSize, zlib.count - p)
            png += chunk("IDAT", Array(zlib[p..<p + n]))
            p += n
        } while p < zlib.count
        return Data(png + after)
    }

    static func be32(_ v: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: v >> 24), UInt8(truncatingIfNeeded: v >> 16), UInt8(truncatingIfNeeded: v >> 8), UInt8(truncatingIfNeeded: v)] }

    static func chunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + body
        return be32(body.count) + typed + be32(Int(crc32(typed)))
    }

    static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var p = 0
        repeat {
            let n = min(65535, data.count - p)
            let last: UInt8 = p + n == data.count ? 1 : 0
            out += [last, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8((~n >> 8) & 0xFF)]
            out += data[p..<p + n]
            p += n
        } while p < data.count
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in data { a = (a + UInt32(byte)) % 65521; b = (b + a) % 65521 }
        return out + be32(Int(b << 16 | a))
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}

/// Builds GIF files byte by byte with "uncompressed" LZW (a clear code every 100 literals, so
/// the code size stays 9 bits), independent of giflib.
enum SyntheticGIF {
    struct Frame {
        var left = 0, top = 0, width: Int, height: Int
        /// Palette indices, `width * height`, row by row.
        var indices: [UInt8]
        var delay = 10
        var disposal = 0
        var transparentIndex: Int?
        /// Replace the LZW data with garbage (a decoder that reads it fails).
        var corruptData = false
        /// Store rows in GIF's four-pass interlaced order (`indices` stay row by row).
        var interlaced = false
    }

    static func make(width: Int, height: Int, colors: [(UInt8, UInt8, UInt8)], frames: [Frame]) -> Data {
        precondition(colors.count == 256)
        var gif = Array("GIF89a".utf8)
        gif += le16(width) + le16(height) + [0xF7, 0, 0]  // global table, 256 entries
        for c in colors { gif += [c.0, c.1, c.2] }
        for frame in frames {
            let packed = UInt8(frame.disposal << 2) | (frame.transparentIndex == nil ? 0 : 1)
            gif += [0x21, 0xF9, 4, packed] + le16(frame.delay) + [UInt8(frame.transparentIndex ?? 0), 0]
            gif += [0x2C] + le16(frame.left) + le16(frame.top) + le16(frame.width) + le16(frame.height)
            gif += [frame.interlaced ? 0x40 : 0]
            gif += [8]  // LZW minimum code size
            var indices = frame.indices
            if frame.interlaced {
                indices = []
                for (start, step) in [(0, 8), (4, 8), (2, 4), (1, 2)] {
                    for row in stride(from: start, to: frame.height, by: step) {
                        indices += frame.indices[row * frame.width..<(row + 1) * frame.width]
                    }
                }
            }
            let stream = frame.corruptData ? [UInt8](repeating: 0xFF, count: 64) : lzw(indices)
            var p = 0
            while p < stream.count {
                let n = min(255, stream.count - p)
                gif += [UInt8(n)] + stream[p..<p + n]
                p += n
            }
            gif += [0]
        }
        gif += [0x3B]
        return Data(gif)
    }

    static func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8((v >> 8) & 0xFF)] }

    private static func lzw(_ indices: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var bits = 0, count = 0
        func emit(_ code: Int) {
            bits |= code << count
            count += 9
            while count >= 8 { out.append(UInt8(bits & 0xFF)); bits >>= 8; count -= 8 }
        }
        for (i, index) in indices.enumerated() {
            if i % 100 == 0 { emit(256) }
            emit(Int(index))
        }
        emit(257)
        if count > 0 { out.append(UInt8(bits & 0xFF)) }
        return out
    }
}

/// Reads a GIF's block structure (no LZW) for test expectations, independent of giflib.
enum GIFBlocks {
    struct Frame {
        var left, top, width, height, delay, disposal: Int
        var transparentIndex: Int?
        /// The local colour table as RGB triples, empty when the frame uses the global one.
        var localColors: [[UInt8]] = []
    }

    static func parse(_ data: Data) -> (width: Int, height: Int, frames: [Frame])? {
        let b = [UInt8](data)
        guard b.count >= 13 else { return nil }
        func le(_ i: Int) -> Int { Int(b[i]) | Int(b[i + 1]) << 8 }
        var p = 13
        if b[10] & 0x80 != 0 { p += 3 << (Int(b[10] & 7) + 1) }
        var frames: [Frame] = []
        var delay = 0, disposal = 0
        var transparent: Int?
        func skipSubBlocks() { while p < b.count, b[p] != 0 { p += Int(b[p]) + 1 }; p += 1 }
        while p < b.count {
            switch b[p] {
            case 0x21:
                if p + 7 < b.count, b[p + 1] == 0xF9 {
                    disposal = Int(b[p + 3] >> 2) & 7
                    delay = le(p + 4)
                    transparent = b[p + 3] & 1 != 0 ? Int(b[p + 6]) : nil
                }
                p += 2
                skipSubBlocks()
            case 0x2C:
                guard p + 10 <= b.count else { return nil }
                var frame = Frame(left: le(p + 1), top: le(p + 3), width: le(p + 5), height: le(p + 7), delay: delay, disposal: disposal, transparentIndex: transparent)
                let packed = b[p + 9]
                p += 10
                if packed & 0x80 != 0 {
                    let count = 1 << (Int(packed & 7) + 1)
                    guard p + count * 3 <= b.count else { return nil }
                    frame.localColors = (0..<count).map { Array(b[p + $0 * 3..<p + $0 * 3 + 3]) }
                    p += count * 3
                }
                frames.append(frame)
                p += 1  // LZW minimum code size
                skipSubBlocks()
                delay = 0; disposal = 0; transparent = nil
            default:
                return (le(6), le(8), frames)
            }
        }
        return (le(6), le(8), frames)
    }
}
