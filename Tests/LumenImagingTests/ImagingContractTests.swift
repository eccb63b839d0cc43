import Foundation
import Testing
@testable import LumenImaging

// Contract tests written from issue 2 ("The imaging engine"), DESIGN.md §4 and
// Lumen.docc/DecodingAndDownsampling.md by an independent reviewer, not from the
// implementation.

/// Fixture builders and references computed in Swift, independent of the library's geometry.
enum Contract {
    // MARK: Containers

    static func le32(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 24 & 0xFF)] }
    static func le24(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF)] }

    /// The TIFF block of an EXIF segment holding only the orientation tag.
    static func orientationTIFF(_ o: Int) -> [UInt8] { CorpusJPEG.tiff(entries: [(0x0112, 3, 1, o)]) }

    /// The chunks (fourcc, payload) of a WebP file.
    static func webpChunks(_ data: Data) -> [(String, [UInt8])] {
        let b = [UInt8](data)
        var out: [(String, [UInt8])] = []
        var p = 12
        while p + 8 <= b.count {
            let tag = String(decoding: b[p..<p + 4], as: UTF8.self)
            let n = Int(b[p + 4]) | Int(b[p + 5]) << 8 | Int(b[p + 6]) << 16 | Int(b[p + 7]) << 24
            out.append((tag, Array(b[p + 8..<min(b.count, p + 8 + n)])))
            p += 8 + n + (n & 1)
        }
        return out
    }

    /// A WebP file rebuilt as an extended (VP8X) file with the given extra chunks: `iccp` right
    /// after VP8X, `exif` (raw TIFF, no "Exif\0\0" prefix) after the image.
    static func extendedWebP(_ simple: Data, width: Int, height: Int, iccp: [UInt8]? = nil, exif: [UInt8]? = nil) -> Data {
        var chunks = webpChunks(simple)
        var flags: UInt8 = 0
        if let vp8x = chunks.first, vp8x.0 == "VP8X" { flags = vp8x.1[0]; chunks.removeFirst() }
        if chunks.contains(where: { $0.0 == "ALPH" }) { flags |= 0x10 }
        if chunks.contains(where: { $0.0 == "VP8L" }) {
            // A VP8L bitstream says whether it uses alpha in its header bit 28.
            let b = chunks.first(where: { $0.0 == "VP8L" })!.1
            if b.count >= 5, (b[4] >> 4) & 1 == 1 { flags |= 0x10 }
        }
        if iccp != nil { flags |= 0x20 }
        if exif != nil { flags |= 0x08 }
        func chunk(_ tag: String, _ body: [UInt8]) -> [UInt8] {
            Array(tag.utf8) + le32(body.count) + body + (body.count & 1 == 1 ? [0] : [])
        }
        var body = Array("WEBP".utf8)
        body += chunk("VP8X", [flags, 0, 0, 0] + le24(width - 1) + le24(height - 1))
        if let iccp { body += chunk("ICCP", iccp) }
        for c in chunks { body += chunk(c.0, c.1) }
        if let exif { body += chunk("EXIF", exif) }
        return Data(Array("RIFF".utf8) + le32(body.count) + body)
    }

    /// A PNG with `chunks` inserted right after IHDR.
    static func pngInserting(_ chunks: [[UInt8]], into png: Data) -> Data {
        let b = [UInt8](png)
        return Data(Array(b[0..<33]) + chunks.joined() + Array(b[33...]))
    }

    // MARK: Pictures

    /// Four quadrants of distinct colours over a soft gradient (asymmetric under every
    /// orientation), `rgb8`.
    static func quadrants(width: Int, height: Int) -> Bitmap {
        Bitmap(width: width, height: height, format: .rgb8) { dst in
            for y in 0..<height {
                for x in 0..<width {
                    let q = (x < width / 2 ? 0 : 1) + (y < height / 2 ? 0 : 2)
                    let base: (Int, Int, Int) = [(220, 40, 40), (40, 200, 40), (40, 40, 220), (230, 220, 40)][q]
                    let shade = (x + y) * 20 / max(width + height, 1)
                    let i = (y * width + x) * 3
                    dst[i] = UInt8(clamping: base.0 - shade)
                    dst[i + 1] = UInt8(clamping: base.1 - shade)
                    dst[i + 2] = UInt8(clamping: base.2 - shade)
                }
            }
        }
    }

    /// The upright image for EXIF orientation `o` of `s`, from the EXIF definitions (TIFF 6.0
    /// tag 274), independent of `ImageOrientation`.
    static func upright(_ s: Bitmap, orientation o: Int) -> Bitmap {
        let W = s.width, H = s.height, c = s.format.channels
        let swaps = o >= 5
        let w = swaps ? H : W, h = swaps ? W : H
        var out = [UInt8](repeating: 0, count: w * h * c)
        for y in 0..<h {
            for x in 0..<w {
                let (sx, sy): (Int, Int)
                switch o {
                case 2: (sx, sy) = (W - 1 - x, y)
                case 3: (sx, sy) = (W - 1 - x, H - 1 - y)
                case 4: (sx, sy) = (x, H - 1 - y)
                case 5: (sx, sy) = (y, x)
                case 6: (sx, sy) = (y, H - 1 - x)
                case 7: (sx, sy) = (W - 1 - y, H - 1 - x)
                case 8: (sx, sy) = (W - 1 - y, x)
                default: (sx, sy) = (x, y)
                }
                for k in 0..<c { out[(y * w + x) * c + k] = s.pixels[(sy * W + sx) * c + k] }
            }
        }
        return Bitmap(width: w, height: h, format: s.format, pixels: out)
    }

    /// The output size the contract describes, computed here: never upscaled unless allowed,
    /// long side exactly n for maxPixelSize, fill cropped to the target.
    static func expectedSize(_ w: Int, _ h: Int, _ size: DecodeSize?, upscale: Bool) -> (Int, Int) {
        func r(_ v: Double) -> Int { max(1, Int(v.rounded())) }
        switch size {
        case nil: return (w, h)
        case .maxPixelSize(let n):
            let s = Double(n) / Double(max(w, h))
            if s >= 1 && !upscale { return (w, h) }
            return w >= h ? (n, r(Double(h) * s)) : (r(Double(w) * s), n)
        case .size(let tw, let th, let mode):
            let sx = Double(tw) / Double(w), sy = Double(th) / Double(h)
            var s = mode == .aspectFit ? min(sx, sy) : max(sx, sy)
            if !upscale { s = min(s, 1) }
            let sw = r(Double(w) * s), sh = r(Double(h) * s)
            return mode == .aspectFit ? (sw, sh) : (min(tw, sw), min(th, sh))
        }
    }

    static func encoded(_ image: Bitmap, _ format: String) throws -> Data {
        switch format {
        case "jpeg": return try image.encode(as: .jpeg(quality: 95))
        case "png": return try image.encode(as: .png)
        default: return try image.encode(as: .webp(lossless: true))
        }
    }

    static func error(_ body: () throws(ImagingError) -> Void) -> ImagingError? {
        do { try body(); return nil } catch { return error }
    }
}

