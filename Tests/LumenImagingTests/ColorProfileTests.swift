import Foundation
import Testing
@testable import LumenImaging

@Suite(.timeLimit(.minutes(1)))
struct ColorProfileTests {
    private func convert(_ image: Bitmap, _ profile: [UInt8]) -> Bitmap {
        profile.withUnsafeBytes { ColorProfile.convertToSRGB(image, profile: $0) }
    }

    private func solid(_ r: UInt8, _ g: UInt8, _ b: UInt8, alpha: UInt8? = nil) -> Bitmap {
        let px: [UInt8] = alpha.map { [r, g, b, $0] } ?? [r, g, b]
        return Bitmap(width: 4, height: 2, format: alpha == nil ? .rgb8 : .rgba8, pixels: Array([[UInt8]](repeating: px, count: 8).joined()))
    }

    /// A linear-light profile: stored value v means linear v/255, so sRGB output is the sRGB
    /// transfer function of it (computed here from the IEC formula, not by lcms2).
    @Test(arguments: [32, 64, 128, 200])
    func linearRGBProfileIsEncodedToSRGB(value: Int) {
        let out = convert(solid(UInt8(value), UInt8(value), UInt8(value)), CorpusICCProfile.linearRGB())
        let expected = CorpusJPEG.srgbEncoded(Double(value) / 255)
        let p = out.rgba(x: 1, y: 1)
        for channel in [p.r, p.g, p.b] { #expect(abs(Double(channel) - expected) <= 2.5, "\(p) vs \(expected)") }
    }

    @Test func primariesAreHonoured() {
        // Red and blue colorants swapped: stored "red" is really sRGB blue.
        let swapped = CorpusICCProfile.linearRGB(red: CorpusICCProfile.srgbBlue, blue: CorpusICCProfile.srgbRed)
        let out = convert(solid(200, 0, 0), swapped).rgba(x: 0, y: 0)
        #expect(out.r <= 3 && out.g <= 3)
        #expect(abs(Double(out.b) - CorpusJPEG.srgbEncoded(200 / 255)) <= 3)
    }

    @Test func alphaPassesThrough() {
        let image = Bitmap(width: 2, height: 1, format: .rgba8, pixels: [128, 128, 128, 7, 64, 64, 64, 200])
        let out = convert(image, CorpusICCProfile.linearRGB())
        #expect(out.format == .rgba8)
        #expect(out.pixels[3] == 7 && out.pixels[7] == 200)
        #expect(abs(Double(out.pixels[0]) - CorpusJPEG.srgbEncoded(128 / 255)) <= 2.5)
    }

    @Test func grayProfileConvertsGrayExpandedImagesOnly() {
        let gray = convert(solid(128, 128, 128, alpha: 99), CorpusICCProfile.linearGray())
        let p = gray.rgba(x: 3, y: 1)
        #expect(abs(Double(p.r) - CorpusJPEG.srgbEncoded(128 / 255)) <= 2.5)
        #expect(p.r == p.g && p.g == p.b && p.a == 99)
        let colour = solid(128, 100, 60)
        #expect(convert(colour, CorpusICCProfile.linearGray()) == colour)
    }

    @Test func unusableProfilesLeaveTheImageUnchanged() {
        let image = solid(10, 120, 240)
        #expect(convert(image, []) == image)
        #expect(convert(image, Array(repeating: 0xAB, count: 600)) == image)
        #expect(convert(image, Array(CorpusICCProfile.linearRGB().prefix(100))) == image)
        #expect(convert(image, CorpusICCProfile.claiming(space: "CMYK")) == image)
        var broken = CorpusICCProfile.linearRGB()
        broken[36] = 0x78  // "xcsp": not an ICC profile
        #expect(convert(image, broken) == image)
    }

    @Test func embeddedSRGBProfileIsANoOp() throws {
        // pil_sample_rgb.jpg carries "sRGB IEC61966-2.1" (Pillow's ImageCms says so).
        let data = try CorpusJPEG.data("real-world/pil_sample_rgb.jpg")
        let icc = try #require(data.withUnsafeBytes { try? JPEGMarkers(walking: $0, scanLimit: 100) }?.iccProfile)
        #expect(icc.count == 3144)
        let image = CorpusJPEG.photoLike(width: 16, height: 16)
        #expect(convert(image, icc) == image)
    }

    @Test func jpegWithChunkedProfileIsConverted() throws {
        let jpeg = try Bitmap(width: 32, height: 16, format: .rgb8, pixels: Array(repeating: 96, count: 32 * 16 * 3))
            .encode(as: .jpeg(quality: 100))
        let icc = CorpusICCProfile.linearRGB()
        let signature = Array("ICC_PROFILE".utf8) + [0]
        let half = icc.count / 2
        // Two chunks, stored out of order: the decoder must reassemble them by sequence number.
        let tagged = CorpusJPEG.inserting([
            (0xE2, signature + [2, 2] + icc[half...]),
            (0xE2, signature + [1, 2] + icc[..<half]),
        ], into: jpeg)
        let converted = try ImageDecoder.decode(tagged).bitmap.rgba(x: 5, y: 5)
        let ignored = try ImageDecoder.decode(tagged, options: DecodeOptions(convertsColorProfile: false)).bitmap.rgba(x: 5, y: 5)
        #expect(abs(Int(ignored.g) - 96) <= 2)
        #expect(abs(Double(converted.g) - CorpusJPEG.srgbEncoded(Double(ignored.g) / 255)) <= 2.5)

        // A missing chunk means no profile: the pixels are left as stored.
        let incomplete = CorpusJPEG.inserting([(0xE2, signature + [1, 2] + icc[..<half])], into: jpeg)
        #expect(try ImageDecoder.decode(incomplete).bitmap.rgba(x: 5, y: 5) == ignored)
    }
}
