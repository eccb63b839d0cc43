import Foundation
import Testing
@testable import LumenImaging

/// A GIF frame's declared area is checked before its rows are decompressed: every row of a
/// frame costs CPU even when the canvas clips it away.
@Suite(.timeLimit(.minutes(1)))
struct GIFFrameLimitTests {
    static let palette = (0..<256).map { (UInt8($0), UInt8($0), UInt8($0)) }

    @Test func aHugeFrameOnATinyCanvasIsRefusedBeforeItsDataIsRead() throws {
        // The second frame's data is garbage: reading it would fail as `corrupted`; refusing it
        // from its descriptor gives `tooLarge` with the frame's size.
        let gif = SyntheticGIF.make(width: 1, height: 1, colors: Self.palette, frames: [
            SyntheticGIF.Frame(width: 1, height: 1, indices: [7]),
            SyntheticGIF.Frame(width: 16_384, height: 16_384, indices: [], corruptData: true),
        ])
        #expect(throws: ImagingError.tooLarge(width: 16_384, height: 16_384)) {
            try ImageDecoder.decodeFrames(gif)
        }
        // The first frame alone is fine.
        #expect(try ImageDecoder.decode(gif).bitmap.width == 1)
    }

    @Test func aHugeFirstFrameIsRefusedToo() throws {
        let gif = SyntheticGIF.make(width: 1, height: 1, colors: Self.palette, frames: [
            SyntheticGIF.Frame(width: 4000, height: 4000, indices: [], corruptData: true),
        ])
        #expect(throws: ImagingError.tooLarge(width: 4000, height: 4000)) {
            try ImageDecoder.decode(gif, options: DecodeOptions(maximumPixelCount: 1_000_000))
        }
    }
}
