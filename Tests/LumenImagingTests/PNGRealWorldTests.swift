import Foundation
import Synchronization
import Testing
@testable import LumenImaging

/// The PNGs in `real-world/` (from Pillow's test suite) and the hostile ones.
@Suite(.timeLimit(.minutes(1)))
struct PNGRealWorldTests {
    private func decode(_ name: String) throws -> DecodedImage {
        try ImageDecoder.decode(CorpusPNG.data("real-world/\(name)"))
    }

    @Test func grayscaleWithTRNSMakesExactlyThatGrayTransparent() throws {
        // 1_trns.png: 64×64, 1-bit grayscale; its tRNS stores 0x00FF. The spec lets decoders
        // mask a tRNS value to the bit depth (Lumen does), which makes the low bit, white,
        // transparent; without masking no pixel would be.
        let data = try CorpusPNG.data("real-world/1_trns.png")
        let bytes = [UInt8](data)
        let trnsAt = try #require((0..<bytes.count - 4).first { String(decoding: bytes[$0..<$0 + 4], as: UTF8.self) == "tRNS" })
        let transparentGray: UInt8 = (bytes[trnsAt + 5] & 1) == 1 ? 255 : 0  // 1-bit sample, scaled
        let image = try ImageDecoder.decode(data).bitmap
        #expect(image.width == 64 && image.height == 64 && image.format == .rgba8)
        var transparent = 0
        for y in 0..<64 {
            for x in 0..<64 {
                let p = image.rgba(x: x, y: y)
                #expect(p.r == p.g && p.g == p.b && (p.r == 0 || p.r == 255))
                #expect((p.a == 0) == (p.r == transparentGray), "(\(x), \(y))")
                if p.a == 0 { transparent += 1 }
            }
        }
        #expect(transparent > 0 && transparent < 64 * 64)
    }

    @Test func apngDecodesItsDefaultImageOnly() throws {
        // apng_delay.png: the IDAT default image (not part of the animation: no fcTL before
        // IDAT) is solid red; the animation frames live in fdAT chunks and are ignored.
        let image = try decode("apng_delay.png").bitmap
        #expect(image.width == 128 && image.height == 64 && image.format == .rgba8)
        let allRed = stride(from: 0, to: image.pixels.count, by: 4).allSatisfy {
            image.pixels[$0] == 255 && image.pixels[$0 + 1] == 0 && image.pixels[$0 + 2] == 0 && image.pixels[$0 + 3] == 255
        }
        #expect(allRed)
        let frames = try ImageDecoder.decodeFrames(CorpusPNG.data("real-world/apng_delay.png"))
        #expect(frames.count == 1)
    }

    @Test func brokenFileIsCorrupted() throws {
        // broken.png: a PNG signature followed by random bytes (no IHDR where it must be).
        let error = CorpusPNG.decodeError(try CorpusPNG.data("real-world/broken.png"))
        #expect(CorpusPNG.isCorrupted(error), "\(String(describing: error))")
    }

    @Test func hopperMatchesTheGIFVersionOfTheSamePicture() throws {
        // hopper.png (truecolour) and hopper.gif (the same picture, 256-colour palette) must
        // agree up to palette quantisation.
        let png = try decode("hopper.png").bitmap
        let gif = try decode("hopper.gif").bitmap
        #expect(png.width == 128 && png.height == 128 && png.format == .rgb8)
        #expect(gif.width == 128 && gif.height == 128)
        let difference = CorpusPNG.meanDifference(png, gif)
        #expect(difference < 6, "mean channel difference \(difference)")  // measured ≈ 3.0
    }

    @Test func iccProfileImageDecodes() throws {
        // icc_profile.png: 57×57 RGBA with an iCCP chunk (handed to ColorProfile).
        let image = try decode("icc_profile.png").bitmap
        #expect(image.width == 57 && image.height == 57 && image.format == .rgba8)
        #expect(image.pixels.contains { $0 != 0 })
    }

    @Test func transparentImageKeepsItsAlpha() throws {
        // transparent.png: 200×150 RGBA with both clear and opaque areas.
        let image = try decode("transparent.png").bitmap
        #expect(image.width == 200 && image.height == 150 && image.format == .rgba8)
        let alphas = Set(stride(from: 3, to: image.pixels.count, by: 4).map { image.pixels[$0] })
        #expect(alphas.contains(0) && alphas.contains(255))
    }

    @Test func truncatedImageIsTruncated() throws {
        // truncated_image.png: 640×480, the file stops inside the IDAT data.
        let data = try CorpusPNG.data("real-world/truncated_image.png")
        #expect(CorpusPNG.decodeError(data) == .truncated)
        // The header is intact.
        let info = try ImageDecoder.info(for: data)
        #expect(info.width == 640 && info.height == 480)
    }

    @Test func metadataBombIsRefusedWithinTheChunkLimits() throws {
        // png_decompression_dos.png: a valid 1×1 image with three zTXt chunks that each inflate
        // to 2 MiB. The image is not large; its metadata is. libspng's chunk cache limit stops
        // the inflation, and the error says so: corrupted with the metadata limit as the
        // reason, never tooLarge (the pixel limit, which a 1×1 image is far below).
        let data = try CorpusPNG.data("real-world/png_decompression_dos.png")
        let inflatedText = 3 * 2 << 20
        PNGCodec.resetLibspngPeakBytes()
        let error = CorpusPNG.decodeError(data)
        let peak = PNGCodec.libspngPeakBytes
        #expect(peak <= PNGCodec.chunkCacheLimit + (1 << 20), "libspng held \(peak) bytes")
        #expect(peak < inflatedText)
        guard case .corrupted(let reason)? = error else {
            Issue.record("expected corrupted, got \(String(describing: error))")
            return
        }
        #expect(reason.hasPrefix("ancillary chunks exceed the metadata limit"), "\(reason)")
    }

