import Testing
import Foundation
import Synchronization
@testable import LumenImaging

/// WebP decoding against the corpus and synthetic images, scaled decoding, the encoder, and
/// hostile input.
@Suite(.timeLimit(.minutes(1)))
struct WebPCodecTests {
    // Thresholds for lossy-vs-reference comparisons. Measured with Pillow while writing these
    // tests: hopper.webp vs hopper.jpg differ by 3.8 per channel on average, flower.webp vs
    // flower.jpg by 2.1 (both pairs are the same picture, lossy-coded twice). Shifting hopper
    // by 4 px gives 33, an unrelated picture 79. A bound of 8 leaves room for decoder rounding
    // (fancy upsampling, IDCT) and still fails on any geometric or colour mistake.
    static let lossyBound = 8.0

    // MARK: Corpus

    @Test(arguments: [("hopper.webp", "hopper.jpg"), ("flower.webp", "flower.jpg")])
    func lossyCorpusFileMatchesItsJPEG(webp: String, jpeg: String) throws {
        let decoded = try ImageDecoder.decode(WebPFixtures.corpus(webp))
        let reference = try ImageDecoder.decode(WebPFixtures.corpus(jpeg))
        #expect(decoded.bitmap.format == .rgb8)
        #expect(decoded.bitmap.width == reference.bitmap.width)
        #expect(decoded.bitmap.height == reference.bitmap.height)
        #expect(!decoded.isPartial)
        let difference = WebPFixtures.meanAbsoluteDifference(decoded.bitmap, reference.bitmap.converted(to: .rgb8))
        #expect(difference < Self.lossyBound, "mean difference \(difference)")
    }

    /// transparent.webp and transparent.png are the same 200×150 picture: the WebP keeps the
    /// PNG's alpha exactly (Pillow: 20101 fully transparent pixels in both, alpha identical)
    /// and its colour lossily (7.9 per channel on visible pixels).
    @Test func transparentCorpusFileHasAlphaAndMatchesItsPNG() throws {
        let decoded = try ImageDecoder.decode(WebPFixtures.corpus("transparent.webp")).bitmap
        #expect(decoded.format == .rgba8)
        #expect(decoded.hasTransparentPixels)
        let info = try ImageDecoder.info(for: WebPFixtures.corpus("transparent.webp"))
        #expect(info.hasAlpha && info.width == 200 && info.height == 150)
        let reference = try ImageDecoder.decode(WebPFixtures.corpus("transparent.png")).bitmap
        #expect(decoded.width == reference.width && decoded.height == reference.height)
        let difference = WebPFixtures.visibleDifference(decoded, reference: reference.converted(to: .rgba8))
        #expect(difference.maxAlpha <= 1)
        #expect(difference.rgb < 12, "visible RGB difference \(difference.rgb)")
    }

    /// anim_frame1.webp is one frame from an animation, stored as a plain VP8 image; its size
    /// is read here from the VP8 frame header independently of libwebp.
    @Test func animationFrameCorpusFileDecodes() throws {
        let data = try WebPFixtures.corpus("anim_frame1.webp")
        #expect(String(decoding: data[12..<16], as: UTF8.self) == "VP8 ")
        let width = (Int(data[26]) | Int(data[27]) << 8) & 0x3FFF
        let height = (Int(data[28]) | Int(data[29]) << 8) & 0x3FFF
        let decoded = try ImageDecoder.decode(data).bitmap
        #expect(decoded.width == width && decoded.height == height)
        #expect(decoded.format == .rgb8)
        #expect(Set(decoded.pixels).count > 16, "a real picture, not a blank buffer")
    }

    @Test func truncatedCorpusFileIsTruncated() throws {
        let data = try WebPFixtures.corpus("hopper.webp")
        #expect(throws: ImagingError.truncated) { try ImageDecoder.decode(data.prefix(data.count / 2)) }
    }

    // MARK: Scaled decoding