// MARK: - Sizes

@Suite(.timeLimit(.minutes(1)))
struct ImagingSizeContractTests {
    static let shapes: [(Int, Int)] = [(1001, 667), (667, 1001), (17, 13), (1, 300), (300, 1), (10000, 1), (1, 9999)]
    static let sizes: [DecodeSize] = [
        .maxPixelSize(1), .maxPixelSize(7), .maxPixelSize(100), .maxPixelSize(255), .maxPixelSize(20000),
        .size(width: 100, height: 100, contentMode: .aspectFit), .size(width: 100, height: 100, contentMode: .aspectFill),
        .size(width: 33, height: 77, contentMode: .aspectFill), .size(width: 77, height: 33, contentMode: .aspectFit),
        .size(width: 1, height: 1, contentMode: .aspectFill), .size(width: 5000, height: 5000, contentMode: .aspectFill),
    ]

    /// Output dimensions follow the contract for every format, odd and extreme shapes, and the
    /// three formats agree on them; `outputSize` predicts them.
    @Test(arguments: shapes.indices)
    func outputSizeIsTheContractsAndTheSameForEveryFormat(shape: Int) throws {
        let (w, h) = Self.shapes[shape]
        let picture = CorpusJPEG.photoLike(width: w, height: h)
        let files = try ["jpeg", "png", "webp"].map { try Contract.encoded(picture, $0) }
        for size in Self.sizes {
            let options = DecodeOptions(size: size)
            let expected = Contract.expectedSize(w, h, size, upscale: false)
            let predicted = ImageDecoder.outputSize(width: w, height: h, options: options)
            #expect(predicted == expected, "outputSize \(w)x\(h) \(size)")
            for (name, data) in zip(["jpeg", "png", "webp"], files) {
                let out = try ImageDecoder.decode(data, options: options).bitmap
                #expect((out.width, out.height) == expected, "\(name) \(w)x\(h) \(size)")
            }
        }
    }

