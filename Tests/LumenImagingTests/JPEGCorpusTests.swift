import Foundation
import Testing
@testable import LumenImaging

/// The real JPEGs of `../shared/corpus`. Expected sizes and colour modes were read with an
/// independent tool (Pillow) while writing these tests; pixels are compared against other
/// corpus files or checked for properties, never against Lumen's own earlier output.
@Suite(.timeLimit(.minutes(1)))
struct JPEGCorpusTests {
    /// Each `Landscape_N.jpg` is the same picture re-encoded by another tool after rotating or
    /// mirroring it, so even upright it differs from `Landscape_0.jpg` by JPEG loss: measured
    /// 2–5 per sample (of 255). A wrong orientation differs by ≥ 59. Ten sits well between.
    static let closeEnough = 10.0

    let landscape: Bitmap
    let hopper: Bitmap

    init() throws {
        landscape = try ImageDecoder.decode(CorpusJPEG.data("exif-orientation/Landscape_0.jpg")).bitmap
        hopper = try ImageDecoder.decode(CorpusJPEG.data("real-world/hopper.jpg")).bitmap
    }

    @Test func landscapeReferenceHasItsNaturalSize() {
        // Landscape_0.jpg has no usable orientation tag (its value is 0) and is 1800×1200.
        #expect(landscape.width == 1800 && landscape.height == 1200)
    }

    @Test(arguments: 1...8)
    func landscapeDecodesUpright(orientation: Int) throws {
        let data = try CorpusJPEG.data("exif-orientation/Landscape_\(orientation).jpg")
        let decoded = try ImageDecoder.decode(data)
        #expect(decoded.statistics.orientation.rawValue == orientation)
        #expect(decoded.bitmap.width == landscape.width && decoded.bitmap.height == landscape.height)
        let difference = CorpusJPEG.meanAbsoluteDifference(decoded.bitmap, landscape)
        #expect(difference < Self.closeEnough, "Landscape_\(orientation): \(difference)")

        // The comparison can fail: the stored (not upright) pixels are not close.
        if orientation != 1 {
            let stored = try ImageDecoder.decode(data, options: DecodeOptions(appliesOrientation: false)).bitmap
            #expect(CorpusJPEG.meanAbsoluteDifference(stored, landscape) > Self.closeEnough)
        }
    }

    @Test(arguments: 2...8)
    func hopperDecodesUpright(orientation: Int) throws {
        let data = try CorpusJPEG.data("real-world/hopper_orientation_\(orientation).jpg")
        let decoded = try ImageDecoder.decode(data)
        #expect(decoded.statistics.orientation.rawValue == orientation)
        #expect(decoded.bitmap.width == hopper.width && decoded.bitmap.height == hopper.height)
        // Same argument as the landscapes: measured 4.6–4.9 upright, ≥ 59 when not.
        let difference = CorpusJPEG.meanAbsoluteDifference(decoded.bitmap, hopper)
        #expect(difference < Self.closeEnough, "hopper_orientation_\(orientation): \(difference)")
        let stored = try ImageDecoder.decode(data, options: DecodeOptions(appliesOrientation: false)).bitmap
        #expect(CorpusJPEG.meanAbsoluteDifference(stored, hopper) > Self.closeEnough)
    }

    @Test func hopperIsAColourPortrait() {
        // 128×128 RGB per Pillow; a colour photo, so channels differ and vary.
        #expect(hopper.width == 128 && hopper.height == 128)
        let r = CorpusJPEG.channelStatistics(hopper, channel: 0)
        let b = CorpusJPEG.channelStatistics(hopper, channel: 2)
        #expect(r.deviation > 20 && b.deviation > 20)
        #expect(abs(r.mean - b.mean) > 5)
    }

    @Test func grayscaleComesOutAsGrayRGBMatchingTheColourVersionsLuma() throws {
        let gray = try ImageDecoder.decode(CorpusJPEG.data("real-world/hopper_gray.jpg")).bitmap
        #expect(gray.format == .rgb8)
        #expect(gray.width == 128 && gray.height == 128)
        var isGray = true
        var lumaDifference = 0.0
        for y in 0..<gray.height {
            for x in 0..<gray.width {
                let g = gray.rgba(x: x, y: y), c = hopper.rgba(x: x, y: y)
                if g.r != g.g || g.g != g.b { isGray = false }
                let luma = 0.299 * Double(c.r) + 0.587 * Double(c.g) + 0.114 * Double(c.b)  // BT.601, as JPEG's Y
                lumaDifference += abs(luma - Double(g.r))
            }
        }
        #expect(isGray)
        // Both are lossy encodings of the same picture: small difference, as for the orientations.
        #expect(lumaDifference / Double(gray.pixelCount) < Self.closeEnough)
    }

    @Test func adobeCMYKMatchesTheRGBSample() throws {
        // pil_sample_cmyk.jpg is Photoshop-style inverted CMYK (Adobe APP14, transform 2 = YCCK)
        // of the same picture as pil_sample_rgb.jpg. Read without inversion it would be a
        // negative (difference > 100); measured ≈ 4.7.
        let cmyk = try ImageDecoder.decode(CorpusJPEG.data("real-world/pil_sample_cmyk.jpg")).bitmap
        let rgb = try ImageDecoder.decode(CorpusJPEG.data("real-world/pil_sample_rgb.jpg")).bitmap
        #expect(cmyk.format == .rgb8 && cmyk.width == 100 && cmyk.height == 100)
        #expect(CorpusJPEG.meanAbsoluteDifference(cmyk, rgb) < Self.closeEnough)
    }