    @Test func largeImageIsScaledWhileDecoding() throws {
        let source = WebPFixtures.picture(width: 2000, height: 2000)
        let data = try source.encode(as: .webp(quality: 90))
        let decoded = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(256)))
        #expect(decoded.bitmap.width == 256 && decoded.bitmap.height == 256)
        #expect(decoded.statistics.originalWidth == 2000)
        #expect(decoded.statistics.codecWidth < 2000 && decoded.statistics.codecHeight < 2000)
        #expect(decoded.statistics.codecWidth >= 256)
        // The smooth picture shrunk by area averaging stays close to the picture drawn at 256.
        let expected = WebPFixtures.picture(width: 256, height: 256)
        let difference = WebPFixtures.meanAbsoluteDifference(decoded.bitmap, expected)
        #expect(difference < Self.lossyBound, "mean difference \(difference)")
    }

    @Test func scaledDecodeKeepsAlphaWithoutDarkFringe() throws {
        let source = WebPFixtures.picture(width: 400, height: 300, alpha: true)
        let data = try source.encode(as: .webp(quality: 100, lossless: true))
        let decoded = try ImageDecoder.decode(data, options: DecodeOptions(size: .size(width: 100, height: 75, contentMode: .aspectFit)))
        #expect(decoded.bitmap.format == .rgba8)
        #expect(decoded.bitmap.width == 100 && decoded.bitmap.height == 75)
        #expect(decoded.statistics.codecWidth == 100)
        // Red ramps with x regardless of alpha; premultiplied scaling keeps it, a naive one
        // would pull red toward black where alpha is low.
        let expected = WebPFixtures.picture(width: 100, height: 75, alpha: true)
        let difference = WebPFixtures.visibleDifference(decoded.bitmap, reference: expected)
        #expect(difference.rgb < Self.lossyBound, "visible RGB difference \(difference.rgb)")
    }

    @Test func smallImageIsNotUpscaled() throws {
        let data = try WebPFixtures.picture(width: 100, height: 80).encode(as: .webp())
        let decoded = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(256)))
        #expect(decoded.bitmap.width == 100 && decoded.bitmap.height == 80)
        #expect(!decoded.statistics.isResampled)
    }

    @Test func scaledSizeCoversTheMinimumAndKeepsAspect() {
        #expect(WebPCodec.scaledSize(width: 2000, height: 1000, minimum: PixelSize(width: 256, height: 128))
            == PixelSize(width: 256, height: 128))
        #expect(WebPCodec.scaledSize(width: 2000, height: 1000, minimum: PixelSize(width: 100, height: 100))
            == PixelSize(width: 200, height: 100))
        #expect(WebPCodec.scaledSize(width: 300, height: 200, minimum: PixelSize(width: 300, height: 200)) == nil)
        #expect(WebPCodec.scaledSize(width: 300, height: 200, minimum: nil) == nil)
    }

    @Test func stillImageIsOneFrame() throws {
        let source = WebPFixtures.picture(width: 30, height: 20, alpha: true)
        let frames = try ImageDecoder.decodeFrames(source.encode(as: .webp(lossless: true)))
        #expect(frames.count == 1)
        #expect(frames.first?.bitmap == source)
    }

    /// Different images decoded on many threads at once give the same pixels as one by one:
    /// no C handle or buffer is shared between calls.
    @Test func concurrentDecodesAreIndependent() throws {
        let inputs = try (0..<8).map { phase in
            try WebPFixtures.picture(width: 120, height: 90, alpha: phase % 2 == 0, phase: phase)
                .encode(as: .webp(quality: 70, lossless: phase % 3 == 0))
        }
        let serial = try inputs.map { try ImageDecoder.decode($0, options: DecodeOptions(size: .maxPixelSize(50))).bitmap }
        let results = Mutex<[Int: Bitmap]>([:])
        DispatchQueue.concurrentPerform(iterations: inputs.count * 4) { i in
            let bitmap = try? ImageDecoder.decode(inputs[i % inputs.count], options: DecodeOptions(size: .maxPixelSize(50))).bitmap
            results.withLock { $0[i] = bitmap }
        }
        let parallel = results.withLock { $0 }
        #expect(parallel.count == inputs.count * 4)
        for (i, bitmap) in parallel { #expect(bitmap == serial[i % inputs.count], "run \(i)") }
    }

    // MARK: Encoder

    @Test(arguments: [false, true])
    func losslessRoundTripIsExact(alpha: Bool) throws {
        let source = WebPFixtures.picture(width: 97, height: 61, alpha: alpha)
        let data = try source.encode(as: .webp(quality: 75, lossless: true))
        #expect(ImageFormat(sniffing: data) == .webp)
        let decoded = try ImageDecoder.decode(data).bitmap
        #expect(decoded == source)
    }

    @Test(arguments: [false, true])
    func lossyRoundTripIsClose(alpha: Bool) throws {
        let source = WebPFixtures.picture(width: 160, height: 120, alpha: alpha)
        let data = try source.encode(as: .webp(quality: 90))
        let decoded = try ImageDecoder.decode(data).bitmap
        #expect(decoded.format == source.format)
        if alpha {
            let difference = WebPFixtures.visibleDifference(decoded, reference: source)
            #expect(difference.maxAlpha <= 2)
            #expect(difference.rgb < 4, "visible RGB difference \(difference.rgb)")
        } else {
            let difference = WebPFixtures.meanAbsoluteDifference(decoded, source)
            #expect(difference < 4, "mean difference \(difference)")
        }
        let small = try source.encode(as: .webp(quality: 10))
        #expect(small.count < data.count, "quality must matter")
    }

    @Test func oversizedImageIsAnEncodingError() throws {
        let wide = Bitmap(width: 16384, height: 1, format: .rgb8, pixels: [UInt8](repeating: 0, count: 16384 * 3))
        #expect {
            try wide.encode(as: .webp())
        } throws: { error in
            if case ImagingError.encodingFailed = error { return true }
            return false
        }
    }

    // MARK: EXIF

    /// A lossless WebP rewrapped in the extended format with an EXIF chunk saying "rotate 90°
    /// clockwise" (orientation 6), stored either as a bare TIFF block or after "Exif\0\0".
    @Test(arguments: [false, true])
    func exifChunkOrientationIsApplied(signaturePrefix: Bool) throws {
        let source = WebPFixtures.picture(width: 40, height: 24)
        let simple = try source.encode(as: .webp(lossless: true))
        var tiff: [UInt8] = Array("II*\0".utf8) + [8, 0, 0, 0]
        tiff += [1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0]
        let exif = (signaturePrefix ? Array("Exif\0\0".utf8) : []) + tiff
        let data = Self.extendedWebP(image: Array(simple[12...]), width: 40, height: 24, chunks: [("EXIF", exif)])

        let info = try ImageDecoder.info(for: data)
        #expect(info.orientation == .right)
        #expect(info.width == 24 && info.height == 40)
        let decoded = try ImageDecoder.decode(data).bitmap
        #expect(decoded.width == 24 && decoded.height == 40)
        #expect(decoded == source.applying(.right))
    }

    /// An unreadable ICC profile is ignored (the pixels come through unchanged), not an error.
    @Test func unreadableICCProfileIsIgnored() throws {
        let source = WebPFixtures.picture(width: 20, height: 12)
        let simple = try source.encode(as: .webp(lossless: true))
        let data = Self.extendedWebP(
            image: Array(simple[12...]), width: 20, height: 12,
            chunks: [("ICCP", Array("not an ICC profile".utf8))])
        #expect(try ImageDecoder.decode(data).bitmap == source)
    }

    /// RIFF/WEBP with a VP8X header, the given image chunk(s), and metadata chunks: ICCP goes
    /// before the image, EXIF after it, as the container spec orders them.
    static func extendedWebP(image: [UInt8], width: Int, height: Int, chunks: [(String, [UInt8])]) -> Data {
        func le(_ v: Int, _ n: Int) -> [UInt8] { (0..<n).map { UInt8((v >> (8 * $0)) & 0xFF) } }
        func chunk(_ tag: String, _ payload: [UInt8]) -> [UInt8] {
            Array(tag.utf8) + le(payload.count, 4) + payload + (payload.count % 2 == 1 ? [0] : [])
        }
        var flags: UInt8 = 0
        for (tag, _) in chunks { flags |= tag == "EXIF" ? 0x08 : tag == "ICCP" ? 0x20 : 0 }
        var body: [UInt8] = Array("WEBP".utf8)
        body += chunk("VP8X", [flags, 0, 0, 0] + le(width - 1, 3) + le(height - 1, 3))
        for (tag, payload) in chunks where tag == "ICCP" { body += chunk(tag, payload) }
        body += image
        for (tag, payload) in chunks where tag != "ICCP" { body += chunk(tag, payload) }
        return Data(Array("RIFF".utf8) + le(body.count, 4) + body)
    }

    // MARK: Hostile input

    /// Seeded truncations and bit flips of small lossy, lossless-with-alpha and animated files:
    /// every outcome is a decoded image or an ImagingError, never a crash.
    @Test func mutatedFilesOnlyProduceTypedErrors() throws {
        let lossy = try WebPFixtures.picture(width: 48, height: 32).encode(as: .webp(quality: 60))
        let alpha = try WebPFixtures.picture(width: 48, height: 32, alpha: true).encode(as: .webp(lossless: true))
        let animated = try WebPCodec.encodeAnimation(
            (0..<3).map { (WebPFixtures.picture(width: 32, height: 24, alpha: true, phase: $0), 0.1) })
        var generator = WebPFuzzGenerator(seed: 0x5EB9)
        // A small limit: a flipped size field must not make the fuzz loop allocate gigabytes.
        let options = DecodeOptions(maximumPixelCount: 1 << 20)
        var outcomes: [String: Int] = [:]
        for round in 0..<360 {
            var bytes = [UInt8]([lossy, alpha, animated][round % 3])
            if round % 2 == 0 {
                bytes.removeLast(Int.random(in: 1..<bytes.count - 12, using: &generator))
            } else {
                for _ in 0..<Int.random(in: 1...4, using: &generator) {
                    let index = Int.random(in: 12..<bytes.count, using: &generator)
                    bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &generator)
                }
            }
            let data = Data(bytes)
            for run in [0, 1] {
                do {
                    if run == 0 {
                        _ = try ImageDecoder.decode(data, options: options)
                    } else {
                        _ = try ImageDecoder.decodeFrames(data, options: options)
                    }
                    outcomes["decoded", default: 0] += 1
                } catch {
                    outcomes[String(describing: error).prefix(while: { $0 != ":" && $0 != "(" }).description, default: 0] += 1
                }
            }
        }
        #expect(outcomes["truncated", default: 0] > 0)
        #expect(outcomes["corrupted", default: 0] > 0)
        #expect(outcomes["decoded", default: 0] > 0, "flipped pixel data still decodes")
    }
}
