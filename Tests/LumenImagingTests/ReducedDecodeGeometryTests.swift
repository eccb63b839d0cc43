import Foundation
import Testing
@testable import LumenImaging

/// A reduced decode (PNG's block means, JPEG's DCT scaling) of a side that is not a multiple
/// of the reduction ends in a pixel that covers only part of a block. The resampler maps the
/// target onto the image's true extent, so the thumbnail is not stretched towards that edge:
/// on a ramp, every column lands where a full decode + resample puts it.
@Suite(.timeLimit(.minutes(1)))
struct ReducedDecodeGeometryTests {
    /// A horizontal grey ramp, 0 at the left edge to 255 at the right, `height` rows.
    static func ramp(width: Int, height: Int) -> Bitmap {
        Bitmap(width: width, height: height, format: .rgb8) { out in
            for y in 0..<height {
                for x in 0..<width {
                    let v = UInt8((Double(x) * 255 / Double(width - 1)).rounded())
                    let i = (y * width + x) * 3
                    out[i] = v; out[i + 1] = v; out[i + 2] = v
                }
            }
        }
    }

    /// Mean and largest channel difference of two bitmaps of one size and format.
    static func differences(_ a: Bitmap, _ b: Bitmap) -> (mean: Double, max: Int) {
        precondition(a.width == b.width && a.height == b.height && a.format == b.format)
        var sum = 0, largest = 0
        for i in a.pixels.indices {
            let d = abs(Int(a.pixels[i]) - Int(b.pixels[i]))
            sum += d
            largest = max(largest, d)
        }
        return (Double(sum) / Double(a.pixels.count), largest)
    }

    /// The thumbnail of `data` at `size`, and the full decode resampled to the same size.
    static func thumbnailAndReference(_ data: Data, size: Int, options: DecodeOptions = DecodeOptions()) throws
        -> (thumbnail: DecodedImage, reference: Bitmap) {
        var reduced = options
        reduced.size = .maxPixelSize(size)
        let thumbnail = try ImageDecoder.decode(data, options: reduced)
        let full = try ImageDecoder.decode(data, options: options).bitmap
        let reference = Resampler.resample(full, width: thumbnail.bitmap.width, height: thumbnail.bitmap.height)
        return (thumbnail, reference)
    }

    @Test(arguments: [(770, 32), (1001, 40), (517, 60)])
    func pngBlockReductionKeepsColumnsInPlace(width: Int, size: Int) throws {
        let png = try Self.ramp(width: width, height: 24).encode(as: .png)
        let (thumbnail, reference) = try Self.thumbnailAndReference(png, size: size)
        let factor = (width + thumbnail.statistics.codecWidth - 1) / thumbnail.statistics.codecWidth
        #expect(factor > 1 && width % factor != 0, "the case must end in a partial block")
        let d = Self.differences(thumbnail.bitmap, reference)
        #expect(d.mean < 0.5 && d.max <= 2, "mean \(d.mean), max \(d.max)")
    }

    /// TurboJPEG's scaling and Lumen's own 1/8 decoder (for a side not a multiple of 8): the
    /// last output pixel also carries the encoder's edge padding, so it may differ a little
    /// more; the rest of the row stays in place.
    @Test(arguments: [false, true])
    func jpegScalingKeepsColumnsInPlace(eighthDecoder: Bool) throws {
        let jpeg = try Self.ramp(width: 1001, height: 64).encode(as: .jpeg(quality: 95))
        var options = DecodeOptions()
        options.allowsReducedScaleDecoder = eighthDecoder
        let (thumbnail, reference) = try Self.thumbnailAndReference(jpeg, size: 100, options: options)
        #expect(thumbnail.statistics.codecWidth == 126, "1/8 scale: \(thumbnail.statistics.codecWidth)")
        let d = Self.differences(thumbnail.bitmap, reference)
        #expect(d.mean < 0.6 && d.max <= 3, "mean \(d.mean), max \(d.max)")
    }

    /// When DCT scaling lands exactly on the target size (33 px at 1/8 is 5 pixels, and 5 is
    /// the target), the scaled pixels are still not the target's grid: the fifth covers one
    /// source column, not 6.6. The decode resamples over the extent anyway; taking the scaled
    /// pixels as they are squeezed the picture towards the partial edge (on the 33 px ramp,
    /// 22 levels off on average and 40 at worst; on the 1001 px one, about 1 on average).
    @Test(arguments: [(33, 17, 5, 4.0, 8), (1001, 64, 126, 0.5, 2)], [false, true])
    func jpegScalingThatLandsOnTheTargetStillKeepsColumnsInPlace(
        image: (width: Int, height: Int, size: Int, meanLimit: Double, maxLimit: Int), eighthDecoder: Bool
    ) throws {
        let jpeg = try Self.ramp(width: image.width, height: image.height).encode(as: .jpeg(quality: 95))
        var options = DecodeOptions()
        options.allowsReducedScaleDecoder = eighthDecoder
        let (thumbnail, reference) = try Self.thumbnailAndReference(jpeg, size: image.size, options: options)
        let statistics = thumbnail.statistics
        #expect(statistics.codecWidth == thumbnail.bitmap.width && statistics.codecHeight == thumbnail.bitmap.height,
                "the case: the 1/8 scale is the target size (\(statistics.codecWidth)x\(statistics.codecHeight))")
        #expect(image.width % 8 != 0 && statistics.codecWidth == (image.width + 7) / 8)
        #expect(statistics.isResampled)
        let d = Self.differences(thumbnail.bitmap, reference)
        #expect(d.mean < image.meanLimit && d.max <= image.maxLimit, "mean \(d.mean), max \(d.max)")
    }
}