    /// The same picture through JPEG's DCT scaling, PNG's block averaging and WebP's scaled
    /// decode comes out nearly the same, and close to a full decode resampled.
    @Test(arguments: [(1001, 667), (333, 1000)])
    func scaledPathsAgreeOnPixels(w: Int, h: Int) throws {
        let picture = CorpusJPEG.photoLike(width: w, height: h)
        for size: DecodeSize in [.maxPixelSize(256), .maxPixelSize(99), .size(width: 120, height: 120, contentMode: .aspectFill)] {
            let options = DecodeOptions(size: size)
            let reference = try ImageDecoder.resize(picture, options: options)
            for format in ["jpeg", "png", "webp"] {
                let out = try ImageDecoder.decode(Contract.encoded(picture, format), options: options).bitmap
                let diff = CorpusJPEG.meanAbsoluteDifference(out, reference)
                #expect(diff <= (format == "jpeg" ? 3.0 : 1.5), "\(format) \(w)x\(h) \(size): mean diff \(diff)")
            }
        }
    }

    /// A horizontal ramp keeps its geometry: each output column shows the source value at the
    /// column's centre (no half-pixel shift from the codec's reduction), in every format.
    @Test func reducedDecodesAreNotShifted() throws {
        let w = 1203, h = 401
        let ramp = Bitmap(width: w, height: h, format: .rgb8) { dst in
            for y in 0..<h { for x in 0..<w { let v = UInt8(x * 255 / (w - 1)); for k in 0..<3 { dst[(y * w + x) * 3 + k] = v } } }
        }
        for format in ["jpeg", "png", "webp"] {
            let out = try ImageDecoder.decode(Contract.encoded(ramp, format), options: DecodeOptions(size: .maxPixelSize(150))).bitmap
            #expect(out.width == 150)
            var worst = 0.0
            for x in 3..<(out.width - 3) {
                let sourceX = (Double(x) + 0.5) * Double(w) / Double(out.width) - 0.5
                let expected = sourceX * 255 / Double(w - 1)
                worst = max(worst, abs(Double(out.rgba(x: x, y: out.height / 2).r) - expected))
            }
            #expect(worst <= 3, "\(format): worst column error \(worst) levels")
        }
    }

