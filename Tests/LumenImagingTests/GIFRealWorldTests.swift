import Foundation
import Testing
@testable import LumenImaging

/// The GIFs in `real-world/` (from Pillow's test suite). Expectations come from the files'
/// block structure, read by the test's own walker (``GIFBlocks``), not from giflib.
@Suite(.timeLimit(.minutes(1)))
struct GIFRealWorldTests {
    private func file(_ name: String) throws -> (data: Data, blocks: (width: Int, height: Int, frames: [GIFBlocks.Frame])) {
        let data = try CorpusPNG.data("real-world/\(name)")
        return (data, try #require(GIFBlocks.parse(data)))
    }

    /// Browser timing: 0 or 1 hundredths play as 0.1 s.
    private func expectedDuration(_ delay: Int) -> Double { delay <= 1 ? 0.1 : Double(delay) / 100 }

    @Test func chiDecodesEveryFrameWithItsDuration() throws {
        // chi.gif: 320×240, 31 full-canvas frames, 10 cs each, transparent index declared.
        let (data, blocks) = try file("chi.gif")
        let frames = try ImageDecoder.decodeFrames(data)
        #expect(frames.count == blocks.frames.count)
        #expect(frames.count > 1)
        for (frame, declared) in zip(frames, blocks.frames) {
            #expect(frame.bitmap.width == blocks.width && frame.bitmap.height == blocks.height)
            #expect(frame.duration == expectedDuration(declared.delay))
        }
        let first = try ImageDecoder.decode(data).bitmap
        // A declared transparent index makes the first frame RGBA.
        #expect(first.format == (blocks.frames[0].transparentIndex == nil ? .rgb8 : .rgba8))
        #expect(CorpusPNG.rgba(first) == CorpusPNG.rgba(frames[0].bitmap))
        // Plausible: a photo-like animation, mostly opaque and not one flat colour.
        let opaque = stride(from: 3, to: first.pixels.count, by: 4).filter { first.pixels[$0] == 255 }.count
        #expect(opaque > first.pixelCount / 2)
        #expect(Set(first.pixels).count > 16)
    }

    @Test func disposeToBackgroundClearsThePreviousRectangle() throws {
        // dispose_bgnd.gif: a full-canvas first frame (keep), then four 32×32 frames with local
        // colour tables, each disposed to background (= transparent) before the next is drawn.
        let (data, blocks) = try file("dispose_bgnd.gif")
        let frames = try ImageDecoder.decodeFrames(data)
        try #require(frames.count == blocks.frames.count && frames.count == 5)
        func inside(_ f: GIFBlocks.Frame, _ x: Int, _ y: Int) -> Bool {
            x >= f.left && x < f.left + f.width && y >= f.top && y < f.top + f.height
        }
        for i in 1..<frames.count {
            let previous = blocks.frames[i - 1], current = blocks.frames[i]
            let image = frames[i].bitmap
            #expect(image.format == .rgba8)
            #expect(frames[i].duration == expectedDuration(current.delay))
            // Pixels the current frame draws are opaque and come from its local colour table.
            let colors = Set(current.localColors)
            for y in current.top..<current.top + current.height {
                for x in current.left..<current.left + current.width {
                    let p = image.rgba(x: x, y: y)
                    #expect(p.a == 255 && colors.contains([p.r, p.g, p.b]), "frame \(i) (\(x), \(y))")
                }
            }
            // Where the previous frame was (and the current one is not): transparent.
            if previous.disposal == 2 && i >= 2 {
                var checked = 0
                for y in previous.top..<previous.top + previous.height {
                    for x in previous.left..<previous.left + previous.width where !inside(current, x, y) {
                        #expect(image.rgba(x: x, y: y).a == 0, "frame \(i) (\(x), \(y))")
                        checked += 1
                    }
                }
                #expect(checked > 0)
            }
        }
        // Disposing frame 0 is "keep" (1): where no later frame ever drew, frame 0 stays.
        let untouched = (0..<blocks.height).flatMap { y in (0..<blocks.width).map { (x: $0, y: y) } }
            .filter { p in !blocks.frames.dropFirst().contains { inside($0, p.x, p.y) } }
        try #require(!untouched.isEmpty)
        for frame in frames.dropFirst() {
            for p in untouched.prefix(200) {
                #expect(frame.bitmap.rgba(x: p.x, y: p.y) == frames[0].bitmap.rgba(x: p.x, y: p.y))
            }
        }
    }

    @Test func hopperIsOneOpaqueFrame() throws {
        // hopper.gif: 128×128, one frame covering the canvas, no transparency: RGB.
        let (data, blocks) = try file("hopper.gif")
        let image = try ImageDecoder.decode(data).bitmap
        #expect(image.width == blocks.width && image.height == blocks.height && image.format == .rgb8)
        let frames = try ImageDecoder.decodeFrames(data)
        #expect(frames.count == 1 && frames[0].duration == expectedDuration(blocks.frames[0].delay))
    }

    @Test func decompressionBombIsRefusedBeforeAllocating() throws {
        // decompression_bomb.gif: a 32×32 screen whose first frame claims a 65535-wide
        // rectangle far below it. Like browsers, Lumen grows the canvas to hold the first
        // frame, so the header declares ~4.4 gigapixels and the limit refuses it before any
        // pixel exists (the LZW data after the descriptor is broken anyway, and never read).
        let (data, blocks) = try file("decompression_bomb.gif")
        let frame = try #require(blocks.frames.first)
        let width = max(blocks.width, frame.left + frame.width), height = max(blocks.height, frame.top + frame.height)
        let info = try ImageDecoder.info(for: data)
        #expect(info.width == width && info.height == height)
        let rssBefore = CorpusPNG.peakRSS()
        #expect(CorpusPNG.decodeError(data) == .tooLarge(width: width, height: height))
        #expect(throws: ImagingError.tooLarge(width: width, height: height)) { try ImageDecoder.decodeFrames(data) }
        let growth = CorpusPNG.peakRSS() - rssBefore
        let declaredBytes = width * height * 4
        #expect(growth < declaredBytes / 100, "peak RSS grew by \(growth) bytes for a \(declaredBytes)-byte canvas")
    }
}
