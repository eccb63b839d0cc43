import Foundation
import Testing
@testable import LumenImaging

/// Compositing, timing and limits on hand-made GIFs (written by ``SyntheticGIF``).
@Suite(.timeLimit(.minutes(1)))
struct GIFAnimationTests {
    /// Index i is (i, 255 - i, i / 2).
    static let colors: [(UInt8, UInt8, UInt8)] = (0..<256).map { (UInt8($0), UInt8(255 - $0), UInt8($0 / 2)) }

    private func solid(_ index: UInt8, left: Int = 0, top: Int = 0, width: Int, height: Int, disposal: Int = 0, delay: Int = 10) -> SyntheticGIF.Frame {
        SyntheticGIF.Frame(left: left, top: top, width: width, height: height,
                           indices: [UInt8](repeating: index, count: width * height), delay: delay, disposal: disposal)
    }

    static func framesError(_ data: Data) -> ImagingError? {
        do { _ = try ImageDecoder.decodeFrames(data); return nil } catch { return error }
    }

    private func color(_ index: Int) -> (UInt8, UInt8, UInt8, UInt8) {
        (Self.colors[index].0, Self.colors[index].1, Self.colors[index].2, 255)
    }

    @Test func framesTimesAreaLimitStopsBeforeTheNextFrameIsDecoded() throws {
        // 100×100 canvas, 20 frames; frames 6… carry broken LZW data. A budget of 5 frames must
        // refuse with tooLarge at frame 6, before decoding it (else the error would be corrupted).
        var frames = (0..<20).map { solid(UInt8($0), width: 100, height: 100) }
        for i in 5..<20 { frames[i].corruptData = true }
        let data = SyntheticGIF.make(width: 100, height: 100, colors: Self.colors, frames: frames)
        let options = DecodeOptions(maximumPixelCount: 5 * 100 * 100)
        #expect(throws: ImagingError.tooLarge(width: 100, height: 100)) { try ImageDecoder.decodeFrames(data, options: options) }
        // Without the budget the broken frames are reached, and reported.
        #expect(CorpusPNG.isCorrupted(Self.framesError(data)))
        // Within the budget the five good frames decode.
        let good = SyntheticGIF.make(width: 100, height: 100, colors: Self.colors, frames: Array(frames.prefix(5)))
        let decoded = try ImageDecoder.decodeFrames(good, options: options)
        #expect(decoded.count == 5)
        #expect(decoded[4].bitmap.rgba(x: 50, y: 50) == color(4))
        // And the first frame alone is fine whatever follows it.
        #expect(try ImageDecoder.decode(data, options: options).bitmap.rgba(x: 0, y: 0) == color(0))
    }