    @Test func neverUpscalesUnlessAllowedAndThenExactly() throws {
        let small = CorpusJPEG.photoLike(width: 17, height: 13)
        for format in ["jpeg", "png", "webp"] {
            let data = try Contract.encoded(small, format)
            for size in Self.sizes {
                let plain = try ImageDecoder.decode(data, options: DecodeOptions(size: size)).bitmap
                #expect(plain.width <= 17 && plain.height <= 13)
                let want = Contract.expectedSize(17, 13, size, upscale: true)
                #expect(ImageDecoder.outputSize(width: 17, height: 13, options: DecodeOptions(size: size, allowsUpscaling: true)) == want)
                if want.0 * want.1 > 100_000_000 || want.0 * want.1 < 2_000_000 {} else { continue }  // debug-build time
                if want.0 * want.1 > 100_000_000 {
                    // An upscaled output is held to the pixel limit.
                    #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(data, options: DecodeOptions(size: size, allowsUpscaling: true)) }
                        == .tooLarge(width: want.0, height: want.1))
                    continue
                }
                let up = try ImageDecoder.decode(data, options: DecodeOptions(size: size, allowsUpscaling: true)).bitmap
                #expect((up.width, up.height) == want, "\(format) \(size)")
            }
        }
        // A 100×100 image asked for at 256 stays 100×100 (issue 2).
        let hundred = try CorpusJPEG.photoLike(width: 100, height: 100).encode(as: .jpeg(quality: 90))
        let out = try ImageDecoder.decode(hundred, options: DecodeOptions(size: .maxPixelSize(256)))
        #expect((out.bitmap.width, out.bitmap.height) == (100, 100))
    }

    /// Fill crops the centre: a 300×100 image in three vertical bands filled into 50×50 shows
    /// only the middle band.
    @Test func fillCropIsCentred() throws {
        let bands = Bitmap(width: 300, height: 100, format: .rgb8) { dst in
            for y in 0..<100 { for x in 0..<300 {
                let c: [UInt8] = x < 100 ? [255, 0, 0] : x < 200 ? [0, 255, 0] : [0, 0, 255]
                for k in 0..<3 { dst[(y * 300 + x) * 3 + k] = c[k] }
            } }
        }
        let tall = Contract.upright(bands, orientation: 6)  // 100×300, bands now horizontal
        for (picture, name) in [(bands, "wide"), (tall, "tall")] {
            for format in ["jpeg", "png", "webp"] {
                let out = try ImageDecoder.decode(
                    Contract.encoded(picture, format),
                    options: DecodeOptions(size: .size(width: 50, height: 50, contentMode: .aspectFill))).bitmap
                #expect((out.width, out.height) == (50, 50))
                for (x, y) in [(5, 5), (44, 44), (25, 25), (5, 44), (44, 5)] {
                    let p = out.rgba(x: x, y: y)
                    #expect(p.g > 200 && p.r < 40 && p.b < 40, "\(name) \(format) (\(x),\(y)) = \(p)")
                }
            }
        }
    }

    /// Preshrink: the codec's output is at least `factor` × target on both sides, and for JPEG
    /// it is the most reduced DCT scale that still does so.
    static let preshrinkFiles: Result<[(String, Data)], any Error> = Result {
        let picture = CorpusJPEG.photoLike(width: 1024, height: 768)
        return try ["jpeg", "png", "webp"].map { ($0, try Contract.encoded(picture, $0)) }
    }

    @Test(arguments: [Preshrink.fastest, .balanced, .sharpest])
    func preshrinkRule(preshrink: Preshrink) throws {
        let w = 1024, h = 768
        for target in [128, 150, 50, 500] {
            for (format, data) in try Self.preshrinkFiles.get() {
                var options = DecodeOptions(size: .maxPixelSize(target))
                options.preshrink = preshrink
                let decoded = try ImageDecoder.decode(data, options: options)
                let s = decoded.statistics
                let needW = Double(target) * preshrink.factor, needH = Double(target * h / w) * preshrink.factor
                #expect(Double(s.codecWidth) >= min(Double(w), needW.rounded(.down)) && Double(s.codecHeight) >= min(Double(h), needH.rounded(.down)),
                        "\(format) \(target) \(preshrink.factor): codec \(s.codecWidth)x\(s.codecHeight)")
                #expect((decoded.bitmap.width, decoded.bitmap.height) == Contract.expectedSize(w, h, .maxPixelSize(target), upscale: false))
                if format == "jpeg" {
                    // The next smaller n/8 scale would not cover the need.
                    let n = Int((Double(s.codecWidth) * 8 / Double(w)).rounded())
                    if n > 1 {
                        let smaller = Double(w * (n - 1)) / 8
                        #expect(smaller.rounded(.up) < min(Double(w), needW), "jpeg \(target) \(preshrink.factor): \(n)/8 chosen")
                    }
                }
                if format == "png" || format == "webp" {
                    #expect(s.codecWidth < w || needW * 0.999 > Double(w) / 2, "\(format) \(target): no pre-shrink at all")
                }
            }
        }
    }

    /// The example of DecodingAndDownsampling.md: a 2048×1536 JPEG at 256 is decoded at 1/8,
    /// 256×192; sharpest keeps at least twice the target.
    @Test func documentedJPEGExample() throws {
        let data = try CorpusJPEG.photoLike(width: 2048, height: 1536).encode(as: .jpeg(quality: 90))
        let fast = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(256)))
        #expect((fast.statistics.codecWidth, fast.statistics.codecHeight) == (256, 192))
        #expect(fast.statistics.codecScale == 1.0 / 8)
        var sharper = DecodeOptions(size: .maxPixelSize(256))
        sharper.preshrink = .sharpest
        let sharp = try ImageDecoder.decode(data, options: sharper)
        #expect(sharp.statistics.codecScale >= 2 * 256 / 2048)
        #expect((sharp.bitmap.width, sharp.bitmap.height) == (256, 192))
    }
}

