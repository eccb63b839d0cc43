import Foundation
import Testing
@testable import LumenImaging

/// JPEGs that end properly (an `FF D9` end marker) but whose scan does not hold every pixel:
/// libjpeg-turbo decodes them with a warning and grey (or garbage) where the data is missing.
/// A final decode reports them as ``ImagingError/truncated`` (a progressive one as a partial
/// image), at every scale and through both the reduced-scale decoder and TurboJPEG.
@Suite(.timeLimit(.minutes(1)))
struct JPEGMissingPixelsTests {
    /// The 512×512 baseline photo the fixtures are cut from.
    static let baseline: Data = try! CorpusJPEG.photoLike(width: 512, height: 512).encode(as: .jpeg(quality: 90))

    /// The first half of `jpeg`, closed by an end-of-image marker (a trailing `FF` is dropped
    /// so the marker is not read as fill).
    static func firstHalfClosed(_ jpeg: Data) -> Data {
        var cut = Data(jpeg.prefix(jpeg.count / 2))
        while cut.last == 0xFF { cut.removeLast() }
        return cut + [0xFF, 0xD9]
    }

    /// Offset of the first `FF marker` in `jpeg`.
    static func offset(of marker: UInt8, in jpeg: Data) -> Int {
        let bytes = [UInt8](jpeg)
        return (2..<bytes.count - 1).first { bytes[$0] == 0xFF && bytes[$0 + 1] == marker }!
    }

    /// A valid 64×64 baseline JPEG whose SOF0 claims 9000×9000: the scan ends 80 MCU rows early.
    static let claimsNineThousand: Data = {
        var jpeg = try! CorpusJPEG.photoLike(width: 64, height: 64).encode(as: .jpeg(quality: 90))
        let sof = offset(of: 0xC0, in: jpeg)
        for field in [sof + 5, sof + 7] {  // height, then width, big-endian
            jpeg[field] = UInt8(9000 >> 8)
            jpeg[field + 1] = UInt8(9000 & 0xFF)
        }
        return jpeg
    }()

    /// Where the middle of `baseline`'s scan starts (not just after an `FF`), and the scan.
    static let scanMiddle: Int = {
        let sos = offset(of: 0xDA, in: baseline)
        let scanStart = sos + 2 + Int(baseline[sos + 2]) << 8 + Int(baseline[sos + 3])
        var at = scanStart + (baseline.count - scanStart) / 2
        while baseline[at - 1] == 0xFF { at += 1 }
        return at
    }()

    /// `baseline` with 256 bytes of its scan overwritten by `0x55`: the codes go out of step and
    /// run into the end marker early ("Corrupt JPEG data: premature end of data segment").
    static let overwrittenScan: Data = {
        var jpeg = baseline
        jpeg.replaceSubrange(scanMiddle..<scanMiddle + 256, with: [UInt8](repeating: 0x55, count: 256))
        return jpeg
    }()

    /// `baseline` with 1000 bytes of its scan repeated: the codes end long before the data
    /// ("Corrupt JPEG data: 973 extraneous bytes before marker 0xd9"). (A bad Huffman code
    /// alone is no fixture: libjpeg-turbo's fast path takes it silently, and on this image
    /// the stream falls back in step with no warning at all.)
    static let repeatedScanData: Data = {
        var end = scanMiddle + 1000
        while baseline[end - 1] == 0xFF { end += 1 }
        return baseline.prefix(end) + baseline[scanMiddle..<end] + baseline.suffix(from: end)
    }()

    static let damaged: [(name: String, data: Data)] = [
        ("half a baseline JPEG + FF D9", firstHalfClosed(baseline)),
        ("SOF claims 9000x9000", claimsNineThousand),
        ("256 bytes of the scan overwritten", overwrittenScan),
        ("1000 bytes of the scan repeated", repeatedScanData),
    ]

    /// Target sizes that make TurboJPEG pick 1/2, 1/4 and 1/8 of 512, and the scale each picks.
    static let reducedSizes: [(size: Int, scale: Double)] = [(256, 0.5), (128, 0.25), (64, 0.125)]

    @Test func theFixturesAreOtherwiseWellFormed() throws {
        for (name, data) in Self.damaged {
            let markers = try data.withUnsafeBytes { bytes throws(ImagingError) in try JPEGMarkers(walking: bytes, scanLimit: 100) }
            #expect(markers.reachedEnd && !markers.isTruncated && !markers.isProgressive, "\(name)")
        }
        // The sizes pick the scales they are named for, on the complete image.
        for (size, scale) in Self.reducedSizes {
            let whole = try ImageDecoder.decode(Self.baseline, options: DecodeOptions(size: .maxPixelSize(size)))
            #expect(whole.statistics.codecScale == scale && !whole.isPartial)
        }
    }

