import Foundation
import Testing
@testable import Lumen
@testable import LumenUI
import LumenTestSupport

/// The decode size follows how the view shows the image: a fit covers the longest side, a fill
/// both sides of the slot (wide, tall and square images alike), bucketed, never above the
/// image's natural size. Real images, the real decoder.
@MainActor
@Suite(.timeLimit(.minutes(1)))
struct FetchImageContentModeTests {
    /// Natural sizes: large wide, tall and square images, and ones smaller than the slot.
    nonisolated static let images: [(width: Int, height: Int)] = [
        (2000, 1000), (1000, 2000), (1000, 1000), (300, 150), (150, 300), (150, 150),
    ]

    private static func jpeg(width: Int, height: Int) throws -> Data {
        let bitmap = Bitmap(width: width, height: height, format: .rgb8) { buffer in
            for y in 0..<height {
                for x in 0..<width {
                    let i = (y * width + x) * 3
                    buffer[i] = UInt8(truncatingIfNeeded: x)
                    buffer[i + 1] = UInt8(truncatingIfNeeded: y)
                    buffer[i + 2] = 128
                }
            }
        }
        return try bitmap.encode(as: .jpeg(quality: 80))
    }

    /// What the decoder makes, worked out independently of `DisplaySize`: a square slot's
    /// pixels bucketed to 64; a fit scales the longest side to it, a fill the shortest and
    /// crops the centre; never upscaled.
    private static func expected(_ natural: (width: Int, height: Int), slotPixels: Int, fill: Bool) -> (Int, Int) {
        let bucket = (slotPixels + 63) / 64 * 64
        let w = Double(natural.width), h = Double(natural.height), b = Double(bucket)
        let k = min(1, fill ? max(b / w, b / h) : min(b / w, b / h))
        let scaled = (Int((w * k).rounded()), Int((h * k).rounded()))
        return fill ? (min(bucket, scaled.0), min(bucket, scaled.1)) : scaled
    }

    @Test(arguments: images.indices, [1.0, 2.0, 3.0])
    func aFillCoversBothSidesOfTheSlotAndAFitTheLongest(image: Int, scale: Double) async throws {
        let natural = Self.images[image]
        let h = PipelineHarness { $0.decoder = ImageDecoders.Default() }
        h.loader.serve(try Self.jpeg(width: natural.width, height: natural.height), for: PipelineURLs.a)
        let slot = Int(100 * scale) // a 100×100-point cell
        for mode in [ContentMode.aspectFit, .aspectFill] {
            let model = FetchImage(pipeline: h.pipeline)
            model.load(ImageRequest(url: PipelineURLs.a))
            model.displaySize(width: 100, height: 100, scale: scale, contentMode: mode)
            await waitUntil(model) { $0.phase.image != nil }
            let shown = try #require(model.phase.image)
            let expected = Self.expected(natural, slotPixels: slot, fill: mode == .aspectFill)
            #expect(shown.width == expected.0 && shown.height == expected.1,
                    "\(natural) \(mode) @\(scale): \(shown.width)×\(shown.height)")
            // Never above the natural size.
            #expect(shown.width <= natural.width && shown.height <= natural.height)
            if mode == .aspectFill {
                // Both sides of the slot covered, as far as the image allows.
                #expect(shown.width >= min(slot, natural.width) && shown.height >= min(slot, natural.height))
            } else {
                #expect(max(shown.width, shown.height) >= min(slot, max(natural.width, natural.height)))
            }
        }
        #expect(h.loader.loadCount == 2)
    }

    /// The brief's case: 2000×1000 in a 100×100-point cell at 2× was decoded at 256×128, so a
    /// `scaledToFill` view upscaled it 1.56×.
    @Test func aWideImageInASquareFillCellAt2xIsDecodedTallEnoughToCoverIt() async throws {
        let h = PipelineHarness { $0.decoder = ImageDecoders.Default() }
        h.loader.serve(try Self.jpeg(width: 2000, height: 1000), for: PipelineURLs.a)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100, scale: 2, contentMode: .aspectFill)
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 256 && model.phase.image?.height == 256)
        #expect(model.response?.request.thumbnail == .size(width: 256, height: 256, contentMode: .aspectFill))
    }

    /// Once a fill decode came back whole (smaller than its target on both sides), no larger
    /// slot, filled or fitted, decodes again: every one is capped at the natural size.
    @Test func aFillAtTheNaturalSizeCapsEveryLargerSlot() async throws {
        let h = PipelineHarness { $0.decoder = ImageDecoders.Default() }
        h.loader.serve(try Self.jpeg(width: 300, height: 150), for: PipelineURLs.a)
        let model = FetchImage(pipeline: h.pipeline)
        model.load(ImageRequest(url: PipelineURLs.a))
        model.displaySize(width: 100, height: 100, scale: 2, contentMode: .aspectFill) // 256×256: a crop
        await waitUntil(model) { $0.phase.image != nil }
        #expect(model.phase.image?.width == 256 && model.phase.image?.height == 150)
        #expect(model.naturalMaxPixelSize == nil) // cropped: not the whole image

        model.displaySize(width: 110, height: 110, scale: 3, contentMode: .aspectFill) // 384×384
        await waitUntil(model) { $0.phase.image?.width == 300 }
        #expect(model.phase.image?.height == 150)
        #expect(model.naturalMaxPixelSize == 300)
        #expect(h.pipeline.metrics.decodes == 2)

        model.displaySize(width: 300, height: 200, scale: 3, contentMode: .aspectFill) // 960×640
        #expect(!model.isLoading)
        model.displaySize(width: 300, height: 200, scale: 3, contentMode: .aspectFit)
        #expect(!model.isLoading)
        #expect(model.phase.image?.width == 300 && model.phase.image?.height == 150)
        #expect(h.pipeline.metrics.decodes == 2)
        #expect(h.loader.loadCount == 1)
    }
}

