import Foundation
import Testing
@testable import LumenImaging

/// Parameters that would buy unbounded memory or CPU are refused or capped, never trapped on.
@Suite(.timeLimit(.minutes(1)))
struct HostileParameterTests {
    static let small = Bitmap(width: 40, height: 30, format: .rgb8) { p in
        for i in p.indices { p[i] = UInt8(truncatingIfNeeded: i &* 37) }
    }

    @Test(arguments: [100_000, Int.max / 2, Int.max])
    func upscalingPastThePixelLimitIsTooLarge(width: Int) throws {
        #expect(throws: ImagingError.self) {
            try ImageProcessors.Resize(width: width, upscale: true).process(Self.small)
        }
        let png = try Self.small.encode(as: .png)
        #expect(throws: ImagingError.self) {
            try ImageDecoder.decode(png, options: DecodeOptions(size: .maxPixelSize(width), allowsUpscaling: true))
        }
    }

    /// A quality outside its format's range is an error naming the range, not a silent clamp.
    @Test(arguments: [
        EncodingFormat.jpeg(quality: 0), .jpeg(quality: 101), .jpeg(quality: -5, progressive: true),
        .webp(quality: -1), .webp(quality: 101, lossless: true), .avif(quality: 200),
    ])
    func aQualityOutsideItsRangeIsAnError(format: EncodingFormat) {
        #expect(format.qualityRange != nil)
        do {
            _ = try Self.small.encode(as: format)
            Issue.record("\(format) encoded")
        } catch {
            guard case .encodingFailed(let reason) = error else {
                Issue.record("\(format): \(error)")
                return
            }
            let range = format.qualityRange!
            #expect(reason.contains("quality must be \(range.lowerBound)–\(range.upperBound)"), "\(reason)")
        }
    }

    /// The ends of each range encode.
    @Test(arguments: [EncodingFormat.jpeg(quality: 1), .jpeg(quality: 100), .webp(quality: 0), .webp(quality: 100)])
    func theEndsOfEachQualityRangeEncode(format: EncodingFormat) throws {
        let data = try Self.small.encode(as: format)
        let decoded = try ImageDecoder.decode(data)
        #expect(decoded.bitmap.width == 40 && decoded.bitmap.height == 30)
    }

    @Test func upscalingWithinTheLimitWorks() throws {
        let png = try Self.small.encode(as: .png)
        let decoded = try ImageDecoder.decode(png, options: DecodeOptions(size: .maxPixelSize(400), allowsUpscaling: true))
        #expect(decoded.bitmap.width == 400 && decoded.bitmap.height == 300)
    }

    @Test func aHugeBlurRadiusIsCappedAndFinishes() throws {
        let blurred = try ImageProcessors.GaussianBlur(radius: 1e9).process(Self.small)
        #expect(blurred.width == 40 && blurred.height == 30)
        // Capped at a third of each side: nearly flat, but computed, not hung.
        let (lo, hi) = blurred.pixels.reduce((UInt8.max, UInt8.min)) { (min($0.0, $1), max($0.1, $1)) }
        let (slo, shi) = Self.small.pixels.reduce((UInt8.max, UInt8.min)) { (min($0.0, $1), max($0.1, $1)) }
        #expect(Int(hi) - Int(lo) < Int(shi) - Int(slo))
    }
}