    @Test func flowerIsAPlausibleColourPhoto() throws {
        // flower.jpg: 480×360 RGB (Pillow), EXIF orientation 1.
        let decoded = try ImageDecoder.decode(CorpusJPEG.data("real-world/flower.jpg"))
        #expect(decoded.bitmap.width == 480 && decoded.bitmap.height == 360)
        #expect(!decoded.isPartial)
        let stats = (0..<3).map { CorpusJPEG.channelStatistics(decoded.bitmap, channel: $0) }
        #expect(stats.allSatisfy { $0.deviation > 20 && $0.mean > 30 && $0.mean < 225 })
        // Re-encoding and decoding again lands close: the pixels are an image, not noise.
        let again = try ImageDecoder.decode(decoded.bitmap.encode(as: .jpeg(quality: 95))).bitmap
        #expect(CorpusJPEG.meanAbsoluteDifference(again, decoded.bitmap) < 3)
    }

    @Test func truncatedProgressiveFileIsAPartialFullFramePreview() throws {
        // truncated_jpeg.jpg: a 100×100 progressive JPEG cut short (Pillow: "image file is
        // truncated"). TurboJPEG only warns, so it is a partial preview, not an error.
        let decoded = try ImageDecoder.decode(CorpusJPEG.data("real-world/truncated_jpeg.jpg"))
        #expect(decoded.isPartial)
        #expect(decoded.bitmap.width == 100 && decoded.bitmap.height == 100)
        #expect(CorpusJPEG.channelStatistics(decoded.bitmap, channel: 1).deviation > 5)
    }

    @Test func completeFilesAreNotPartial() throws {
        for name in ["hopper.jpg", "hopper_gray.jpg", "pil_sample_cmyk.jpg", "pil_sample_rgb.jpg"] {
            #expect(try ImageDecoder.decode(CorpusJPEG.data("real-world/\(name)")).isPartial == false, "\(name)")
        }
    }
}

/// CMYK to RGB: the profile-less formula, and the lcms2 path with a real CMYK profile.
@Suite(.timeLimit(.minutes(1)))
struct JPEGCMYKTests {
    @Test func naiveConversionFollowsInkCoverage() {
        // (ink C, M, Y, K), 255 = full coverage → expected RGB by R = (1 − C)(1 − K), etc.
        let inks: [[UInt8]] = [[0, 0, 0, 0], [255, 0, 0, 0], [0, 255, 0, 0], [0, 0, 255, 0], [0, 0, 0, 255], [128, 64, 0, 51]]
        for ink in inks {
            let black = 1 - Double(ink[3]) / 255
            let expected: [Int] = (0..<3).map { k in
                let colour: Double = 1 - Double(ink[k]) / 255
                return Int((colour * black * 255).rounded())
            }
            let plain = JPEGCodec.naiveRGB(cmyk: ink, width: 1, height: 1, inverted: false).pixels
            let adobe = JPEGCodec.naiveRGB(cmyk: ink.map { 255 - $0 }, width: 1, height: 1, inverted: true).pixels
            for k in 0..<3 {
                #expect(abs(Int(plain[k]) - expected[k]) <= 1, "\(ink)")
                #expect(abs(Int(adobe[k]) - expected[k]) <= 1, "\(ink) inverted")
            }
        }
    }

    static let systemCMYKProfile = "/usr/share/color/icc/ghostscript/default_cmyk.icc"

    /// Runs only where Ghostscript's CMYK profile is installed (it is not part of the corpus
    /// and no CMYK profile can be written by hand in a few lines as the RGB ones are).
    @Test(.enabled(if: FileManager.default.fileExists(atPath: systemCMYKProfile)))
    func embeddedCMYKProfileIsUsedWithAdobeInversion() throws {
        let icc = try [UInt8](Data(contentsOf: URL(fileURLWithPath: Self.systemCMYKProfile)))
        let signature = Array("ICC_PROFILE".utf8) + [0]
        let chunk = 60_000, count = (icc.count + chunk - 1) / chunk
        var segments: [(marker: UInt8, payload: [UInt8])] = []
        for i in 0..<count {
            let part = Array(icc[(i * chunk)..<min(icc.count, (i + 1) * chunk)])
            segments.append((0xE2, signature + [UInt8(i + 1), UInt8(count)] + part))
        }
        let tagged = CorpusJPEG.inserting(segments, into: try CorpusJPEG.data("real-world/pil_sample_cmyk.jpg"))
        let rgb = try ImageDecoder.decode(CorpusJPEG.data("real-world/pil_sample_rgb.jpg")).bitmap
        let managed = try ImageDecoder.decode(tagged).bitmap
        let naive = try ImageDecoder.decode(tagged, options: DecodeOptions(convertsColorProfile: false)).bitmap
        // A press profile renders differently from the naive formula (measured ≈ 13 apart), but
        // the picture is the same: far from the > 100 of a wrongly inverted (negative) image.
        #expect(CorpusJPEG.meanAbsoluteDifference(managed, naive) > 3)
        #expect(CorpusJPEG.meanAbsoluteDifference(managed, rgb) < 30)
    }
}
