import Foundation
import Testing
@testable import LumenImaging

/// JPEG decoding on synthetic images made by Lumen's own encoder: DCT scaling, round trips,
/// the progressive scan limit, partial previews and hostile input.
@Suite(.timeLimit(.minutes(1)))
struct JPEGDecodeTests {
    /// Smooth synthetic content survives quality-90 JPEG with an error of about 1–2 per
    /// sample; 6 leaves room for chroma subsampling at the disc's edge while still catching
    /// a shifted, flipped or colour-swapped image (tens).
    static let roundTripTolerance = 6.0

    @Test func twelveMegapixelsAt256UseTheOneEighthDCTScale() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 4000, height: 3000).encode(as: .jpeg(quality: 85))
        let decoded = try ImageDecoder.decode(jpeg, options: DecodeOptions(size: .maxPixelSize(256)))
        // 1/8 is the smallest TurboJPEG scale, and 4000/8 × 3000/8 still covers 256 × 192.
        #expect(decoded.statistics.codecWidth == 500 && decoded.statistics.codecHeight == 375)
        #expect(decoded.statistics.codecScale == 0.125)
        #expect(decoded.statistics.originalWidth == 4000 && decoded.statistics.originalHeight == 3000)
        #expect(decoded.statistics.isResampled)
        #expect(decoded.bitmap.width == 256 && decoded.bitmap.height == 192)
    }

    @Test func smallImageIsNeverUpscaled() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 100, height: 100).encode(as: .jpeg(quality: 90))
        let decoded = try ImageDecoder.decode(jpeg, options: DecodeOptions(size: .maxPixelSize(256)))
        #expect(decoded.bitmap.width == 100 && decoded.bitmap.height == 100)
        #expect(decoded.statistics.codecWidth == 100)
        #expect(!decoded.statistics.isResampled)
    }

    /// The chosen scale is the smallest n/8 (TurboJPEG's downscaling factors) whose
    /// ceil(dimension × n / 8) covers the minimum on both sides, computed here by brute force.
    @Test(arguments: [(4000, 3000, 256, 192), (4000, 3000, 501, 100), (1000, 1000, 300, 300), (333, 777, 42, 99), (640, 480, 640, 480), (17, 9, 1, 1)])
    func scaleIsTheSmallestCoveringEighth(width: Int, height: Int, minWidth: Int, minHeight: Int) {
        let chosen = JPEGCodec.scaling(width: width, height: height, minimum: PixelSize(width: minWidth, height: minHeight))
        let expected = (1...8).lazy
            .map { n in ((width * n + 7) / 8, (height * n + 7) / 8) }
            .first { $0.0 >= minWidth && $0.1 >= minHeight }!
        #expect(chosen.width == expected.0 && chosen.height == expected.1)
        let full = JPEGCodec.scaling(width: width, height: height, minimum: nil)
        #expect(full.width == width && full.height == height && full.factor == 1)
    }

    @Test(arguments: [false, true])
    func encoderRoundTrips(progressive: Bool) throws {
        let original = CorpusJPEG.photoLike(width: 301, height: 203, seed: 3)
        let jpeg = try original.encode(as: .jpeg(quality: 90, progressive: progressive))
        #expect(ImageFormat(sniffing: jpeg) == .jpeg)
        let decoded = try ImageDecoder.decode(jpeg)
        #expect(decoded.bitmap.width == 301 && decoded.bitmap.height == 203)
        #expect(CorpusJPEG.meanAbsoluteDifference(decoded.bitmap, original) < Self.roundTripTolerance)
        // The flag does something: progressive data has SOF2 and several scans.
        let markers = try jpeg.withUnsafeBytes { bytes throws(ImagingError) in try JPEGMarkers(walking: bytes, scanLimit: 1000) }
        #expect(markers.isProgressive == progressive)
        #expect(progressive ? markers.scanCount > 2 : markers.scanCount == 1)
    }

    @Test func rgbaInputDropsAlphaAndQualityOutOfRangeIsAnError() throws {
        let rgb = CorpusJPEG.photoLike(width: 40, height: 30)
        let rgba = rgb.converted(to: .rgba8)
        let fromRGBA = try ImageDecoder.decode(rgba.encode(as: .jpeg(quality: 90))).bitmap
        #expect(fromRGBA.format == .rgb8)
        #expect(CorpusJPEG.meanAbsoluteDifference(fromRGBA, rgb) < Self.roundTripTolerance)
        // Out-of-range qualities are refused (issue 23: an error, not a silent clamp).
        #expect(throws: ImagingError.self) { try rgb.encode(as: .jpeg(quality: 500)) }
        #expect(throws: ImagingError.self) { try rgb.encode(as: .jpeg(quality: -3)) }
        #expect(try rgb.encode(as: .jpeg(quality: 100)) != rgb.encode(as: .jpeg(quality: 1)))
    }

    @Test func tooManyProgressiveScansAreRefused() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 64, height: 64).encode(as: .jpeg(quality: 80, progressive: true))
        #expect(try ImageDecoder.decode(jpeg).bitmap.width == 64)  // fine under the default limit
        let error = #expect(throws: ImagingError.self) {
            try ImageDecoder.decode(jpeg, options: DecodeOptions(maximumProgressiveScans: 2))
        }
        guard case .corrupted(let reason) = error else {
            Issue.record("expected corrupted, got \(String(describing: error))")
            return
        }
        #expect(reason.contains("scan limit"))
    }

    @Test func truncatedProgressiveJPEGIsAPartialFullSizePreview() throws {
        let original = CorpusJPEG.photoLike(width: 320, height: 240)
        let jpeg = try original.encode(as: .jpeg(quality: 90, progressive: true))
        let half = jpeg.prefix(jpeg.count / 2)
        let decoded = try ImageDecoder.decode(half)
        #expect(decoded.isPartial)
        #expect(decoded.bitmap.width == 320 && decoded.bitmap.height == 240)
        // Half the scans still give a coarse full frame: not as close as the complete file,
        // not garbage either.
        #expect(CorpusJPEG.meanAbsoluteDifference(decoded.bitmap, original) < 60)
        #expect(try ImageDecoder.decode(jpeg).isPartial == false)
    }

    /// Offsets of the 0xFF of every marker `code` (entropy-coded data stuffs each 0xFF, so the
    /// pair only appears as a marker).
    static func markerOffsets(_ data: Data, _ code: UInt8) -> [Int] {
        let bytes = [UInt8](data)
        return (0..<(bytes.count - 1)).filter { bytes[$0] == 0xFF && bytes[$0 + 1] == code }
    }

    /// Data cut inside the marker segment that follows a whole scan (a table, a scan header):
    /// every such cut still gives the scans before it as a partial frame — never an unwritten
    /// buffer (TurboJPEG reports the failure on the unfinished segment as a warning).
    @Test func progressiveJPEGCutInsideAMarkerSegmentGivesTheScansBeforeIt() throws {
        let original = CorpusJPEG.photoLike(width: 320, height: 240)
        let jpeg = try original.encode(as: .jpeg(quality: 90, progressive: true))
        let scans = Self.markerOffsets(jpeg, 0xDA)
        try #require(scans.count >= 4)
        for start in scans[2...3] {
            // Just the marker code, the code and half the length, and the header cut short.
            for cut in [start + 1, start + 2, start + 3, start + 6] {
                let decoded = try ImageDecoder.decode(jpeg.prefix(cut))
                #expect(decoded.isPartial, "cut at \(cut)")
                #expect(decoded.bitmap.width == 320 && decoded.bitmap.height == 240)
                #expect(CorpusJPEG.meanAbsoluteDifference(decoded.bitmap, original) < 60, "cut at \(cut)")
            }
        }
        // The same cut decoded twice gives the same pixels (nothing left unwritten).
        let cut = scans[2] + 2
        #expect(try ImageDecoder.decode(jpeg.prefix(cut)).bitmap.pixels == ImageDecoder.decode(jpeg.prefix(cut)).bitmap.pixels)
    }

    /// A warning (junk bytes before a marker) followed by a fatal error (an impossible Huffman
    /// table) is a failure: TurboJPEG 2.1 still calls it a warning, with nothing decoded.
    @Test func aFatalErrorAfterAWarningIsCorruptedNotAnImage() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 320, height: 240).encode(as: .jpeg(quality: 90, progressive: true))
        let firstScan = try #require(Self.markerOffsets(jpeg, 0xDA).first)
        let table = try #require(Self.markerOffsets(jpeg, 0xC4).first { $0 > firstScan })
        var bytes = [UInt8](jpeg)
        bytes[table + 5] = 3 // three codes of length 1: over-subscribed, and longer than the segment
        bytes.insert(contentsOf: [0x00, 0x11], at: table) // extraneous bytes: libjpeg warns first
        #expect(throws: ImagingError.self) { try ImageDecoder.decode(Data(bytes)) }
        do {
            _ = try ImageDecoder.decode(Data(bytes))
        } catch {
            guard case .corrupted = error else { Issue.record("expected corrupted, got \(error)"); return }
        }
    }

    @Test func truncatedBaselineJPEGIsAnErrorNotAHalfGreyImage() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 320, height: 240).encode(as: .jpeg(quality: 90, progressive: false))
        #expect(throws: ImagingError.truncated) { try ImageDecoder.decode(jpeg.prefix(jpeg.count / 2)) }
        #expect(try ImageDecoder.decode(jpeg).isPartial == false)
    }

    @Test func dataEndingBeforeTheFirstScanIsTruncated() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 64, height: 48).encode(as: .jpeg(quality: 90))
        for length in [3, 4, 20, 100, 300] {
            #expect(throws: ImagingError.truncated, "\(length) bytes") { try ImageDecoder.decode(jpeg.prefix(length)) }
        }
    }

    @Test(arguments: [
        ([0xFF, 0xD8, 0xFF, 0xD9], "no image"),  // SOI, EOI
        ([0xFF, 0xD8, 0xFF, 0xD8, 0xFF, 0xD9], "second start-of-image"),
        ([0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01, 0x00], "bad length"),
        ([0xFF, 0xD8, 0xFF, 0x42, 0x00, 0x04, 0x00, 0x00], "unknown marker"),
        ([0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 8, 0, 0, 0, 0, 3, 1, 0x11, 0, 0xFF, 0xD9], "no image"),  // frame, no scan
    ] as [([UInt8], String)])
    func malformedStructureIsCorrupted(bytes: [UInt8], reason: String) {
        for call in [{ _ = try ImageDecoder.decode(Data(bytes)) }, { _ = try ImageDecoder.info(for: Data(bytes)) }] {
            do {
                try call()
                Issue.record("decoded \(bytes)")
            } catch let error as ImagingError {
                guard case .corrupted(let message) = error else { Issue.record("\(error)"); continue }
                #expect(message.contains(reason), "\(message)")
            } catch {
                Issue.record("untyped \(error)")
            }
        }
    }

    @Test func junkAfterTheMagicIsATypedError() {
        var rng = CorpusJPEG.Random(seed: 11)
        #expect(throws: ImagingError.truncated) { try ImageDecoder.decode(Data([0xFF, 0xD8, 0xFF])) }
        // A segment longer than the data: indistinguishable from a cut file, so `truncated`.
        #expect(throws: ImagingError.truncated) {
            try ImageDecoder.decode(Data([0xFF, 0xD8, 0xFF, 0xC4, 0xFF, 0xFF] + Array(repeating: 0xAA, count: 100)))
        }
        for _ in 0..<50 {
            let bytes: [UInt8] = [0xFF, 0xD8, 0xFF] + (0..<4096).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            #expect(throws: ImagingError.self) { try ImageDecoder.decode(Data(bytes)) }
            #expect(throws: ImagingError.self) { try ImageDecoder.info(for: Data(bytes)) }
        }
    }

    @Test(arguments: [false, true])
    func mutatedJPEGsNeverCrash(progressive: Bool) throws {
        let jpeg = try [UInt8](CorpusJPEG.photoLike(width: 48, height: 32).encode(as: .jpeg(quality: 80, progressive: progressive)))
        var rng = CorpusJPEG.Random(seed: progressive ? 2 : 1)
        // Keep a flipped SOF from asking for gigapixels: the pixel limit is checked first.
        let options = DecodeOptions(size: .maxPixelSize(64), maximumPixelCount: 4_000_000)
        var outcomes = (decoded: 0, failed: 0)
        for round in 0..<300 {
            var bytes = jpeg
            if round % 3 == 0 {
                bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count))))
            } else {
                for _ in 0..<Int(rng.next() % 6 + 1) {
                    let i = 2 + Int(rng.next() % UInt64(bytes.count - 2))  // keep the magic
                    bytes[i] ^= UInt8(1 << (rng.next() % 8))
                }
            }
            do {
                let decoded = try ImageDecoder.decode(Data(bytes), options: options)
                #expect(decoded.bitmap.width > 0 && decoded.bitmap.height > 0)
                outcomes.decoded += 1
            } catch {
                // The typed throw guarantees an ImagingError; reaching here without a trap is the test.
                outcomes.failed += 1
            }
        }
        #expect(outcomes.decoded + outcomes.failed == 300)
        #expect(outcomes.decoded > 0 && outcomes.failed > 0)  // both paths were exercised
    }

    /// A 32×16 JPEG with 4:1:0 chroma (luma sampled 4×2, chroma 1×1; written with libjpeg,
    /// which TurboJPEG 2.1's encoder cannot do): red left half (200, 40, 40), blue right half
    /// (40, 40, 200), quality 75. TurboJPEG 2.1 has no name for this subsampling, so its header
    /// call fails although its decompressor decodes the file, as libjpeg and browsers do.
    static let subsampled410 = Data(base64Encoded: "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjL/wAARCAAQACADAUIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDl6KwaK3qKwaK9jhT/AJff9u/+3HvcS/8ALr/t79D/2Q==")!

    @Test(arguments: [nil, 8] as [Int?])
    func chromaSubsamplingTurboJPEGCannotNameStillDecodes(size: Int?) throws {
        let info = try ImageDecoder.info(for: Self.subsampled410)
        #expect(info.width == 32 && info.height == 16)
        let decoded = try ImageDecoder.decode(Self.subsampled410, options: DecodeOptions(size: size.map { .maxPixelSize($0) }))
        let bitmap = decoded.bitmap
        let width = size ?? 32
        #expect(bitmap.width == width && bitmap.height == width / 2 && bitmap.format == .rgb8)
        /// The mean colour of the columns `range` (a quarter of the width, away from the edge).
        func mean(_ columns: Range<Int>) -> [Double] {
            var sums = [0.0, 0.0, 0.0]
            for y in 0..<bitmap.height {
                for x in columns {
                    for c in 0..<3 { sums[c] += Double(bitmap.pixels[(y * bitmap.width + x) * 3 + c]) }
                }
            }
            return sums.map { $0 / Double(columns.count * bitmap.height) }
        }
        let quarter = width / 4
        let left = mean(0..<quarter), right = mean((width - quarter)..<width)
        for (got, expected) in zip(left + right, [200.0, 40, 40, 40, 40, 200]) {
            #expect(abs(got - expected) < 12, "left \(left), right \(right)")
        }
    }

    @Test func concurrentDecodesMatchSerialOnes() async throws {
        var inputs: [Data] = []
        for name in ["hopper.jpg", "hopper_gray.jpg", "pil_sample_cmyk.jpg", "pil_sample_rgb.jpg", "flower.jpg", "hopper_orientation_6.jpg", "truncated_jpeg.jpg"] {
            inputs.append(try CorpusJPEG.data("real-world/\(name)"))
        }
        for seed in 1...3 {
            inputs.append(try CorpusJPEG.photoLike(width: 200 + seed * 30, height: 150, seed: UInt64(seed))
                .encode(as: .jpeg(quality: 85, progressive: seed == 2)))
        }
        let options = DecodeOptions(size: .maxPixelSize(96))
        let serial = try inputs.map { try ImageDecoder.decode($0, options: options).bitmap }
        let snapshot = inputs
        let concurrent = try await withThrowingTaskGroup(of: (Int, Bitmap).self) { group in
            for _ in 0..<4 {
                for (i, data) in snapshot.enumerated() {
                    group.addTask { (i, try ImageDecoder.decode(data, options: options).bitmap) }
                }
            }
            var results: [(Int, Bitmap)] = []
            for try await result in group { results.append(result) }
            return results
        }
        #expect(concurrent.count == inputs.count * 4)
        for (i, bitmap) in concurrent { #expect(bitmap == serial[i], "input \(i)") }
    }
}
