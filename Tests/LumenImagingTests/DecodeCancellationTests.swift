import Foundation
import Testing
@testable import LumenImaging

/// A ``DecodeCancellation`` stops a decode part-way: the loops that decode in steps (Lumen's
/// reduced-scale JPEG decoder, the PNG row readers) look at it before each step, and the
/// decoder's entry looks before anything starts. A flag that is never set changes nothing.
@Suite(.timeLimit(.minutes(1)))
struct DecodeCancellationTests {
    static let photo = CorpusJPEG.photoLike(width: 640, height: 480, seed: 7)

    static func cancelled() -> DecodeCancellation {
        let flag = DecodeCancellation()
        flag.cancel()
        return flag
    }

    /// The error `body` throws, as an ``ImagingError`` (`nil` when it returns or throws another).
    static func thrown(_ body: () throws -> Void) -> ImagingError? {
        do { try body() } catch { return error as? ImagingError }
        return nil
    }

    @Test func theFlagIsSetOnceAndComparesByIdentity() {
        let a = DecodeCancellation(), b = DecodeCancellation()
        #expect(!a.isCancelled)
        a.cancel()
        a.cancel()
        #expect(a.isCancelled && !b.isCancelled)
        var x = DecodeOptions(), y = DecodeOptions()
        x.cancellation = a
        y.cancellation = a
        #expect(x == y)
        y.cancellation = b
        #expect(x != y)
    }

    /// Lumen's own 1/8 and 1/4 decoder has no check before its loop: a set flag must stop it
    /// at its first row of blocks (and not send the image to TurboJPEG instead).
    @Test(arguments: [8, 4])
    func theReducedJPEGDecoderStopsInItsLoop(denominator: Int) throws {
        let jpeg = try Self.photo.encode(as: .jpeg(quality: 85))
        let plain = try #require(try JPEGEighthScaleTests.reduced(jpeg, denominator: denominator))
        let unset = try #require(try JPEGEighthScaleTests.reduced(jpeg, denominator: denominator, cancellation: DecodeCancellation()))
        #expect(unset.pixels == plain.pixels)
        #expect(throws: ImagingError.cancelled) {
            try JPEGEighthScaleTests.reduced(jpeg, denominator: denominator, cancellation: Self.cancelled())
        }
    }

    /// The PNG paths that read rows (ISA-L's reader and libspng's, reduced or at full size)
    /// look at the flag before each row; a missing row is then a cancellation, not a reason
    /// to decode again with libspng.
    @Test(arguments: [(true, true), (true, false), (false, true), (false, false)])
    func thePNGRowReadersStopBetweenRows(fastRows: Bool, reduced: Bool) throws {
        let png = try Self.photo.encode(as: .png)
        var options = DecodeOptions()
        options.allowsFastPNGRows = fastRows
        let minimum = reduced ? PixelSize(width: 100, height: 75) : nil
        func decode(_ options: DecodeOptions) throws -> Bitmap {
            try png.withUnsafeBytes { bytes throws(ImagingError) -> Bitmap in
                let header = try PNGCodec.readHeader(bytes, options: options)
                return try PNGCodec.decode(bytes, header: header, minimumSize: minimum, options: options).bitmap
            }
        }
        let plain = try decode(options)
        #expect(plain.width == (reduced ? 640 / 6 + 1 : 640))
        var unset = options
        unset.cancellation = DecodeCancellation()
        #expect(try decode(unset).pixels == plain.pixels)
        var stopped = options
        stopped.cancellation = Self.cancelled()
        #expect(Self.thrown { _ = try decode(stopped) } == .cancelled)
    }

    /// Every format stops before it starts when the flag is already set.
    @Test(arguments: [EncodingFormat.jpeg(quality: 85), .png, .webp(quality: 80)])
    func aCancelledDecodeThrowsCancelled(format: EncodingFormat) throws {
        let data = try Self.photo.encode(as: format)
        for size: DecodeSize? in [nil, .maxPixelSize(100)] {
            var options = DecodeOptions(size: size)
            options.cancellation = DecodeCancellation()
            let image = try ImageDecoder.decode(data, options: options)
            #expect(image.bitmap.width == (size == nil ? 640 : 100))
            options.cancellation = Self.cancelled()
            #expect(Self.thrown { _ = try ImageDecoder.decode(data, options: options) } == .cancelled)
        }
    }
}