// MARK: - Orientation

@Suite(.timeLimit(.minutes(1)))
struct ImagingOrientationContractTests {
    static let stored = Contract.quadrants(width: 64, height: 40)

    static func file(_ format: String, orientation o: Int, picture: Bitmap = stored) throws -> Data {
        let tiff = Contract.orientationTIFF(o)
        switch format {
        case "jpeg":
            return CorpusJPEG.inserting([(0xE1, Array("Exif".utf8) + [0, 0] + tiff)], into: try picture.encode(as: .jpeg(quality: 100)))
        case "png":
            return Contract.pngInserting([SyntheticPNG.chunk("eXIf", tiff)], into: try picture.encode(as: .png))
        default:
            return Contract.extendedWebP(try picture.encode(as: .webp(lossless: true)), width: picture.width, height: picture.height, exif: tiff)
        }
    }

    static let cases: [(String, Int)] = ["jpeg", "png", "webp"].flatMap { f in (1...8).map { (f, $0) } }

    @Test(arguments: cases)
    func decodesUpright(format: String, orientation o: Int) throws {
        let data = try Self.file(format, orientation: o)
        let expected = Contract.upright(Self.stored, orientation: o)
        let info = try ImageDecoder.info(for: data)
        #expect(info.orientation.rawValue == o, "\(format) \(o)")
        #expect((info.width, info.height) == (expected.width, expected.height))
        let out = try ImageDecoder.decode(data).bitmap
        #expect((out.width, out.height) == (expected.width, expected.height), "\(format) \(o)")
        let diff = CorpusJPEG.meanAbsoluteDifference(out, expected)
        #expect(diff <= (format == "jpeg" ? 3 : 0), "\(format) orientation \(o): mean diff \(diff)")
        // Off: the stored pixels, stored size.
        let raw = try ImageDecoder.decode(data, options: DecodeOptions(appliesOrientation: false)).bitmap
        #expect(CorpusJPEG.meanAbsoluteDifference(raw, Self.stored) <= (format == "jpeg" ? 3 : 0), "\(format) \(o) unoriented")
    }

    /// A rotated image's maxPixelSize and fill apply to its upright size.
    @Test(arguments: cases)
    func sizesApplyToTheUprightImage(format: String, orientation o: Int) throws {
        let big = Contract.quadrants(width: 400, height: 200)
        let data = try Self.file(format, orientation: o, picture: big)
        let upright = Contract.upright(big, orientation: o)
        for size: DecodeSize in [.maxPixelSize(50), .size(width: 40, height: 60, contentMode: .aspectFill), .size(width: 90, height: 30, contentMode: .aspectFit)] {
            let out = try ImageDecoder.decode(data, options: DecodeOptions(size: size)).bitmap
            let expected = Contract.expectedSize(upright.width, upright.height, size, upscale: false)
            #expect((out.width, out.height) == expected, "\(format) \(o) \(size)")
            let reference = try ImageDecoder.resize(upright, options: DecodeOptions(size: size))
            let diff = CorpusJPEG.meanAbsoluteDifference(out, reference)
            #expect(diff <= 4, "\(format) \(o) \(size): mean diff \(diff)")
        }
    }
}