    @Test func hugeDeclaredSizeIsRefusedBeforeAllocating() throws {
        // A hand-made PNG declaring 200000×200000 (40 gigapixels, 160 GB as RGBA) with one row
        // of data: refused from the header. Neither libspng nor the process grows anywhere
        // near the declared size.
        let side = 200_000
        let data = SyntheticPNG.make(width: side, height: side, colorType: 6, raw: [UInt8](repeating: 0, count: 1 + side * 4))
        let declaredBytes = side * side * 4
        let rssBefore = CorpusPNG.peakRSS()
        PNGCodec.resetLibspngPeakBytes()
        let error = CorpusPNG.decodeError(data)
        let peak = PNGCodec.libspngPeakBytes
        let rssGrowth = CorpusPNG.peakRSS() - rssBefore
        #expect(error == .tooLarge(width: side, height: side))
        #expect(peak < 1 << 20, "libspng held \(peak) bytes")
        #expect(rssGrowth < declaredBytes / 100, "peak RSS grew by \(rssGrowth) bytes")
    }

    @Test func sideOverTheLimitIsRefusedByLibspngImageLimits() throws {
        // With a 1000-pixel budget, libspng's own image limits (each side ≤ the budget) stop a
        // 2000×1 image while reading IHDR.
        let data = SyntheticPNG.make(width: 2000, height: 1, colorType: 0, raw: [UInt8](repeating: 0, count: 2001))
        #expect(CorpusPNG.decodeError(data, options: DecodeOptions(maximumPixelCount: 1000)) == .tooLarge(width: 2000, height: 1))
        #expect(try ImageDecoder.decode(data).bitmap.width == 2000)
    }

    @Test func eXIfChunkGivesTheOrientation() throws {
        // A 3×2 PNG with an eXIf chunk (big-endian TIFF, orientation 6 = rotate right) before
        // IDAT. The bytes must reach EXIF.orientation(tiff:); the header reports what it says,
        // and the decode turns the image upright. (EXIF parsing itself is tested with EXIF;
        // while it is a stub answering .up, this checks only that nothing breaks.)
        let tiff: [UInt8] = [0x4D, 0x4D, 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0]
        let expected = tiff.withUnsafeBytes { EXIF.orientation(tiff: $0) }
        var bytes = [UInt8](SyntheticPNG.make(width: 3, height: 2, colorType: 2, raw: [UInt8](repeating: 0, count: 2 * (1 + 9))))
        bytes.insert(contentsOf: SyntheticPNG.chunk("eXIf", tiff), at: 33)
        let info = try ImageDecoder.info(for: Data(bytes))
        #expect(info.orientation == expected)
        let upright = expected.swapsDimensions ? (2, 3) : (3, 2)
        #expect(info.width == upright.0 && info.height == upright.1)
        let image = try ImageDecoder.decode(Data(bytes)).bitmap
        #expect(image.width == upright.0 && image.height == upright.1)
    }

    @Test func concurrentDecodesAgreeWithASerialOne() throws {
        // Each call owns its libspng / giflib handle: decoding the same files on many threads at
        // once gives exactly the serial result.
        let png = try CorpusPNG.data("real-world/hopper.png"), gif = try CorpusPNG.data("real-world/dispose_bgnd.gif")
        let expectedPNG = try ImageDecoder.decode(png).bitmap
        let expectedGIF = try ImageDecoder.decodeFrames(gif).map(\.bitmap)
        let mismatches = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            let same = i % 2 == 0
                ? (try? ImageDecoder.decode(png).bitmap) == expectedPNG
                : (try? ImageDecoder.decodeFrames(gif).map(\.bitmap)) == expectedGIF
            if !same { mismatches.withLock { $0 += 1 } }
        }
        #expect(mismatches.withLock { $0 } == 0)
    }

    @Test func crcMismatchInAnAncillaryChunkIsAnError() throws {
        // libspng's default drops ancillary chunks with a bad CRC silently; Lumen refuses them.
        var bytes = [UInt8](SyntheticPNG.make(width: 1, height: 1, colorType: 0, raw: [0, 128]))
        let text = SyntheticPNG.chunk("tEXt", Array("Comment\u{0}hello".utf8))
        var damaged = text
        damaged[damaged.count - 1] ^= 0xFF
        bytes.insert(contentsOf: damaged, at: 33)  // right after IHDR
        #expect(CorpusPNG.isCorrupted(CorpusPNG.decodeError(Data(bytes))))
        var intact = [UInt8](SyntheticPNG.make(width: 1, height: 1, colorType: 0, raw: [0, 128]))
        intact.insert(contentsOf: text, at: 33)
        #expect(try ImageDecoder.decode(Data(intact)).bitmap.rgba(x: 0, y: 0) == (128, 128, 128, 255))
    }
}
