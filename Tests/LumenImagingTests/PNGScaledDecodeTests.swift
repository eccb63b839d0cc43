import Foundation
import Testing
@testable import LumenImaging

/// PNG thumbnails are reduced while the rows stream out of libspng (whole-factor block means,
/// premultiplied with alpha), never decoded at full size first — except interlaced files.
@Suite(.timeLimit(.minutes(1)))
struct PNGScaledDecodeTests {
    /// `photo` with an alpha channel that varies smoothly (and is 0 in one corner region).
    static func withAlpha(_ photo: Bitmap) -> Bitmap {
        let rgb = photo.pixels
        return Bitmap(width: photo.width, height: photo.height, format: .rgba8) { out in
            for i in 0..<(photo.width * photo.height) {
                let x = i % photo.width, y = i / photo.width
                out[i * 4] = rgb[i * 3]; out[i * 4 + 1] = rgb[i * 3 + 1]; out[i * 4 + 2] = rgb[i * 3 + 2]
                out[i * 4 + 3] = x < photo.width / 5 && y < photo.height / 5 ? 0 : UInt8(truncatingIfNeeded: 80 + (x + y) % 176)
            }
        }
    }

    /// The full decode resampled to `size`: what a PNG thumbnail was before the reduction.
    static func fullThenResampled(_ png: Data, width: Int, height: Int) throws -> Bitmap {
        Resampler.resample(try ImageDecoder.decode(png).bitmap, width: width, height: height)
    }

    @Test(arguments: [(1200, 800, false), (1067, 1600, true), (999, 333, false), (517, 389, true)])
    func aThumbnailIsReducedWhileDecodingAndMatchesTheFullDecode(width: Int, height: Int, alpha: Bool) throws {
        let photo = CorpusJPEG.photoLike(width: width, height: height)
        let png = try (alpha ? Self.withAlpha(photo) : photo).encode(as: .png)
        let thumbnail = try ImageDecoder.decode(png, options: DecodeOptions(size: .maxPixelSize(160)))
        let statistics = thumbnail.statistics
        // Reduced by a whole factor while decoding, never below the target.
        #expect(statistics.codecWidth < width && statistics.codecHeight < height)
        let factor = (width + statistics.codecWidth - 1) / statistics.codecWidth
        #expect(statistics.codecWidth == (width + factor - 1) / factor)
        #expect(max(statistics.codecWidth, statistics.codecHeight) >= 160)
        #expect(max(thumbnail.bitmap.width, thumbnail.bitmap.height) == 160)
        #expect(thumbnail.bitmap.format == (alpha ? .rgba8 : .rgb8))

        let reference = try Self.fullThenResampled(png, width: thumbnail.bitmap.width, height: thumbnail.bitmap.height)
        #expect(CorpusPNG.meanDifference(thumbnail.bitmap, reference) < 2.5)
    }

    /// The block means themselves: a partial last block averages only the pixels it has, and
    /// with alpha, colour is weighted by alpha (a transparent pixel lends none).
    @Test func blockMeansWeightColourByAlphaAndHandlePartialBlocks() throws {
        // 5×2: columns 0–2 opaque red, 3–4 transparent green; reduced by 2 → 3×1.
        var raw: [UInt8] = []
        for _ in 0..<2 {
            raw.append(0)  // filter: none
            for x in 0..<5 { raw += x < 3 ? [255, 0, 0, 255] : [0, 255, 0, 0] }
        }
        let png = SyntheticPNG.make(width: 5, height: 2, colorType: 6, raw: raw)
        let output = try png.withUnsafeBytes { bytes throws(ImagingError) in
            let header = try PNGCodec.readHeader(bytes, options: DecodeOptions())
            return try PNGCodec.decode(bytes, header: header, minimumSize: PixelSize(width: 2, height: 1), options: DecodeOptions())
        }
        let pixels = output.bitmap.pixels
        #expect(output.bitmap.width == 3 && output.bitmap.height == 1)
        #expect(Array(pixels[0..<4]) == [255, 0, 0, 255])  // 4 opaque red
        #expect(Array(pixels[4..<8]) == [255, 0, 0, 128])  // 2 red + 2 transparent: red at half alpha
        #expect(pixels[11] == 0)                            // the partial block: 2 transparent
    }

    /// Interlaced files give their rows pass by pass: decoded at full size, then resampled,
    /// to the same pixels as their non-interlaced twins in PngSuite.
    @Test(arguments: ["basi2c08", "basi6a08", "basi0g08"])
    func interlacedFilesDecodeAtFullSizeThenResample(name: String) throws {
        let interlaced = try CorpusPNG.data("pngsuite/png/\(name).png")
        let plain = try CorpusPNG.data("pngsuite/png/basn\(name.dropFirst(4)).png")
        let options = DecodeOptions(size: .maxPixelSize(8))
        let a = try ImageDecoder.decode(interlaced, options: options)
        let b = try ImageDecoder.decode(plain, options: options)
        #expect(a.statistics.codecWidth == 32)
        #expect(b.statistics.codecWidth == 8)
        #expect(a.bitmap.width == 8 && b.bitmap.width == 8)
        #expect(CorpusPNG.meanDifference(a.bitmap, b.bitmap) < 12)
    }

    /// Every PNG of the corpus, damaged ones included, at a small size: the reduced decode
    /// fails exactly when the full decode fails, with the same kind of error.
    @Test func corpusFilesFailTheSameWayReducedOrNot() throws {
        var names = CorpusPNG.pngSuiteNames(corrupt: true).map { "pngsuite/png/\($0).png" }
        names += CorpusPNG.pngSuiteNames(corrupt: false).map { "pngsuite/png/\($0).png" }
        let realWorld = (try? FileManager.default.contentsOfDirectory(atPath: CorpusPNG.url("real-world").path)) ?? []
        names += realWorld.filter { $0.hasSuffix(".png") }.map { "real-world/\($0)" }
        #expect(names.count > 150)
        for name in names {
            let data = try CorpusPNG.data(name)
            let small = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(4))) }
            let full = Result { () throws(ImagingError) in try ImageDecoder.decode(data) }
            switch (small, full) {
            case (.success, .success): break
            case (.failure(let a), .failure(let b)):
                #expect(Self.kind(a) == Self.kind(b), "\(name): \(a) reduced, \(b) full")
            default:
                Issue.record("\(name): reduced \(small), full \(full)")
            }
        }
    }

    static func kind(_ error: ImagingError) -> String {
        switch error {
        case .unsupportedFormat: "unsupportedFormat"
        case .corrupted: "corrupted"
        case .truncated: "truncated"
        case .tooLarge: "tooLarge"
        case .encodingFailed: "encodingFailed"
        case .invalidArgument: "invalidArgument"
        case .cancelled: "cancelled"
        }
    }
}