    @Test func manyTinyFramesCountAgainstTheCanvas() throws {
        // 1×1 frames on a 300×300 canvas still cost a full canvas each.
        let frames = (0..<12).map { solid(UInt8($0), left: $0, top: 0, width: 1, height: 1) }
        let data = SyntheticGIF.make(width: 300, height: 300, colors: Self.colors, frames: frames)
        #expect(throws: ImagingError.tooLarge(width: 300, height: 300)) {
            try ImageDecoder.decodeFrames(data, options: DecodeOptions(maximumPixelCount: 10 * 300 * 300))
        }
        #expect(try ImageDecoder.decodeFrames(data, options: DecodeOptions(maximumPixelCount: 12 * 300 * 300)).count == 12)
    }

    @Test func durationsFollowBrowserTiming() throws {
        let frames = [0, 1, 2, 50].map { solid(1, width: 4, height: 4, delay: $0) }
        let data = SyntheticGIF.make(width: 4, height: 4, colors: Self.colors, frames: frames)
        #expect(try ImageDecoder.decodeFrames(data).map(\.duration) == [0.1, 0.1, 0.02, 0.5])
    }

    @Test func restoreToPreviousPutsBackTheCanvas() throws {
        // Frame 0 fills red-ish index 10 (keep); frame 1 draws a square with "restore to
        // previous"; frame 2 draws elsewhere: frame 1's square must show frame 0 again.
        let frames = [
            solid(10, width: 20, height: 20, disposal: 1),
            solid(20, left: 2, top: 2, width: 5, height: 5, disposal: 3),
            solid(30, left: 12, top: 12, width: 5, height: 5, disposal: 1),
        ]
        let data = SyntheticGIF.make(width: 20, height: 20, colors: Self.colors, frames: frames)
        let out = try ImageDecoder.decodeFrames(data)
        try #require(out.count == 3)
        #expect(out[0].bitmap.format == .rgb8)  // every frame opaque
        #expect(out[1].bitmap.rgba(x: 3, y: 3) == color(20))
        #expect(out[2].bitmap.rgba(x: 3, y: 3) == color(10))
        #expect(out[2].bitmap.rgba(x: 13, y: 13) == color(30))
    }

    @Test func transparentIndexShowsThePreviousFrame() throws {
        // Frame 1 covers the canvas; its left half uses the transparent index 7.
        let base = solid(3, width: 8, height: 8, disposal: 1)
        var top = solid(5, width: 8, height: 8)
        for y in 0..<8 { for x in 0..<4 { top.indices[y * 8 + x] = 7 } }
        top.transparentIndex = 7
        let data = SyntheticGIF.make(width: 8, height: 8, colors: Self.colors, frames: [base, top])
        let out = try ImageDecoder.decodeFrames(data)
        #expect(out[1].bitmap.rgba(x: 1, y: 1) == color(3))
        #expect(out[1].bitmap.rgba(x: 6, y: 1) == color(5))
        // Alone, a frame with a transparent index comes out RGBA with those pixels clear.
        let single = SyntheticGIF.make(width: 8, height: 8, colors: Self.colors, frames: [top])
        let image = try ImageDecoder.decode(single).bitmap
        #expect(image.format == .rgba8)
        #expect(image.rgba(x: 1, y: 1).a == 0 && image.rgba(x: 6, y: 1) == color(5))
    }

    @Test func interlacedFrameRowsLandInOrder() throws {
        // Row y uses colour index y: after de-interlacing, row y must be colour y.
        let height = 19, width = 3
        let frame = SyntheticGIF.Frame(width: width, height: height,
                                       indices: (0..<height).flatMap { [UInt8](repeating: UInt8($0), count: width) },
                                       interlaced: true)
        let data = SyntheticGIF.make(width: width, height: height, colors: Self.colors, frames: [frame])
        let image = try ImageDecoder.decode(data).bitmap
        for y in 0..<height { #expect(image.rgba(x: 1, y: y) == color(y), "row \(y)") }
    }

    @Test func framesReachingOutsideTheCanvasAreClipped() throws {
        // A later frame hanging over the edge draws only its inside part; one wholly outside is
        // skipped; neither errors.
        let frames = [
            solid(1, width: 10, height: 10, disposal: 1),
            solid(2, left: 7, top: 7, width: 6, height: 6, disposal: 1),
            solid(3, left: 500, top: 500, width: 40, height: 40, disposal: 1),
        ]
        let data = SyntheticGIF.make(width: 10, height: 10, colors: Self.colors, frames: frames)
        let out = try ImageDecoder.decodeFrames(data)
        try #require(out.count == 3)
        #expect(out[1].bitmap.width == 10 && out[1].bitmap.rgba(x: 9, y: 9) == color(2) && out[1].bitmap.rgba(x: 6, y: 6) == color(1))
        #expect(CorpusPNG.rgba(out[2].bitmap) == CorpusPNG.rgba(out[1].bitmap))
    }

    @Test func firstFrameLargerThanTheScreenGrowsTheCanvas() throws {
        // Screen 4×4, first frame 6×5 at (1, 1): the canvas becomes 7×6, as in browsers.
        let data = SyntheticGIF.make(width: 4, height: 4, colors: Self.colors, frames: [solid(9, left: 1, top: 1, width: 6, height: 5)])
        let image = try ImageDecoder.decode(data).bitmap
        #expect(image.width == 7 && image.height == 6 && image.format == .rgba8)
        #expect(image.rgba(x: 0, y: 0).a == 0 && image.rgba(x: 6, y: 5) == color(9))
    }

    @Test func missingTrailerKeepsTheFramesRead() throws {
        // Many encoders omit the final ';'. Data ending between frames is a complete animation;
        // data ending inside a frame is truncated.
        var bytes = [UInt8](SyntheticGIF.make(width: 4, height: 4, colors: Self.colors, frames: [solid(1, width: 4, height: 4), solid(2, width: 4, height: 4)]))
        bytes.removeLast()
        #expect(try ImageDecoder.decodeFrames(Data(bytes)).count == 2)
        #expect(throws: ImagingError.truncated) { try ImageDecoder.decodeFrames(Data(bytes.dropLast(4))) }
    }
}
