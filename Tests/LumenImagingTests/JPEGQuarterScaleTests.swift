import CLumenShim
import Foundation
import Testing
@testable import LumenImaging

/// Lumen's reduced-scale JPEG decoder (`lumen_jpeg_decode_reduced`) at 1/4, which
/// `ImageDecoder.decode` uses instead of TurboJPEG when a thumbnail needs the 1/4 scale (a
/// 1–3 MP photo wanted at 256 px): it must give TurboJPEG's 1/4 pixels to within rounding,
/// decline everything outside its case so TurboJPEG decides, and survive damaged data.
///
/// The bounds: TurboJPEG computes the same block means (its reduced transforms, jidctred.c)
/// in 13-bit fixed point and converts colour with rounded integer tables, Lumen in single
/// precision; each stage can round the other way, and a chroma level off by one moves blue
/// by up to 1.772 levels. Measured over the 96 synthetic cases, the 20 corpus files and the
/// restart files below: mean difference 0.007–0.041 levels (images of 100 pixels or more),
/// max 3. The bounds (mean < 0.06, max ≤ 4) leave room for that and little more: chroma
/// taken another way than TurboJPEG's (2×2 means triangle-upsampled or repeated for 4:2:0,
/// the true 4×2 means or repetition for 4:2:2) is off by 0.4–4.7 levels on average and by
/// 20–88 at edges.
@Suite(.timeLimit(.minutes(1)))
struct JPEGQuarterScaleTests {
    static let meanBound = 0.06
    static let maxBound = 4

    static func quarter(_ data: Data) throws -> Bitmap? { try JPEGEighthScaleTests.reduced(data, denominator: 4) }