/// ``DisplaySize/decodeSize``: the bucket rule for both content modes, pure.
@Suite(.timeLimit(.minutes(1)))
struct DisplaySizeContentModeTests {
    @Test(arguments: [
        // (width, height, scale, fit, fill)
        (100.0, 100.0, 1.0, DecodeSize.maxPixelSize(128), DecodeSize.size(width: 128, height: 128, contentMode: .aspectFill)),
        (100, 100, 2, .maxPixelSize(256), .size(width: 256, height: 256, contentMode: .aspectFill)),
        (100, 100, 3, .maxPixelSize(320), .size(width: 320, height: 320, contentMode: .aspectFill)),
        (150, 100, 2, .maxPixelSize(320), .size(width: 320, height: 214, contentMode: .aspectFill)), // 213.3 rounded up
        (100, 150, 2, .maxPixelSize(320), .size(width: 214, height: 320, contentMode: .aspectFill)),
        (200, 50, 1, .maxPixelSize(256), .size(width: 256, height: 64, contentMode: .aspectFill)),
        (66.67, 66.67, 3, .maxPixelSize(256), .size(width: 256, height: 256, contentMode: .aspectFill)), // 200.01 → 200
    ])
    func theFitCoversTheLongestSideAndTheFillBothKeepingTheAspectRatio(
        width: Double, height: Double, scale: Double, fit: DecodeSize, fill: DecodeSize
    ) {
        #expect(DisplaySize(width: width, height: height, scale: scale).decodeSize == fit) // fit is the default
        #expect(DisplaySize(width: width, height: height, scale: scale, contentMode: .aspectFill).decodeSize == fill)
    }

    @Test func anEmptySizeHasNoDecodeSizeAndTheModeIsPartOfTheIdentity() {
        #expect(DisplaySize(width: 0, height: 10, contentMode: .aspectFill).decodeSize == nil)
        #expect(DisplaySize(width: 10, height: 10) != DisplaySize(width: 10, height: 10, contentMode: .aspectFill))
    }
}
