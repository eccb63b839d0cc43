#if LUMEN_HEIF
import Testing
import Foundation
@testable import LumenImaging

/// AVIF through libheif (compiled only with `LUMEN_HEIF=1`).
@Suite(.timeLimit(.minutes(1)))
struct HEIFCodecTests {
    /// avif_hopper.avif is hopper.jpg re-encoded as AVIF (Pillow: 3.8 per channel apart, the
    /// same as hopper.webp); the WebP tests explain the bound of 8.
    @Test(.enabled(if: HEIFCodec.canDecodeAVIF, "libheif has no AV1 decoder plugin"))
    func avifCorpusFileMatchesItsJPEG() throws {
        let data = try WebPFixtures.corpus("avif_hopper.avif")
        let info = try ImageDecoder.info(for: data)
        #expect(info.format == .avif && info.orientation == .up && !info.hasAlpha)
        let decoded = try ImageDecoder.decode(data)
        let reference = try ImageDecoder.decode(WebPFixtures.corpus("hopper.jpg"))
        #expect(decoded.bitmap.format == .rgb8)
        #expect(decoded.bitmap.width == reference.bitmap.width && decoded.bitmap.height == reference.bitmap.height)
        #expect(decoded.bitmap.width == info.width && decoded.bitmap.height == info.height)
        let difference = WebPFixtures.meanAbsoluteDifference(decoded.bitmap, reference.bitmap.converted(to: .rgb8))
        #expect(difference < WebPCodecTests.lossyBound, "mean difference \(difference)")
    }

    @Test(.enabled(if: HEIFCodec.canDecodeAVIF, "libheif has no AV1 decoder plugin"))
    func avifIsResizedAndLimited() throws {
        let data = try WebPFixtures.corpus("avif_hopper.avif")
        let small = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(32)))
        #expect(small.bitmap.width == 32 && small.bitmap.height == 32)
        #expect(throws: ImagingError.tooLarge(width: 128, height: 128)) {
            try ImageDecoder.decode(data, options: DecodeOptions(maximumPixelCount: 128 * 127))
        }
    }

    @Test(arguments: [false, true])
    func avifRoundTripIsClose(alpha: Bool) throws {
        try #require(HEIFCodec.canEncodeAVIF && HEIFCodec.canDecodeAVIF, "libheif lacks an AV1 encoder or decoder")
        let source = WebPFixtures.picture(width: 96, height: 64, alpha: alpha)
        let data = try source.encode(as: .avif(quality: 90))
        #expect(ImageFormat(sniffing: data) == .avif)
        let decoded = try ImageDecoder.decode(data).bitmap
        #expect(decoded.format == source.format)
        if alpha {
            let difference = WebPFixtures.visibleDifference(decoded, reference: source)
            #expect(difference.maxAlpha <= 16, "alpha is coded lossily too")
            #expect(difference.rgb < 6, "visible RGB difference \(difference.rgb)")
        } else {
            let difference = WebPFixtures.meanAbsoluteDifference(decoded, source)
            #expect(difference < 6, "mean difference \(difference)")
        }
    }

    @Test func damagedAVIFOnlyProducesTypedErrors() throws {
        let data = [UInt8](try WebPFixtures.corpus("avif_hopper.avif"))
        var generator = WebPFuzzGenerator(seed: 0xA71F)
        var failures = 0
        for round in 0..<120 {
            var bytes = data
            if round % 2 == 0 {
                bytes.removeLast(Int.random(in: 1..<bytes.count - 12, using: &generator))
            } else {
                for _ in 0..<3 { bytes[Int.random(in: 12..<bytes.count, using: &generator)] ^= 0x5A }
            }
            do {
                _ = try ImageDecoder.decode(Data(bytes), options: DecodeOptions(maximumPixelCount: 1 << 20))
            } catch {
                failures += 1
            }
        }
        #expect(failures > 0)
    }
}
#endif