    /// TurboJPEG's 1/4 decode, in stored orientation, no ICC.
    static func turbo(_ data: Data) throws -> Bitmap {
        let frame = try #require(try data.withUnsafeBytes { bytes throws(ImagingError) in
            try JPEGMarkers(walking: bytes, scanLimit: 1000).frame
        })
        let size = PixelSize(width: (frame.width + 3) / 4, height: (frame.height + 3) / 4)
        let bitmap = try JPEGEighthScaleTests.turbo(data, minimumSize: size)
        try #require(bitmap.width == size.width && bitmap.height == size.height, "TurboJPEG should pick 1/4")
        return bitmap
    }

    /// Saturated colour cells of a few pixels, thin stripes and a gradient: chroma detail at
    /// every scale, so that any error in the chroma means or their upsampling shows.
    static func detailed(width: Int, height: Int, seed: UInt64) -> Bitmap {
        var random = SeededRandom(seed: seed)
        let cellW = 5, cellH = 7
        let cells = (0..<(((width + cellW - 1) / cellW) * ((height + cellH - 1) / cellH))).map { _ in
            (UInt8.random(in: 0...255, using: &random), UInt8.random(in: 0...255, using: &random),
             UInt8.random(in: 0...255, using: &random))
        }
        let columns = (width + cellW - 1) / cellW
        return Bitmap(width: width, height: height, format: .rgb8) { dst in
            for y in 0..<height {
                for x in 0..<width {
                    var (r, g, b) = cells[(y / cellH) * columns + x / cellW]
                    if (x + 2 * y) % 11 < 2 { (r, g, b) = (255 - r, g, 255 - b) }
                    if y < height / 4 { (r, g, b) = (UInt8(x * 255 / max(width - 1, 1)), g / 2, 255 - r) }
                    let i = (y * width + x) * 3
                    dst[i] = r
                    dst[i + 1] = g
                    dst[i + 2] = b
                }
            }
        }
    }

    /// Compares Lumen's 1/4 decode of `jpeg` with TurboJPEG's: same size, within the bounds.
    static func expectClose(_ jpeg: Data, _ context: String) throws {
        let ours = try #require(try quarter(jpeg), "\(context) should take the 1/4 decoder")
        let theirs = try turbo(jpeg)
        #expect(ours.width == theirs.width && ours.height == theirs.height, "\(context)")
        #expect(isClose(ours, theirs), "\(context): mean \(CorpusJPEG.meanAbsoluteDifference(ours, theirs)), max \(JPEGEighthScaleTests.maximumDifference(ours, theirs))")
    }

    /// Within the bounds. On a few dozen pixels one sample off by 2 is already a mean of
    /// 0.02–0.08, so below 100 pixels only the looser mean of 0.15 applies.
    static func isClose(_ ours: Bitmap, _ theirs: Bitmap) -> Bool {
        let mean = CorpusJPEG.meanAbsoluteDifference(ours, theirs)
        let max = JPEGEighthScaleTests.maximumDifference(ours, theirs)
        return mean < (ours.pixelCount >= 100 ? meanBound : 0.15) && max <= maxBound
    }

    /// Sides that are not multiples of 32, 16 or 8 (partial MCUs, partial blocks, partial
    /// output pixels), down to 4:2:2 rows of one or two chroma means (repeated, not filtered).
    @Test(arguments: [(1201, 803), (517, 389), (250, 30), (33, 17), (9, 300), (14, 9)])
    func syntheticImagesMatchTurboJPEG(width: Int, height: Int) throws {
        let images = [
            ("photo", CorpusJPEG.photoLike(width: width, height: height, seed: UInt64(width))),
            ("detailed", Self.detailed(width: width, height: height, seed: UInt64(height))),
        ]
        for (name, image) in images {
            for subsampling in [JPEGCodec.Subsampling.s444, .s422, .s420, .grey] {
                for quality in [85, 95] {
                    let jpeg = try JPEGCodec.encode(image, quality: quality, progressive: false, subsampling: subsampling)
                    try Self.expectClose(jpeg, "\(name) \(width)x\(height) \(subsampling) q\(quality)")
                }
            }
        }
    }

    /// Every baseline JPEG of the corpus that TurboJPEG decodes: Lumen's decoder takes it and
    /// matches, or (CMYK) declines and the decode is TurboJPEG's.
    @Test func corpusBaselineJPEGsMatchTurboJPEG() throws {
        let files = try ["real-world", "exif-orientation"].flatMap { dir in
            try FileManager.default.contentsOfDirectory(atPath: CorpusJPEG.root.appendingPathComponent(dir).path)
                .filter { $0.hasSuffix(".jpg") }.sorted().map { "\(dir)/\($0)" }
        }
        var taken = 0
        for path in files {
            let jpeg = try CorpusJPEG.data(path)
            let markers = try jpeg.withUnsafeBytes { bytes throws(ImagingError) in try JPEGMarkers(walking: bytes, scanLimit: 1000) }
            guard !markers.isProgressive, let theirs = try? Self.turbo(jpeg) else { continue }
            if let ours = try Self.quarter(jpeg) {
                taken += 1
                #expect(ours.width == theirs.width && ours.height == theirs.height, "\(path)")
                #expect(Self.isClose(ours, theirs), "\(path): mean \(CorpusJPEG.meanAbsoluteDifference(ours, theirs))")
            } else {
                #expect(markers.frame?.components == 4, "\(path): only CMYK should be declined")
                #expect(try Self.publicDecode(jpeg, lumen: true) == Self.publicDecode(jpeg, lumen: false), "\(path)")
            }
        }
        #expect(taken >= 20, "baseline corpus JPEGs taken: \(taken)")
    }

    /// Restart markers (4:2:2 every MCU row, 4:2:0 every two, greyscale every three blocks).
    @Test(arguments: [
        ("422", JPEGEighthScaleTests.restart422), ("420", JPEGEighthScaleTests.restart420),
        ("grey", JPEGEighthScaleTests.greyRestart),
    ])
    func restartMarkersMatchTurboJPEG(name: String, jpeg: Data) throws {
        try Self.expectClose(jpeg, name)
    }

    /// The public decode of a thumbnail at 1/4, with Lumen's decoder (`lumen`) or TurboJPEG's.
    static func publicDecode(_ jpeg: Data, lumen: Bool, size: Int? = nil) throws -> Bitmap {
        let frame = try #require(try jpeg.withUnsafeBytes { bytes throws(ImagingError) in
            try JPEGMarkers(walking: bytes, scanLimit: 1000).frame
        })
        var options = DecodeOptions(size: .maxPixelSize(size ?? (max(frame.width, frame.height) + 3) / 4))
        options.allowsReducedScaleDecoder = lumen
        return try ImageDecoder.decode(jpeg, options: options).bitmap
    }

    /// Junk before a restart marker: Lumen's decoder gives the clean file's pixels or
    /// declines, and the public decode is one of the two clean images.
    @Test(arguments: [
        ("422", JPEGEighthScaleTests.restart422), ("420", JPEGEighthScaleTests.restart420),
        ("grey", JPEGEighthScaleTests.greyRestart),
    ])
    func junkBeforeARestartMarkerChangesNoPixel(name: String, jpeg: Data) throws {
        let clean = try #require(try Self.quarter(jpeg))
        let turboClean = try Self.turbo(jpeg)
        let bytes = [UInt8](jpeg)
        let scan = try #require(bytes.indices.dropLast().last { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xDA })
        let markers = (scan..<(bytes.count - 1)).filter { bytes[$0] == 0xFF && (0xD0...0xD7).contains(bytes[$0 + 1]) }
        try #require(!markers.isEmpty)
        for marker in Set([markers[0], markers[markers.count / 2], markers[markers.count - 1]]) {
            for junk in [[0x5A], [0x13, 0xC4, 0x7E], [UInt8](repeating: 0, count: 9)] as [[UInt8]] {
                var damaged = bytes
                damaged.insert(contentsOf: junk, at: marker)
                let context = "\(name): \(junk.count) junk bytes before the marker at \(marker)"
                if let ours = try Self.quarter(Data(damaged)) { #expect(ours == clean, "\(context)") }
                #expect(try Self.turbo(Data(damaged)) == turboClean, "\(context)")
                let decoded = try Self.publicDecode(Data(damaged), lumen: true, size: 17)
                #expect(decoded.width == 17)
            }
        }
    }

    /// Progressive, arithmetic-coded, CMYK, cut short, 4:4:0: declined, and the decode is
    /// exactly TurboJPEG's (pixels or error).
    @Test func declinedFilesDecodeAsTurboJPEGDoes() throws {
        let photo = CorpusJPEG.photoLike(width: 300, height: 200)
        let baseline = try photo.encode(as: .jpeg(quality: 85))
        // SOF0 relabelled SOF9: the same bytes read as arithmetic coding (TurboJPEG fails).
        var arithmetic = [UInt8](baseline)
        let sof = try #require(arithmetic.indices.dropLast().first { arithmetic[$0] == 0xFF && arithmetic[$0 + 1] == 0xC0 })
        arithmetic[sof + 1] = 0xC9
        // 4:4:0 (luma 1x2): the vertical triangle filter needs the neighbouring MCU rows.
        var h1v2 = [UInt8](try JPEGCodec.encode(photo, quality: 85, progressive: false, subsampling: .s444))
        let frame = try #require(h1v2.indices.dropLast().first { h1v2[$0] == 0xFF && h1v2[$0 + 1] == 0xC0 })
        h1v2[frame + 11] = 0x12
        let cases: [(String, Data)] = [
            ("progressive", try photo.encode(as: .jpeg(quality: 85, progressive: true))),
            ("arithmetic", Data(arithmetic)),
            ("cmyk", try CorpusJPEG.data("real-world/pil_sample_cmyk.jpg")),
            ("cut short", baseline.prefix(baseline.count * 2 / 3)),
            ("cut in the middle of a code", baseline.prefix(baseline.count - 40)),
            ("4:4:0", Data(h1v2)),
            ("truncated corpus file", try CorpusJPEG.data("real-world/truncated_jpeg.jpg")),
        ]
        for (name, jpeg) in cases {
            #expect(try Self.quarter(jpeg) == nil, "\(name)")
            let ours = Result { try Self.publicDecode(jpeg, lumen: true) }
            let theirs = Result { try Self.publicDecode(jpeg, lumen: false) }
            switch (ours, theirs) {
            case (.success(let a), .success(let b)): #expect(a == b, "\(name)")
            case (.failure(let a), .failure(let b)): #expect("\(a)" == "\(b)", "\(name)")
            default: Issue.record("\(name): \(ours) vs \(theirs)")
            }
        }
    }

    /// Through the public API a 2 MP photo at 256 px decodes at 1/4 with Lumen's decoder, and
    /// gives TurboJPEG's thumbnail to within rounding.
    @Test func decodeUsesItAndMatchesTheTurboJPEGThumbnail() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 1800, height: 1200).encode(as: .jpeg(quality: 85))
        var options = DecodeOptions(size: .maxPixelSize(256))
        let ours = try ImageDecoder.decode(jpeg, options: options)
        options.allowsReducedScaleDecoder = false
        let theirs = try ImageDecoder.decode(jpeg, options: options)
        #expect(ours.statistics == theirs.statistics)
        #expect(ours.statistics.codecScale == 0.25)
        #expect(CorpusJPEG.meanAbsoluteDifference(ours.bitmap, theirs.bitmap) < Self.meanBound)
        // The floor baseline stays TurboJPEG's own decode.
        let floor = try ImageDecoder.decodeAtCodecScale(jpeg, options: DecodeOptions(size: .maxPixelSize(256)))
        #expect(floor == (try Self.turbo(jpeg)))
    }

    /// Damaged data anywhere: the C decoder returns or declines, never reads or writes out of
    /// bounds (a crash fails the whole run), and `ImageDecoder.decode` answers with an image or
    /// a typed error.
    @Test func damagedDataNeverCrashes() throws {
        // 1/4 sizes of the undamaged images; 4:2:2 and 4:4:4 take the upsampling and the
        // one-component paths.
        let photo = CorpusJPEG.photoLike(width: 96, height: 64)
        let sources: [(Data, Int, Int, Int)] = [
            (try photo.encode(as: .jpeg(quality: 80)), 24, 16, 250),
            (try JPEGCodec.encode(photo, quality: 80, progressive: false, subsampling: .s422), 24, 16, 250),
            (try JPEGCodec.encode(photo, quality: 80, progressive: false, subsampling: .grey), 24, 16, 150),
            (try CorpusJPEG.photoLike(width: 640, height: 480).encode(as: .jpeg(quality: 80)), 160, 120, 60),
            (JPEGEighthScaleTests.restart422, 17, 12, 250), (JPEGEighthScaleTests.greyRestart, 17, 12, 150),
        ]
        JPEGEighthScaleTests.damageAndDecode(sources, denominator: 4, seed: 4) { $0 }
    }
}
