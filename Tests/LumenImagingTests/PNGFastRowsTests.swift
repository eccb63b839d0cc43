import CLumenShim
import Foundation
import Testing
@testable import LumenImaging

/// PNG image data inflated with ISA-L (8-bit, non-interlaced RGB and RGBA) gives exactly
/// libspng's samples, and anything it does not read cleanly is decoded by libspng with
/// libspng's result: the same pixels or the same error, at full size and while reducing.
@Suite(.timeLimit(.minutes(1)))
struct PNGFastRowsTests {
    /// Decodes `png` at `size` (full size when `nil`) with or without ISA-L's row reader.
    static func decode(_ png: Data, size: Int?, fast: Bool) -> Result<Bitmap, ImagingError> {
        var options = DecodeOptions(size: size.map { .maxPixelSize($0) })
        options.allowsFastPNGRows = fast
        do throws(ImagingError) {
            return .success(try ImageDecoder.decode(png, options: options).bitmap)
        } catch {
            return .failure(error)
        }
    }

    /// Whether ISA-L's reader reads every row of `png` and ends cleanly (IHDR read directly).
    static func readsCleanly(_ png: Data) -> Bool {
        let bytes = [UInt8](png)
        guard bytes.count > 29, bytes[24] == 8, bytes[28] == 0, bytes[25] == 2 || bytes[25] == 6 else { return false }
        func word(_ at: Int) -> UInt32 { (0..<4).reduce(0) { $0 << 8 | UInt32(bytes[at + $1]) } }
        let height = word(20)
        return bytes.withUnsafeBufferPointer { buffer in
            guard let rows = lumen_png_rows_open(buffer.baseAddress, buffer.count, word(16), height, bytes[25] == 6 ? 4 : 3) else {
                return false
            }
            defer { lumen_png_rows_close(rows) }
            for _ in 0..<height where lumen_png_rows_next(rows) == nil { return false }
            return lumen_png_rows_finish(rows) == 0
        }
    }

    /// Every outcome of `png` is the same with and without the reader.
    static func expectSameOutcomes(_ png: Data, _ name: String, sizes: [Int?] = [nil, 64, 17]) {
        for size in sizes {
            let fast = decode(png, size: size, fast: true), reference = decode(png, size: size, fast: false)
            switch (fast, reference) {
            case let (.success(a), .success(b)):
                #expect(a == b, "\(name) at \(size.map(String.init) ?? "full size"): pixels differ")
            case let (.failure(a), .failure(b)):
                #expect(a == b, "\(name) at \(size.map(String.init) ?? "full size"): \(a) vs libspng's \(b)")
            default:
                Issue.record("\(name) at \(size.map(String.init) ?? "full size"): \(fast) vs libspng's \(reference)")
            }
        }
    }

    static var corpusPNGs: [URL] {
        let files = FileManager.default.enumerator(at: CorpusPNG.root, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.pathExtension.lowercased() == "png" } ?? []
        return files.sorted { $0.path < $1.path }
    }

    @Test func everyCorpusPNGDecodesAsLibspngDecodesIt() throws {
        let files = Self.corpusPNGs
        #expect(files.count > 150, "the corpus is missing: \(files.count) PNGs")
        var read = 0
        for file in files {
            let png = try Data(contentsOf: file)
            if Self.readsCleanly(png) { read += 1 }
            Self.expectSameOutcomes(png, file.lastPathComponent)
        }
        // PngSuite's 8-bit RGB/RGBA files (basn2c08, basn6a08, the filter and compression
        // series, …) go through the reader; without them the comparison would prove nothing.
        #expect(read >= 20, "only \(read) corpus PNGs were read by ISA-L")
    }

    /// A photo-like image in both layouts, encoded by Lumen (libspng picks the filters).
    @Test(arguments: [false, true])
    func encodedPhotosAreReadByTheReaderWithLibspngsPixels(alpha: Bool) throws {
        let photo = CorpusJPEG.photoLike(width: 301, height: 203)
        let png = try (alpha ? PNGScaledDecodeTests.withAlpha(photo) : photo).encode(as: .png)
        #expect(Self.readsCleanly(png))
        Self.expectSameOutcomes(png, "photo", sizes: [nil, 150, 64, 9])
    }

    // MARK: - Hand-made files

