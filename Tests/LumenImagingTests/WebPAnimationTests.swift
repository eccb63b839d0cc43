import Testing
import Foundation
@testable import LumenImaging

/// Animated WebP made with the internal WebPAnimEncoder helper: frame count, durations,
/// composited pixels, and the frames × area limit.
@Suite(.timeLimit(.minutes(1)))
struct WebPAnimationTests {
    static let width = 64, height = 48

    /// Four distinct canvases. Frame 2 changes only a small square of frame 1, so the encoder
    /// stores it as a sub-rectangle that the decoder must composite onto the previous canvas;
    /// frame 3 has transparent areas; frame 4 is a different picture.
    static let frames: [(bitmap: Bitmap, duration: Double)] = {
        let first = WebPFixtures.picture(width: width, height: height, alpha: true, phase: 0)
        var second = first.pixels
        for y in 20..<28 { for x in 30..<38 { let i = (y * width + x) * 4; second[i] = 255; second[i + 1] = 0; second[i + 2] = 0; second[i + 3] = 255 } }
        let third = WebPFixtures.picture(width: width, height: height, alpha: true, phase: 2)
        let fourth = WebPFixtures.picture(width: width, height: height, alpha: true, phase: 3)
        return [
            (first, 0.1),
            (Bitmap(width: width, height: height, format: .rgba8, pixels: second), 0.25),
            (third, 0.04),
            (fourth, 1.5),
        ]
    }()

    @Test func decodeFramesGivesEveryCompositedFrameWithItsDuration() throws {
        let data = try WebPCodec.encodeAnimation(Self.frames, lossless: true)
        let info = try ImageDecoder.info(for: data)
        #expect(info.format == .webp && info.frameCount == 4)
        #expect(info.width == Self.width && info.height == Self.height)

        let decoded = try ImageDecoder.decodeFrames(data)
        try #require(decoded.count == Self.frames.count)
        for (index, (frame, expected)) in zip(decoded, Self.frames).enumerated() {
            #expect(abs(frame.duration - expected.duration) < 0.0015, "frame \(index) duration \(frame.duration)")
            #expect(frame.bitmap.format == .rgba8)
            let difference = WebPFixtures.visibleDifference(frame.bitmap, reference: expected.bitmap)
            #expect(difference.maxAlpha == 0, "frame \(index)")
            #expect(difference.rgb == 0, "frame \(index) differs by \(difference.rgb)")
        }
    }

    @Test func decodeGivesTheFirstFrameOnly() throws {
        let data = try WebPCodec.encodeAnimation(Self.frames, lossless: true)
        let decoded = try ImageDecoder.decode(data)
        let difference = WebPFixtures.visibleDifference(decoded.bitmap, reference: Self.frames[0].bitmap)
        #expect(difference.maxAlpha == 0 && difference.rgb == 0)
    }

    @Test func opaqueAnimationDecodesAsRGB() throws {
        let frames = (0..<3).map { (WebPFixtures.picture(width: 40, height: 30, phase: $0), 0.2) }
        let data = try WebPCodec.encodeAnimation(frames, quality: 90, lossless: false)
        let decoded = try ImageDecoder.decodeFrames(data)
        #expect(decoded.count == 3)
        for (frame, expected) in zip(decoded, frames) {
            #expect(frame.bitmap.format == .rgb8)
            #expect(WebPFixtures.meanAbsoluteDifference(frame.bitmap, expected.0) < 6)
        }
    }

    @Test func animationIsResizedLikeAStillImage() throws {
        let data = try WebPCodec.encodeAnimation(Self.frames, lossless: true)
        let decoded = try ImageDecoder.decodeFrames(data, options: DecodeOptions(size: .maxPixelSize(32)))
        #expect(decoded.count == 4)
        #expect(decoded.allSatisfy { $0.bitmap.width == 32 && $0.bitmap.height == 24 })
    }

    /// The limit is frames × canvas area and is checked from the header before any frame is
    /// decoded: the last frame's bitstream is damaged, so decoding all frames fails as
    /// `corrupted` without a limit, yet with a limit below 4 × area the error is `tooLarge`.
    @Test func framesTimesAreaLimitIsCheckedBeforeDecoding() throws {
        var bytes = [UInt8](try WebPCodec.encodeAnimation(Self.frames, lossless: true))
        let lastImage = try #require(Self.lastChunk("VP8L", in: bytes))
        for i in (lastImage + 8 + 5)..<min(lastImage + 8 + 40, bytes.count) { bytes[i] = 0xFF }
        let damaged = Data(bytes)
        #expect {
            try ImageDecoder.decodeFrames(damaged)
        } throws: { error in
            if case ImagingError.corrupted = error { return true }
            return false
        }

        let area = Self.width * Self.height
        let limited = DecodeOptions(maximumPixelCount: area * 3)
        #expect(throws: ImagingError.tooLarge(width: Self.width, height: Self.height)) {
            try ImageDecoder.decodeFrames(damaged, options: limited)
        }
        // The same limit allows the first frame alone (it is undamaged).
        let first = try ImageDecoder.decode(damaged, options: limited)
        #expect(first.bitmap.width == Self.width)
        // And the codec enforces the limit itself, whatever header it is handed.
        let header = ImageHeader(format: .webp, width: Self.width, height: Self.height, hasAlpha: true)
        let direct = damaged.withUnsafeBytes { raw in
            Result { () throws(ImagingError) in try WebPCodec.decodeFrames(raw, header: header, options: limited) }
        }
        #expect(throws: ImagingError.tooLarge(width: Self.width, height: Self.height)) { try direct.get() }
    }

    static func lastChunk(_ fourCC: String, in bytes: [UInt8]) -> Int? {
        let tag = Array(fourCC.utf8)
        return (0...(bytes.count - 4)).last { bytes[$0..<($0 + 4)].elementsEqual(tag) }
    }
}