    @Test func halfABaselineJPEGClosedByAnEndMarkerIsTruncatedAtFullSize() {
        #expect(throws: ImagingError.truncated) {
            try ImageDecoder.decode(Self.firstHalfClosed(Self.baseline))
        }
    }

    @Test(arguments: [256, 128, 64])
    func halfABaselineJPEGClosedByAnEndMarkerIsTruncatedAtReducedSizes(size: Int) {
        #expect(throws: ImagingError.truncated) {
            try ImageDecoder.decode(Self.firstHalfClosed(Self.baseline), options: DecodeOptions(size: .maxPixelSize(size)))
        }
    }

    /// At 1/2, 1/4 and 1/8 (full size would be a 243 MB bitmap of grey).
    @Test(arguments: [4500, 2250, 1125])
    func aFrameHeaderClaimingMoreRowsThanTheScanHoldsIsTruncated(size: Int) {
        #expect(throws: ImagingError.truncated) {
            try ImageDecoder.decode(Self.claimsNineThousand, options: DecodeOptions(size: .maxPixelSize(size)))
        }
    }

    @Test(arguments: [nil, 256, 128, 64])
    func corruptEntropyCodedDataIsTruncated(size: Int?) {
        for data in [Self.overwrittenScan, Self.repeatedScanData] {
            #expect(throws: ImagingError.truncated) {
                try ImageDecoder.decode(data, options: DecodeOptions(size: size.map { .maxPixelSize($0) }))
            }
        }
    }

    /// A progressive JPEG cut the same way still has whole earlier scans: a partial frame,
    /// never a complete one.
    @Test func halfAProgressiveJPEGClosedByAnEndMarkerIsPartial() throws {
        let progressive = try CorpusJPEG.photoLike(width: 512, height: 512).encode(as: .jpeg(quality: 90, progressive: true))
        let decoded = try ImageDecoder.decode(Self.firstHalfClosed(progressive), options: DecodeOptions(size: .maxPixelSize(128)))
        #expect(decoded.isPartial)
        #expect(decoded.bitmap.width == 128 && decoded.bitmap.height == 128)
    }

    /// Lumen's reduced-scale decoder declines every damaged file (TurboJPEG then decodes it),
    /// and with it allowed or not the decode ends the same way: `truncated`.
    @Test(arguments: [8, 4])
    func theReducedDecoderAgreesWithTurboJPEG(denominator: Int) throws {
        for (name, data) in Self.damaged {
            let parsed = try data.withUnsafeBytes { bytes throws(ImagingError) in
                try JPEGCodec.ParsedHeader(bytes, options: DecodeOptions())
            }
            let width = (parsed.width + denominator - 1) / denominator
            let height = (parsed.height + denominator - 1) / denominator
            let reduced = try data.withUnsafeBytes { bytes throws(ImagingError) in
                try JPEGCodec.decodeReduced(
                    bytes, markers: parsed.markers, info: (parsed.width, parsed.height, parsed.colorspace),
                    denominator: denominator, width: width, height: height)
            }
            #expect(reduced == nil, "\(name): the reduced decoder passed it as an image")
            for allowsReduced in [true, false] {
                var options = DecodeOptions(size: .size(width: width, height: height, contentMode: .aspectFit))
                options.allowsReducedScaleDecoder = allowsReduced
                #expect(throws: ImagingError.truncated, "\(name), reduced decoder allowed: \(allowsReduced)") {
                    try ImageDecoder.decode(data, options: options)
                }
            }
        }
        // The same call on the complete file does decode: the refusal above is about the damage.
        let parsed = try Self.baseline.withUnsafeBytes { bytes throws(ImagingError) in
            try JPEGCodec.ParsedHeader(bytes, options: DecodeOptions())
        }
        let whole = try Self.baseline.withUnsafeBytes { bytes throws(ImagingError) in
            try JPEGCodec.decodeReduced(
                bytes, markers: parsed.markers, info: (parsed.width, parsed.height, parsed.colorspace),
                denominator: denominator, width: 512 / denominator, height: 512 / denominator)
        }
        #expect(whole != nil)
    }

    /// A few bytes of padding before the end marker draw libjpeg's "extraneous bytes" warning
    /// but cost no pixels: still a complete image, at full size and at 1/8.
    @Test(arguments: [nil, 64] as [Int?])
    func paddingBeforeTheEndMarkerIsHarmless(size: Int?) throws {
        let end = Self.baseline.count - 2
        let padded = Self.baseline.prefix(end) + [0, 0, 0, 0] + Self.baseline.suffix(2)
        let decoded = try ImageDecoder.decode(padded, options: DecodeOptions(size: size.map { .maxPixelSize($0) }))
        #expect(!decoded.isPartial)
        let whole = try ImageDecoder.decode(Self.baseline, options: DecodeOptions(size: size.map { .maxPixelSize($0) }))
        #expect(decoded.bitmap == whole.bitmap)
    }

    /// No false positives: every complete JPEG of the corpus (some carry harmless warnings)
    /// still decodes as a complete image, at full size and through both reduced decoders.
    @Test(arguments: ["real-world", "exif-orientation"])
    func corpusJPEGsStillDecodeComplete(folder: String) throws {
        let directory = CorpusJPEG.root.appendingPathComponent(folder)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".jpg") && !$0.contains("truncated") }.sorted()
        #expect(!names.isEmpty)
        for name in names {
            let data = try CorpusJPEG.data("\(folder)/\(name)")
            for size in [nil, 256, 64] as [Int?] {
                let decoded = try ImageDecoder.decode(data, options: DecodeOptions(size: size.map { .maxPixelSize($0) }))
                #expect(!decoded.isPartial, "\(name) at \(size.map(String.init) ?? "full size")")
            }
        }
    }
}