    /// Rows of `width` RGB pixels with filter bytes cycling through 0–4, pseudo-random samples.
    static func filteredRows(width: Int, height: Int, channels: Int = 3, filter: ((Int) -> UInt8)? = nil) -> [UInt8] {
        var raw: [UInt8] = []
        var state: UInt32 = 12345
        for y in 0..<height {
            raw.append(filter?(y) ?? UInt8(y % 5))
            for _ in 0..<(width * channels) {
                state = state &* 1_103_515_245 &+ 12345
                raw.append(UInt8(truncatingIfNeeded: state >> 16))
            }
        }
        return raw
    }

    @Test func everyFilterTypeAndAnyIDATSplitGiveLibspngsPixels() {
        let raw = Self.filteredRows(width: 37, height: 23)
        let zlib = SyntheticPNG.zlibStored(raw)
        for split in [1, 2, 7, 100, 1 << 20] {
            let png = SyntheticPNG.make(width: 37, height: 23, colorType: 2, zlib: zlib, idatSize: split)
            // (The 2-byte zlib header must lie in the first IDAT: split 1 is left to libspng.)
            #expect(Self.readsCleanly(png) == (split > 1), "IDAT split every \(split) bytes")
            Self.expectSameOutcomes(png, "split \(split)", sizes: [nil, 8])
        }
        // With alpha too.
        let rgba = SyntheticPNG.make(width: 19, height: 11, colorType: 6,
                                      zlib: SyntheticPNG.zlibStored(Self.filteredRows(width: 19, height: 11, channels: 4)))
        #expect(Self.readsCleanly(rgba))
        Self.expectSameOutcomes(rgba, "rgba", sizes: [nil, 5])
    }

    @Test func damagedOrOddImageDataFallsBackToLibspngsOutcome() {
        let raw = Self.filteredRows(width: 16, height: 16)
        let good = SyntheticPNG.zlibStored(raw)
        var wrongAdler = good
        wrongAdler[wrongAdler.count - 1] ^= 0x01
        let badFilter = SyntheticPNG.zlibStored(Self.filteredRows(width: 16, height: 16) { $0 == 9 ? 5 : 0 })
        let extraSample = SyntheticPNG.zlibStored(raw + [7])
        let shortByOne = SyntheticPNG.zlibStored(Array(raw.dropLast()))
        var smallWindow = good
        smallWindow[0] = 0x68  // CINFO 6: a 16K window
        smallWindow[1] = UInt8(31 - (0x6800 % 31))  // the header check bits for it
        let cases: [(String, Data)] = [
            ("wrong Adler-32", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: wrongAdler)),
            ("filter type 5", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: badFilter)),
            ("a sample too many", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: extraSample)),
            ("a sample short", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: shortByOne)),
            ("bytes after the zlib stream", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: good + [1, 2, 3])),
            ("a 16K window", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: smallWindow)),
            ("a chunk after the image data", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: good,
                                                      after: SyntheticPNG.chunk("tEXt", Array("a\0b".utf8)) + SyntheticPNG.chunk("IEND", []))),
            ("junk after IEND", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: good, after: SyntheticPNG.chunk("IEND", []) + [0, 1])),
            ("no IEND", SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: good, after: [])),
        ]
        for (name, png) in cases {
            Self.expectSameOutcomes(png, name, sizes: [nil, 4])
        }
        // The reader itself refuses the damaged ones (so libspng's outcome is not luck).
        #expect(!Self.readsCleanly(cases[0].1) && !Self.readsCleanly(cases[1].1) && !Self.readsCleanly(cases[2].1))
        #expect(!Self.readsCleanly(cases[3].1) && !Self.readsCleanly(cases[4].1) && !Self.readsCleanly(cases[5].1))
        #expect(Self.readsCleanly(cases[8].1))

        // A bad IDAT CRC: refused before anything is inflated; libspng reports it.
        var badCRC = [UInt8](SyntheticPNG.make(width: 16, height: 16, colorType: 2, zlib: good))
        let iend = badCRC.count - 12
        badCRC[iend - 1] ^= 0xFF
        #expect(!Self.readsCleanly(Data(badCRC)))
        Self.expectSameOutcomes(Data(badCRC), "bad IDAT CRC", sizes: [nil, 4])
        #expect(throws: ImagingError.self) { try ImageDecoder.decode(Data(badCRC)) }
    }
}
