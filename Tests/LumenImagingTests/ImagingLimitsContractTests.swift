import Foundation
import Testing
@testable import LumenImaging

// Limits, errors, encoders and processors: contract tests (issue 2, DESIGN.md §4,
// DecodingAndDownsampling.md).

enum Hostile {
    /// A PNG whose IHDR declares `width`×`height` (RGB) followed by a tiny IDAT.
    static func png(width: Int, height: Int) -> Data {
        SyntheticPNG.make(width: width, height: height, colorType: 2, zlib: SyntheticPNG.zlibStored([0, 1, 2, 3]))
    }

    /// `jpeg` with its SOF's size replaced.
    static func jpeg(_ jpeg: Data, width: Int, height: Int) -> Data {
        var b = [UInt8](jpeg)
        var p = 2
        while p + 9 < b.count {
            let marker = b[p + 1]
            let length = Int(b[p + 2]) << 8 | Int(b[p + 3])
            if marker == 0xC0 || marker == 0xC2 {
                b[p + 5] = UInt8(height >> 8); b[p + 6] = UInt8(height & 0xFF)
                b[p + 7] = UInt8(width >> 8); b[p + 8] = UInt8(width & 0xFF)
                break
            }
            p += 2 + length
        }
        return Data(b)
    }

    /// A GIF with a `width`×`height` logical screen and one 1×1 frame.
    static func gif(width: Int, height: Int) -> Data {
        var b = [UInt8](SyntheticGIF.make(width: 1, height: 1, colors: (0..<256).map { (UInt8($0), 0, 0) },
                                           frames: [.init(width: 1, height: 1, indices: [5])]))
        b[6] = UInt8(width & 0xFF); b[7] = UInt8(width >> 8); b[8] = UInt8(height & 0xFF); b[9] = UInt8(height >> 8)
        return Data(b)
    }

    /// A lossless WebP whose VP8L header declares `width`×`height` (at most 16384), with junk
    /// after the header.
    static func webp(width: Int, height: Int) -> Data {
        let bits = UInt32(width - 1) | UInt32(height - 1) << 14
        var vp8l: [UInt8] = [0x2F, UInt8(bits & 0xFF), UInt8(bits >> 8 & 0xFF), UInt8(bits >> 16 & 0xFF), UInt8(bits >> 24 & 0xFF)]
        vp8l += [UInt8](repeating: 0, count: 32)
        var body = Array("WEBP".utf8) + Array("VP8L".utf8) + Contract.le32(vp8l.count) + vp8l
        if body.count & 1 == 1 { body.append(0) }
        return Data(Array("RIFF".utf8) + Contract.le32(body.count) + body)
    }

