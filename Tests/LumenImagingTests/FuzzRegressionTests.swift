import Foundation
import Testing
@testable import LumenImaging

/// Inputs found by fuzzing the decoder (`scripts/fuzz.sh`, libFuzzer + AddressSanitizer) and
/// the hostile shapes behind them. Each test feeds the input that failed and asserts the
/// outcome the issue promises: an image of the right size or a typed error, and memory
/// bounded by the image, not by what a hostile header can make the resampler build.
@Suite(.timeLimit(.minutes(1)))
struct FuzzRegressionTests {
    /// A `width`×`height` PNG whose pixels are a left-to-right gray ramp.
    static func rampPNG(width: Int, height: Int) throws -> Data {
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        for x in 0..<width {
            let v = UInt8(x * 255 / max(width - 1, 1))
            for y in 0..<height { let i = (y * width + x) * 3; pixels[i] = v; pixels[i + 1] = v; pixels[i + 2] = v }
        }
        return try Bitmap(width: width, height: height, format: .rgb8, pixels: pixels).encode(as: .png)
    }

    // MARK: - Resampler weight tables (found: `malloc(383987744)` for a 4 000 000×1 PNG)

    /// A 4 000 000×1 strip is within a 4 MP limit, but its Lanczos table for 64 outputs held
    /// 6 × 4 000 000 taps of 16 bytes (384 MB; 9.6 GB for 100 MP × 1). The axis is now
    /// box-reduced first, and the result is still the ramp.
    @Test func extremelyWideStripDecodesWithoutAHugeWeightTable() throws {
        let width = 4_000_000
        let data = try Self.rampPNG(width: width, height: 1)
        let image = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(64), maximumPixelCount: 4_000_000))
        #expect(image.bitmap.width == 64 && image.bitmap.height == 1)
        for x in 0..<64 {
            // Output x covers the source span [x, x + 1) × width / 64: its mean is the ramp there.
            let expected = (Double(x) + 0.5) / 64 * 255
            #expect(abs(Double(image.bitmap.rgba(x: x, y: 0).r) - expected) <= 2, "column \(x)")
        }
        let strip = Bitmap(width: width, height: 1, format: .rgb8, pixels: [UInt8](repeating: 9, count: width * 3))
        let bounded = Resampler.boundingTaps(strip, width: 64, height: 1, outputs: (64, 1), filter: .lanczos3)
        #expect(bounded.width < 64 * 6 && bounded.width >= 64 * 2)
        let weights = FilterWeights(resampling: bounded.width, to: 64, filter: .lanczos3)
        #expect(weights.count * weights.stride < 1 << 16)
    }

    /// Ordinary reductions, even large ones, keep the exact single-pass filter.
    @Test(arguments: [((4000, 3000), (256, 192)), ((12000, 9000), (64, 48)), ((300, 2), (30, 1))])
    func ordinaryReductionsAreNotPreReduced(source: (Int, Int), target: (Int, Int)) {
        let image = Bitmap(
            width: source.0, height: source.1, format: .rgb8, pixels: [UInt8](repeating: 0, count: source.0 * source.1 * 3))
        let bounded = Resampler.boundingTaps(image, width: target.0, height: target.1, outputs: target, filter: .lanczos3)
        #expect(bounded.width == source.0 && bounded.height == source.1)
    }

    /// Box reduction averages premultiplied: a transparent pixel's colour does not leak.
    @Test func boxReductionAveragesPremultiplied() {
        // Two runs of 3: [opaque red, transparent green, opaque red], [half-transparent blue ×3].
        let pixels: [UInt8] = [255, 0, 0, 255, 0, 255, 0, 0, 255, 0, 0, 255,
                               0, 0, 255, 128, 0, 0, 255, 128, 0, 0, 255, 128]
        let image = Bitmap(width: 6, height: 1, format: .rgba8, pixels: pixels)
        let reduced = Resampler.boxReduced(image, columns: 3, rows: 1)
        #expect(reduced.width == 2 && reduced.height == 1)
        #expect(reduced.pixels == [255, 0, 0, 170, 0, 0, 255, 128])
    }

    // MARK: - Aspect fill with upscaling

    /// A 1×60 000 strip filled into 256×256 with upscaling scales to 256×15 360 000 before the
    /// centre crop: 11.8 GB as a full intermediate. Only the crop window is resampled now.
    @Test func thinStripFilledWithUpscalingBuildsOnlyTheCrop() throws {
        let data = try Self.rampPNG(width: 1, height: 60_000)
        let options = DecodeOptions(
            size: .size(width: 256, height: 256, contentMode: .aspectFill), allowsUpscaling: true)
        let image = try ImageDecoder.decode(data, options: options)
        #expect(image.bitmap.width == 256 && image.bitmap.height == 256)
        #expect(image.bitmap.rgba(x: 0, y: 0) == image.bitmap.rgba(x: 255, y: 255))

        let strip = Bitmap(width: 1, height: 60_000, format: .rgb8, pixels: [UInt8](repeating: 77, count: 180_000))
        let filled = try ImageProcessors.Resize(size: (256, 256), contentMode: .aspectFill, crop: true, upscale: true).process(strip)
        #expect(filled.width == 256 && filled.height == 256)
        #expect(filled.pixels.allSatisfy { $0 == 77 })
    }

    /// The windowed resample gives exactly the pixels of resampling everything, orienting and
    /// cropping the centre, for every orientation and for both pixel formats.
    @Test(arguments: ImageOrientation.allCases, [PixelFormat.rgb8, .rgba8])
    func fillCropMatchesFullResampleThenCrop(orientation: ImageOrientation, format: PixelFormat) {
        let stored = SyntheticImages.pattern(width: 53, height: 31, format: format, seed: 7)
        for (size, upscale) in [((20, 20), false), ((16, 9), false), ((90, 40), true), ((7, 60), true)] {
            let options = DecodeOptions(
                size: .size(width: size.0, height: size.1, contentMode: .aspectFill), allowsUpscaling: upscale)
            let swaps = orientation.swapsDimensions
            let geometry = Geometry(
                uprightWidth: swaps ? 31 : 53, uprightHeight: swaps ? 53 : 31, swaps: swaps, options: options)
            var resampled = false
            let result = geometry.finish(stored, orientation: orientation, resampled: &resampled)

            let tw = swaps ? geometry.scaledHeight : geometry.scaledWidth
            let th = swaps ? geometry.scaledWidth : geometry.scaledHeight
            let upright = Resampler.resample(stored, width: tw, height: th).applying(orientation)
            let expected = upright.cropped(
                x: (upright.width - geometry.cropWidth) / 2, y: (upright.height - geometry.cropHeight) / 2,
                width: geometry.cropWidth, height: geometry.cropHeight)
            #expect(result == expected, "\(orientation) \(format) \(size) upscale \(upscale)")
            #expect(resampled)
        }
    }

    // MARK: - ICC profile memory (a 176-byte PNG made lcms2 zero-fill ~500 MB)

    /// A 1×1 PNG, pixel (0x80, 0x40, 0x20), whose iCCP profile is an RGB profile with an A2B0
    /// `mft2` tag declaring 3 inputs, 15 outputs and 255 grid points: a 255³ × 15 × 2-byte
    /// CLUT (497 MB) that lcms2 allocates and zero-fills before finding the data missing.
    static var iccBombPNG: Data {
        Data(base64Encoded:
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAAX2lDQ1BldmlsAAB4nGNgYBTISc4tZhJgYMjNKykKcndSiIiMUmBAAonJxQUMe"
            + "MG3awyMIPqyLn51WAGjo5GTAZCeAMQNuWklRiBBZv7/DBAzkVVi4TMBIcP//whMGQAAXRQUrwIkcT8AAAAMSURBVHicY2hwUAAAAiQA4atZYi"
            + "cAAAAASUVORK5CYII=")!
    }

    @Test func hostileICCTableIsRefusedWithinTheMemoryBudget() throws {
        ColorProfile.resetLcmsPeakBytes()
        let image = try ImageDecoder.decode(Self.iccBombPNG)
        #expect(image.bitmap.width == 1 && image.bitmap.height == 1)
        // The profile cannot be used, so the stored colour comes through unconverted.
        let p = image.bitmap.rgba(x: 0, y: 0)
        #expect(p.r == 0x80 && p.g == 0x40 && p.b == 0x20)
        // lcms2 did run (it opened the profile) but never held more than a sliver of memory.
        #expect(ColorProfile.lcmsPeakBytes > 0)
        #expect(ColorProfile.lcmsPeakBytes < 1 << 20)
    }

    /// A real embedded profile still converts within the budget.
    @Test func realProfileConvertsWithinTheMemoryBudget() throws {
        let data = try CorpusPNG.data("real-world/icc_profile.png")
        ColorProfile.resetLcmsPeakBytes()
        let converted = try ImageDecoder.decode(data)
        #expect(ColorProfile.lcmsPeakBytes > 0 && ColorProfile.lcmsPeakBytes <= ColorProfile.memoryBudget)
        let raw = try ImageDecoder.decode(data, options: DecodeOptions(convertsColorProfile: false))
        #expect(converted.bitmap.width == raw.bitmap.width && converted.bitmap.height == raw.bitmap.height)
    }

    // MARK: - Reduced JPEG decode against TurboJPEG (found by the jpeg-reduced target)

    /// `jpeg` with the first quantisation table's DC step set to `step`.
    static func withDCStep(_ jpeg: Data, _ step: UInt8) throws -> Data {
        var bytes = [UInt8](jpeg)
        let dqt = try #require(bytes.indices.dropLast().first { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xDB })
        try #require(bytes[dqt + 4] & 0xF0 == 0, "an 8-bit table")
        bytes[dqt + 5] = step
        return Data(bytes)
    }

    /// Two flipped bytes in hopper's entropy data made DC terms whose means lie far outside the
    /// sample range; libjpeg's range-limit table wraps such values (it clamps only within 512
    /// of the centre), Lumen's reduced decoder clamped them: mean 21, max 253 levels apart at
    /// 1/8. It now declines such blocks, so TurboJPEG decodes the file and the thumbnail is the
    /// same whichever decoder is allowed. A DC step of 200 on a quality-100 image gives the
    /// same out-of-range means in a valid file.
    @Test(arguments: [8, 4])
    func meansBeyondLibjpegsRangeLimitAreLeftToTurboJPEG(denominator: Int) throws {
        let photo = CorpusJPEG.photoLike(width: 96, height: 64)
        let clean = try photo.encode(as: .jpeg(quality: 100))
        #expect(try JPEGEighthScaleTests.reduced(clean, denominator: denominator) != nil, "the clean file takes the reduced decoder")
        let scaled = try Self.withDCStep(clean, 200)
        #expect(try JPEGEighthScaleTests.reduced(scaled, denominator: denominator) == nil)
        var options = DecodeOptions(size: .maxPixelSize(96 / denominator), convertsColorProfile: false)
        let ours = try ImageDecoder.decode(scaled, options: options)
        options.allowsReducedScaleDecoder = false
        let theirs = try ImageDecoder.decode(scaled, options: options)
        #expect(ours.bitmap == theirs.bitmap)
        #expect(ours.statistics.codecScale == 1 / Double(denominator))
    }

    /// A DC Huffman table with a symbol over 15 that no code of the scan uses: libjpeg refuses
    /// the table ("Bogus Huffman table definition"), Lumen's reduced decoder built it and gave
    /// an image. It now declines, and the decode reports TurboJPEG's error either way.
    @Test(arguments: [8, 4])
    func aDCTableSymbolOver15IsLeftToTurboJPEG(denominator: Int) throws {
        var bytes = [UInt8](try CorpusJPEG.photoLike(width: 96, height: 64).encode(as: .jpeg(quality: 85)))
        let dht = try #require(bytes.indices.dropLast().first { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xC4 })
        try #require(bytes[dht + 4] >> 4 == 0, "the first table is a DC table")
        let total = (0..<16).reduce(0) { $0 + Int(bytes[dht + 5 + $1]) }
        bytes[dht + 5 + 16 + total - 1] = 73  // the longest code's category (11), unused here
        let data = Data(bytes)
        #expect(try JPEGEighthScaleTests.reduced(data, denominator: denominator) == nil)
        var options = DecodeOptions(size: .maxPixelSize(96 / denominator))
        let ours = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: options) }
        options.allowsReducedScaleDecoder = false
        let theirs = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: options) }
        guard case .failure(let error) = theirs else {
            Issue.record("TurboJPEG decoded a table with a symbol over 15")
            return
        }
        guard case .failure(let ourError) = ours else {
            Issue.record("the decode gave an image where TurboJPEG refuses the table")
            return
        }
        #expect(ourError == error)
    }

    /// A second frame header between the scan and the end of the image: libjpeg reads on to
    /// the end and refuses it ("two SOF markers"); the reduced decoder stopped at the scan's
    /// end and gave an image. It now declines whatever marker but the end follows the scan.
    @Test(arguments: [8, 4])
    func aFrameHeaderAfterTheScanIsLeftToTurboJPEG(denominator: Int) throws {
        var bytes = [UInt8](try CorpusJPEG.photoLike(width: 96, height: 64).encode(as: .jpeg(quality: 85)))
        let sof = try #require(bytes.indices.dropLast().first { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xC0 })
        let length = Int(bytes[sof + 2]) << 8 | Int(bytes[sof + 3])
        try #require(bytes.suffix(2) == [0xFF, 0xD9])
        bytes.insert(contentsOf: bytes[sof..<(sof + 2 + length)], at: bytes.count - 2)
        let data = Data(bytes)
        #expect(try JPEGEighthScaleTests.reduced(data, denominator: denominator) == nil)
        var options = DecodeOptions(size: .maxPixelSize(96 / denominator))
        let ours = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: options).bitmap }
        options.allowsReducedScaleDecoder = false
        let theirs = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: options).bitmap }
        #expect(ours == theirs)
        if case .success = theirs { Issue.record("TurboJPEG decoded a file with two frame headers") }
    }
    /// A segment under a marker libjpeg refuses (found: JPG0, 0xFFF0, in place of the APP0
    /// of a greyscale seed): TurboJPEG stops with "Unsupported marker type", the reduced
    /// decoder skipped it as it skips APPn and gave an image. It now declines those markers,
    /// and the decode reports TurboJPEG's error either way.
    @Test(arguments: [0xC8, 0xDE, 0xDF, 0xF0, 0xF7, 0xFD] as [UInt8])
    func aMarkerLibjpegRefusesIsLeftToTurboJPEG(marker: UInt8) throws {
        var bytes = [UInt8](try CorpusJPEG.photoLike(width: 96, height: 64).encode(as: .jpeg(quality: 85)))
        bytes.insert(contentsOf: [0xFF, marker, 0x00, 0x04, 0x00, 0x00], at: 2)
        let data = Data(bytes)
        for denominator in [8, 4] {
            #expect(try JPEGEighthScaleTests.reduced(data, denominator: denominator) == nil, "1/\(denominator)")
        }
        var options = DecodeOptions(size: .maxPixelSize(12))
        let ours = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: options).bitmap }
        options.allowsReducedScaleDecoder = false
        let theirs = Result { () throws(ImagingError) in try ImageDecoder.decode(data, options: options).bitmap }
        #expect(ours == theirs)
        if case .success = theirs { Issue.record("TurboJPEG decoded a file with marker \(marker)") }
    }

    /// A mutated 9×70 4:2:0 file (junk between segments, a luma AC table with repeated
    /// symbols, a zero chroma quantiser) whose chroma coefficients times their quantisers pass
    /// the int16 range: TurboJPEG's SIMD 2×2 IDCT dequantises in 16-bit lanes and wraps them,
    /// so at 1/8 its chroma cells came out mirrored against the reduced decoder's exact ones
    /// (31.7 levels apart on average, 255 at most). The reduced decoder now declines blocks
    /// whose dequantised coefficients can leave that range, and the decode is TurboJPEG's.
    @Test(arguments: [8, 4])
    func dequantisedCoefficientsPastInt16AreLeftToTurboJPEG(denominator: Int) throws {
        let data = try #require(Data(base64Encoded: Self.wrappedChromaJPEG.joined()))
        #expect(try JPEGEighthScaleTests.reduced(data, denominator: denominator) == nil)
        var options = DecodeOptions(size: .maxPixelSize((70 + denominator - 1) / denominator), convertsColorProfile: false)
        let ours = try ImageDecoder.decode(data, options: options)
        options.allowsReducedScaleDecoder = false
        let theirs = try ImageDecoder.decode(data, options: options)
        #expect(ours.bitmap == theirs.bitmap)
        #expect(ours.statistics.codecScale == theirs.statistics.codecScale && ours.statistics.codecScale < 1)
    }

    /// Found by the jpeg-reduced target on 2026-12-07 (a mutation of its 420-9x70 seed).
    static let wrappedChromaJPEG = [
        "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MCg4QDQ4SERATGCgaGBYWshgxIyUdKDozPTw5Mzg3QEhcTkBEV0U3OFBtUVdf",
        "YmdoZz5NcXlwZHhcZWdj/9sAQwEREhIAMBgVGC8aGi9jQnRCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj",
        "Y2NjY2NjY2NjY2P/wAARCABGAAkDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIE",
        "AwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0QBAAAAAACo",
        "gkVGR0hJSlNUVVZXWFlaY2RlZmdoaWpzdHV2d3h5eoOEhYaHiCqKkpOUlZaXmJmaoiQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk",
        "AgAAAAAAAAAkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCSjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi",
        "4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAEC",
        "AxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVm",
        "Z2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq",
        "8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDI8MArdEsCPkPX6iut3r6r+dYGiabdpJl4uNv94f410H2S4/55/qP8ajHSo+1u5pfcejhJ",
        "wlC9ykdVgs18x45NpO0bVH+PtR/wlFp6f3br/vlf8axC7anmILsCndknj05/Ok/spP8An6j/AO+G/wAKf1TDL/edJf15OIYCMcNB",
        "Wu19AQAAcQ+aSrynjuRj+VWv7Lj/AOejVH4heaxsEltT5cjSBSRzgYJ7/QVzn9sal/z8R/8AfMf+Fa1MDVxUvaQnGK8/6Zgoe1XM",
        "4t/edbqUXmxL50Mch3cI4HHX/P41nfYIv+eNr/34H+NbEF3aMxEdzE5AycOKtb1/vL+YrN410fcUW/TT+vmcmErSp0+WUfz/AABt",
        "+v8AwDjNAcLftkZJQgfXIrpMyf3V/wC+v/rUUVlJczuz1cXOUatkf//Z",
    ]
}