    /// An animated WebP whose VP8X canvas is `width`×`height` with one small frame.
    static func animatedWebP(width: Int, height: Int) throws -> Data {
        let frame = Contract.webpChunks(try Bitmap(width: 2, height: 2, format: .rgba8, pixels: [UInt8](repeating: 200, count: 16))
            .encode(as: .webp(lossless: true))).filter { $0.0 != "VP8X" }
        var anmf = Contract.le24(0) + Contract.le24(0) + Contract.le24(1) + Contract.le24(1) + Contract.le24(100) + [0]
        for c in frame { anmf += Array(c.0.utf8) + Contract.le32(c.1.count) + c.1 + (c.1.count & 1 == 1 ? [0] : []) }
        var body = Array("WEBP".utf8)
        body += Array("VP8X".utf8) + Contract.le32(10) + [0x12, 0, 0, 0] + Contract.le24(width - 1) + Contract.le24(height - 1)
        body += Array("ANIM".utf8) + Contract.le32(6) + [0, 0, 0, 0, 0, 0]
        body += Array("ANMF".utf8) + Contract.le32(anmf.count) + anmf + (anmf.count & 1 == 1 ? [0] : [])
        return Data(Array("RIFF".utf8) + Contract.le32(body.count) + body)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ImagingLimitsContractTests {
    /// Declared sizes over the limit are refused from the header, fast, without allocating.
    @Test func hugeDeclaredSizesAreRefusedFromTheHeader() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 16, height: 16).encode(as: .jpeg())
        let cases: [(String, Data, (Int, Int))] = [
            ("png", Hostile.png(width: 60000, height: 60000), (60000, 60000)),
            ("jpeg", Hostile.jpeg(jpeg, width: 60000, height: 60000), (60000, 60000)),
            ("gif", Hostile.gif(width: 65535, height: 65535), (65535, 65535)),
            ("webp", Hostile.webp(width: 16384, height: 16384), (16384, 16384)),
            ("webp-anim", try Hostile.animatedWebP(width: 60000, height: 60000), (60000, 60000)),
        ]
        let before = CorpusPNG.peakRSS()
        for (name, data, size) in cases {
            let start = ContinuousClock.now
            for options in [DecodeOptions(), DecodeOptions(size: .maxPixelSize(64))] {
                let error = Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(data, options: options) }
                #expect(error == .tooLarge(width: size.0, height: size.1), "\(name): \(String(describing: error))")
                let frames = Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decodeFrames(data, options: options) }
                #expect(frames == .tooLarge(width: size.0, height: size.1), "\(name) frames: \(String(describing: frames))")
            }
            #expect(ContinuousClock.now - start < .milliseconds(500), "\(name) took \(ContinuousClock.now - start)")
        }
        #expect(CorpusPNG.peakRSS() - before < 64 << 20, "peak RSS grew by \((CorpusPNG.peakRSS() - before) >> 20) MB")
        // The limit is configurable, and inclusive.
        let png = try CorpusJPEG.photoLike(width: 100, height: 50).encode(as: .png)
        #expect(try ImageDecoder.decode(png, options: DecodeOptions(maximumPixelCount: 5000)).bitmap.width == 100)
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(png, options: DecodeOptions(maximumPixelCount: 4999)) } == .tooLarge(width: 100, height: 50))
        // A thumbnail of an image above the limit is refused too.
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(png, options: DecodeOptions(size: .maxPixelSize(10), maximumPixelCount: 4999)) } == .tooLarge(width: 100, height: 50))
    }

    /// Many tiny frames on a large canvas: frames × area is over the limit, refused before the
    /// composited frames (each a full canvas) are allocated.
    @Test func animationFrameBombsAreRefused() throws {
        // Animated WebP: the demuxer knows the frame count up front.
        let webpBefore = CorpusPNG.peakRSS()
        let webp = try Self.manyFrameWebP(frames: 200, canvas: 1000)
        let webpError = Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decodeFrames(webp) }
        #expect(webpError == .tooLarge(width: 1000, height: 1000), "\(String(describing: webpError))")
        #expect(CorpusPNG.peakRSS() - webpBefore < 200 << 20, "webp: peak RSS grew by \((CorpusPNG.peakRSS() - webpBefore) >> 20) MB")
        let frames = (0..<200).map { _ in SyntheticGIF.Frame(width: 1, height: 1, indices: [3], delay: 1, disposal: 1) }
        var gif = [UInt8](SyntheticGIF.make(width: 1, height: 1, colors: (0..<256).map { (UInt8($0), 0, 0) }, frames: frames))
        gif[6] = 0xE8; gif[7] = 0x03; gif[8] = 0xE8; gif[9] = 0x03  // 1000×1000 canvas
        let before = CorpusPNG.peakRSS()
        let start = ContinuousClock.now
        let error = Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decodeFrames(Data(gif)) }
        #expect(error == .tooLarge(width: 1000, height: 1000), "\(String(describing: error))")
        #expect(ContinuousClock.now - start < .seconds(2))
        let grown = CorpusPNG.peakRSS() - before
        #expect(grown < 200 << 20, "peak RSS grew by \(grown >> 20) MB")
        // The frames are counted from the blocks, before any is decompressed.
        #expect(try ImageDecoder.info(for: Data(gif)).frameCount == 200)
        // The first frame alone is within the limit.
        #expect(try ImageDecoder.decode(Data(gif)).bitmap.width == 1000)
    }

    static func manyFrameWebP(frames: Int, canvas: Int) throws -> Data {
        let frame = Contract.webpChunks(try Bitmap(width: 1, height: 1, format: .rgba8, pixels: [9, 9, 9, 255])
            .encode(as: .webp(lossless: true))).filter { $0.0 != "VP8X" }
        var anmf = Contract.le24(0) + Contract.le24(0) + Contract.le24(0) + Contract.le24(0) + Contract.le24(10) + [0]
        for c in frame { anmf += Array(c.0.utf8) + Contract.le32(c.1.count) + c.1 + (c.1.count & 1 == 1 ? [0] : []) }
        let chunk = Array("ANMF".utf8) + Contract.le32(anmf.count) + anmf + (anmf.count & 1 == 1 ? [0] : [])
        var body = Array("WEBP".utf8)
        body += Array("VP8X".utf8) + Contract.le32(10) + [0x12, 0, 0, 0] + Contract.le24(canvas - 1) + Contract.le24(canvas - 1)
        body += Array("ANIM".utf8) + Contract.le32(6) + [0, 0, 0, 0, 0, 0]
        for _ in 0..<frames { body += chunk }
        return Data(Array("RIFF".utf8) + Contract.le32(body.count) + body)
    }

    /// A highly compressible bomb under its declared size: refused from the header with a small limit.
    @Test func compressedZerosAreRefusedByTheLimit() throws {
        let zeros = Bitmap(width: 3000, height: 3000, format: .rgb8, pixels: [UInt8](repeating: 0, count: 3000 * 3000 * 3))
        for (name, data) in [("png", try zeros.encode(as: .png)), ("webp", try zeros.encode(as: .webp(lossless: true))),
                             ("jpeg", try zeros.encode(as: .jpeg(quality: 50)))] {
            #expect(data.count < 200_000, "\(name) \(data.count)")
            let error = Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(data, options: DecodeOptions(maximumPixelCount: 1_000_000)) }
            #expect(error == .tooLarge(width: 3000, height: 3000), "\(name)")
        }
    }

    @Test func garbageIsATypedError() throws {
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(Data()) } == .unsupportedFormat(nil))
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(Data([0xFF])) } == .unsupportedFormat(nil))
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.info(for: Data()) } == .unsupportedFormat(nil))
        var rng = SeededRandom(seed: 7)
        for n in [2, 3, 16, 1000] {
            let bytes = Data((0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) })
            #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(bytes) } == .unsupportedFormat(nil))
        }
        // Magic bytes and nothing else: an error, never a crash.
        for magic: [UInt8] in [[0xFF, 0xD8, 0xFF], [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], Array("GIF89a".utf8),
                               Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBP".utf8)] {
            #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(Data(magic)) } != nil)
        }
        let message = ImagingError.unsupportedFormat(nil).description
        #expect(message == "unsupportedFormat: not a JPEG, PNG, WebP, GIF, HEIC or AVIF image")
    }

    #if !LUMEN_HEIF
    /// A build without libheif (the default) still recognises HEIC and AVIF: they fail as
    /// `unsupportedFormat` naming the format, and the message says that the support is not
    /// built in and how to build it, instead of calling the file none of the formats.
    @Test func heifWithoutLibheifSaysItIsNotBuiltIn() throws {
        let avif = try WebPFixtures.corpus("avif_hopper.avif")
        let heic = Data(SniffingTests.ftyp(major: "heic", compatible: ["mif1", "heic"]))
        for (data, format) in [(avif, ImageFormat.avif), (heic, .heic)] {
            let error = Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decode(data) }
            #expect(error == .unsupportedFormat(format))
            #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.info(for: data) } == .unsupportedFormat(format))
            let message = error.map { "\($0)" } ?? ""
            #expect(message.hasPrefix("unsupportedFormat: \(format.rawValue.uppercased()), "), "\(message)")
            #expect(message.contains("HEIC/AVIF support is not built in") && message.contains("LUMEN_HEIF=1"), "\(message)")
        }
        let encoding = Contract.error { () throws(ImagingError) in _ = try SyntheticImages.pattern(width: 4, height: 4, format: .rgb8).encode(as: .avif()) }
        #expect(encoding == .unsupportedFormat(.avif))
    }
    #endif

    static func files() throws -> [(String, Data)] {
        let photo = CorpusJPEG.photoLike(width: 160, height: 120)
        let alpha = SyntheticImages.pattern(width: 160, height: 120, format: .rgba8)
        let indices = (0..<(160 * 120)).map { UInt8($0 % 200) }
        return [
            ("jpeg-baseline", try photo.encode(as: .jpeg(quality: 90))),
            ("jpeg-progressive", try photo.encode(as: .jpeg(quality: 90, progressive: true))),
            ("png", try photo.encode(as: .png)),
            ("png-alpha", try alpha.encode(as: .png)),
            ("webp-lossy", try photo.encode(as: .webp(quality: 80))),
            ("webp-lossy-alpha", try alpha.encode(as: .webp(quality: 80))),
            ("webp-lossless", try alpha.encode(as: .webp(lossless: true))),
            ("gif", SyntheticGIF.make(width: 160, height: 120, colors: (0..<256).map { (UInt8($0), UInt8(255 - $0), 7) },
                                      frames: [.init(width: 160, height: 120, indices: indices)])),
        ]
    }

    /// Cut at every 10 %: a typed error (a baseline JPEG: `truncated`), or for a progressive
    /// JPEG a full-frame preview marked partial; never an image passed off as complete.
    @Test func truncatedFilesNeverDecodeAsComplete() throws {
        for (name, data) in try Self.files() {
            for tenth in 1...9 {
                let cut = data.prefix(data.count * tenth / 10)
                do {
                    let decoded = try ImageDecoder.decode(cut)
                    #expect(decoded.isPartial, "\(name) cut at \(tenth * 10)% decoded as complete")
                    #expect(name == "jpeg-progressive", "\(name) cut at \(tenth * 10)%: only a progressive JPEG gives a preview")
                    #expect((decoded.bitmap.width, decoded.bitmap.height) == (160, 120))
                } catch {
                    // Errors say what happened: every cut file is `truncated`.
                    #expect(error == .truncated, "\(name) at \(tenth * 10)%: \(error)")
                }
                // Sized decodes follow the same rule.
                if let sized = try? ImageDecoder.decode(cut, options: DecodeOptions(size: .maxPixelSize(40))) {
                    #expect(sized.isPartial && name == "jpeg-progressive", "\(name) at \(tenth * 10)% sized decode passed as complete")
                }
            }
        }
    }

    /// A progressive JPEG cut after its first scans is a partial preview at full frame.
    @Test func truncatedProgressiveJPEGIsAPartialPreview() throws {
        let data = try CorpusJPEG.photoLike(width: 320, height: 240).encode(as: .jpeg(quality: 90, progressive: true))
        let full = try ImageDecoder.decode(data).bitmap
        var previews = 0
        for tenth in 3...9 {
            guard let decoded = try? ImageDecoder.decode(data.prefix(data.count * tenth / 10)) else { continue }
            previews += 1
            #expect(decoded.isPartial)
            #expect(CorpusJPEG.meanAbsoluteDifference(decoded.bitmap, full) < 20, "\(tenth * 10)%")
        }
        #expect(previews >= 3)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ImagingEncoderContractTests {
    @Test func jpegQualityAndProgressive() throws {
        let photo = CorpusJPEG.photoLike(width: 256, height: 192)
        let high = try photo.encode(as: .jpeg(quality: 98))
        let low = try photo.encode(as: .jpeg(quality: 10))
        #expect(low.count < high.count)
        let dh = CorpusJPEG.meanAbsoluteDifference(try ImageDecoder.decode(high).bitmap, photo)
        let dl = CorpusJPEG.meanAbsoluteDifference(try ImageDecoder.decode(low).bitmap, photo)
        #expect(dh < 2.5 && dl > dh, "q98 \(dh), q10 \(dl)")
        func hasMarker(_ d: Data, _ m: UInt8) -> Bool { let b = [UInt8](d); return (0..<(b.count - 1)).contains { b[$0] == 0xFF && b[$0 + 1] == m } }
        let progressive = try photo.encode(as: .jpeg(quality: 98, progressive: true))
        #expect(hasMarker(progressive, 0xC2) && !hasMarker(progressive, 0xC0))
        #expect(hasMarker(high, 0xC0) && !hasMarker(high, 0xC2))
        #expect(CorpusJPEG.meanAbsoluteDifference(try ImageDecoder.decode(progressive).bitmap, photo) < 2.5)
        // Alpha is dropped.
        let rgba = SyntheticImages.pattern(width: 30, height: 20, format: .rgba8)
        #expect(try ImageDecoder.decode(rgba.encode(as: .jpeg())).bitmap.format == .rgb8)
    }

    @Test func losslessRoundTripsAreExact() throws {
        var rgba = SyntheticImages.pattern(width: 97, height: 61, format: .rgba8)
        // Colour under fully transparent pixels is data too.
        rgba.withUnsafeMutablePixels { p in for i in stride(from: 0, to: p.count, by: 4) where p[i + 3] == 0 { p[i] = 77; p[i + 1] = 155; p[i + 2] = 233 } }
        let rgb = SyntheticImages.pattern(width: 97, height: 61, format: .rgb8)
        #expect(try ImageDecoder.decode(rgba.encode(as: .png)).bitmap == rgba)
        #expect(try ImageDecoder.decode(rgb.encode(as: .png)).bitmap == rgb)
        #expect(try ImageDecoder.decode(rgb.encode(as: .webp(lossless: true))).bitmap == rgb)
        let webp = try ImageDecoder.decode(rgba.encode(as: .webp(lossless: true))).bitmap
        #expect(webp.format == .rgba8)
        let visible = zip(webp.pixels, rgba.pixels).enumerated().allSatisfy { i, pair in rgba.pixels[i / 4 * 4 + 3] == 0 || pair.0 == pair.1 }
        #expect(visible, "WebP lossless changed visible pixels")
        #expect(webp == rgba, "WebP lossless keeps the RGB under fully transparent pixels")
    }

    @Test func lossyWebPRoundTrips() throws {
        let photo = CorpusJPEG.photoLike(width: 200, height: 150)
        let d = CorpusJPEG.meanAbsoluteDifference(try ImageDecoder.decode(photo.encode(as: .webp(quality: 90))).bitmap, photo)
        #expect(d < 4, "\(d)")
        let low = try photo.encode(as: .webp(quality: 5)), high = try photo.encode(as: .webp(quality: 95))
        #expect(low.count < high.count)
    }

    @Test func tinyAndLargeImagesEncode() throws {
        for format in [PixelFormat.rgb8, .rgba8] {
            let one = Bitmap(width: 1, height: 1, format: format, pixels: format == .rgb8 ? [10, 200, 30] : [10, 200, 30, 128])
            for encoding: EncodingFormat in [.jpeg(), .jpeg(progressive: true), .png, .webp(), .webp(lossless: true)] {
                let out = try ImageDecoder.decode(one.encode(as: encoding)).bitmap
                #expect((out.width, out.height) == (1, 1), "\(encoding)")
            }
            #expect(try ImageDecoder.decode(one.encode(as: .png)).bitmap == one)
            #expect(try ImageDecoder.decode(one.encode(as: .webp(lossless: true))).bitmap == one)
        }
        let large = CorpusJPEG.photoLike(width: 1600, height: 1200)
        for encoding: EncodingFormat in [.jpeg(), .png, .webp()] {
            let info = try ImageDecoder.info(for: large.encode(as: encoding))
            #expect((info.width, info.height) == (1600, 1200))
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ImagingProcessorContractTests {
    static let all: [any ImageProcessing] = [
        ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFit),
        ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill),
        ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill, crop: true),
        ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill, crop: true, upscale: true),
        ImageProcessors.Resize(size: (100, 101), contentMode: .aspectFill),
        ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFit, filter: .allCases.first { $0 != .lanczos3 }!),
        ImageProcessors.Resize(width: 100), ImageProcessors.Resize(height: 100),
        ImageProcessors.Crop(x: 0, y: 0, width: 10, height: 10), ImageProcessors.Crop(x: 1, y: 0, width: 10, height: 10),
        ImageProcessors.Crop(x: 0, y: 0, width: 10, height: 11),
        ImageProcessors.Circle(), ImageProcessors.Circle(border: .init(color: .white, width: 2)),
        ImageProcessors.Circle(border: .init(color: .black, width: 2)), ImageProcessors.Circle(border: .init(color: .white, width: 3)),
        ImageProcessors.Circle(border: .init(color: .init(red: 255, green: 255, blue: 255, alpha: 128), width: 2)),
        ImageProcessors.RoundedCorners(radius: 8), ImageProcessors.RoundedCorners(radius: 8.5),
        ImageProcessors.RoundedCorners(radius: 8, border: .init(color: .white, width: 1)),
        ImageProcessors.GaussianBlur(radius: 0), ImageProcessors.GaussianBlur(radius: 2), ImageProcessors.GaussianBlur(radius: 2.0001),
        ImageProcessors.Grayscale(),
        ImageProcessors.Composition([]),
        ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.Circle()]),
        ImageProcessors.Composition([ImageProcessors.Circle(), ImageProcessors.Grayscale()]),
        ImageProcessors.Composition([ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.Circle()]), ImageProcessors.GaussianBlur(radius: 1)]),
        ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.Composition([ImageProcessors.Circle(), ImageProcessors.GaussianBlur(radius: 1)])]),
        ImageProcessors.Anonymous(id: "a") { $0 }, ImageProcessors.Anonymous(id: "b") { $0 },
    ]

    @Test func identifiersAreDistinctAndHashableIdentityMatchesParameters() {
        let ids = Self.all.map(\.identifier)
        #expect(Set(ids).count == ids.count, "duplicate identifiers: \(ids)")
        let hashes = Set(Self.all.map(\.hashableIdentifier))
        #expect(hashes.count == Self.all.count)
        // Equal parameters: equal identities, stable strings.
        #expect(ImageProcessors.GaussianBlur(radius: 2).identifier == ImageProcessors.GaussianBlur(radius: 2.0).identifier)
        #expect(ImageProcessors.Resize(maxPixelSize: 100).hashableIdentifier == ImageProcessors.Resize(maxPixelSize: 100).hashableIdentifier)
        #expect(ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.Circle()]).hashableIdentifier
            == ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.Circle()]).hashableIdentifier)
        #expect(ImageProcessors.Crop(x: 1, y: 2, width: 3, height: 4).identifier == "lumen.crop?x=1&y=2&width=3&height=4")
        // Different types never share a hashable identity.
        #expect(AnyHashable(ImageProcessors.Grayscale()) != ImageProcessors.Composition([ImageProcessors.Grayscale()]).hashableIdentifier)
    }

    /// Disk keys must not collide: a composition's identifier is unambiguous even for anonymous
    /// parts whose ids contain the separator.
    @Test func compositionIdentifierIsUnambiguous() {
        let two = ImageProcessors.Composition([ImageProcessors.Anonymous(id: "x") { $0 }, ImageProcessors.Anonymous(id: "y") { $0 }])
        let one = ImageProcessors.Composition([ImageProcessors.Anonymous(id: "x|y") { $0 }])
        #expect(two.hashableIdentifier != one.hashableIdentifier)
        #expect(two.identifier != one.identifier)
    }

    @Test func circleOfANonSquareImage() throws {
        let image = Contract.quadrants(width: 300, height: 200)
        let out = try ImageProcessors.Circle().process(image)
        #expect((out.width, out.height) == (200, 200))
        #expect(out.format == .rgba8)
        #expect(out.rgba(x: 0, y: 0).a == 0 && out.rgba(x: 199, y: 199).a == 0)
        let c = out.rgba(x: 100, y: 50), s = image.rgba(x: 150, y: 50)
        #expect((c.r, c.g, c.b, c.a) == (s.r, s.g, s.b, 255))
        // Anti-aliased: partial coverage along the edge.
        let partial = (0..<200).contains { y in (0..<200).contains { x in let a = out.rgba(x: x, y: y).a; return a > 0 && a < 255 } }
        #expect(partial)
        let tall = try ImageProcessors.Circle().process(Contract.quadrants(width: 7, height: 20))
        #expect((tall.width, tall.height) == (7, 7))
    }

    @Test func roundedCornersAreAntiAliased() throws {
        let image = CorpusJPEG.photoLike(width: 60, height: 40)
        let out = try ImageProcessors.RoundedCorners(radius: 10).process(image)
        #expect((out.width, out.height) == (60, 40) && out.format == .rgba8)
        #expect(out.rgba(x: 0, y: 0).a == 0 && out.rgba(x: 59, y: 39).a == 0)
        #expect(out.rgba(x: 30, y: 0).a == 255 && out.rgba(x: 30, y: 20).a == 255)
        let corner = (0..<10).flatMap { y in (0..<10).map { x in out.rgba(x: x, y: y).a } }
        #expect(corner.contains { $0 > 0 && $0 < 255 })
        let none = try ImageProcessors.RoundedCorners(radius: 0).process(image)
        #expect(none.converted(to: .rgb8) == image && none.pixels.enumerated().allSatisfy { $0.offset % 4 != 3 || $0.element == 255 })
    }

    @Test func blurAndGrayscale() throws {
        let image = CorpusJPEG.photoLike(width: 50, height: 40)
        #expect(try ImageProcessors.GaussianBlur(radius: 0).process(image) == image)
        let flat = SyntheticImages.flat(width: 30, height: 20, (200, 100, 50, 255), format: .rgb8)
        let blurred = try ImageProcessors.GaussianBlur(radius: 6).process(flat)
        #expect(zip(blurred.pixels, flat.pixels).allSatisfy { abs(Int($0) - Int($1)) <= 1 }, "a flat image stays flat")
        let b = try ImageProcessors.GaussianBlur(radius: 3).process(image)
        #expect((b.width, b.height, b.format) == (50, 40, .rgb8))
        #expect(b != image)
        let disc = SyntheticImages.disc(size: 40, radius: 12, color: (255, 255, 255), background: (0, 0, 0))
        let bd = try ImageProcessors.GaussianBlur(radius: 3).process(disc)
        var darkest = 255
        for y in 0..<40 { for x in 0..<40 { let p = bd.rgba(x: x, y: y); if p.a > 16 { darkest = min(darkest, Int(p.r)) } } }
        #expect(darkest >= 240, "blur darkens a transparent edge: \(darkest)")
        let gray = try ImageProcessors.Grayscale().process(SyntheticImages.pattern(width: 20, height: 10, format: .rgba8))
        #expect(gray.format == .rgba8)
        let px: [UInt8] = gray.pixels
        var allGray = true
        for i in 0..<200 where px[i * 4] != px[i * 4 + 1] || px[i * 4 + 1] != px[i * 4 + 2] { allGray = false }
        #expect(allGray)
    }

    @Test func cropOutOfBoundsIsATypedError() throws {
        let image = CorpusJPEG.photoLike(width: 50, height: 40)
        for crop in [ImageProcessors.Crop(x: 50, y: 0, width: 10, height: 10), ImageProcessors.Crop(x: -20, y: 0, width: 10, height: 10),
                     ImageProcessors.Crop(x: 0, y: 0, width: 0, height: 10), ImageProcessors.Crop(x: Int.max, y: 0, width: Int.max, height: 1)] {
            do {
                _ = try crop.process(image)
                Issue.record("\(crop.identifier) did not throw")
            } catch let error as ImagingError {
                if case .invalidArgument = error {} else { Issue.record("\(error)") }
            }
        }
        let inside = try ImageProcessors.Crop(x: 10, y: 5, width: 20, height: 10).process(image)
        #expect(inside == image.cropped(x: 10, y: 5, width: 20, height: 10))
        #expect((inside.width, inside.height) == (20, 10))
        #expect(inside.rgba(x: 0, y: 0) == image.rgba(x: 10, y: 5))
    }
}
