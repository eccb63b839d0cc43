import Foundation
import Testing
@testable import Lumen
@testable import LumenUI
import LumenTestSupport

/// Animated images through the pipeline (issue 23): `.decodeAllFrames` asks for every frame,
/// composited, with durations, at the request's size, bounded by the pixel limit for all
/// frames together; the memory cache costs them all; processors apply to each; `FetchImage`
/// exposes them; a GIF's frames encode as an animated WebP.
@Suite(.timeLimit(.minutes(1)))
struct AnimatedPipelineTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/corpus/real-world")

    /// chi.gif: 320×240, 31 composited frames of 0.1 s.
    static func gif() throws -> Data { try Data(contentsOf: corpus.appendingPathComponent("chi.gif")) }

    static func server() throws -> (LoopbackServer, URL) {
        let server = try LoopbackServer()
        server.serve(path: "/chi.gif", data: try gif(), contentType: "image/gif")
        return (server, server.url(for: "/chi.gif"))
    }

    static func animated(_ url: URL, size: Int = 64, processors: [any ImageProcessing] = []) -> ImageRequest {
        ImageRequest(url: url, processors: processors, options: [.decodeAllFrames], thumbnail: .maxPixelSize(size))
    }

    @Test func everyFrameComesThroughAtTheRequestedSize() async throws {
        let (server, url) = try Self.server()
        defer { server.stop() }
        let pipeline = ImagePipeline()
        let response = try await pipeline.image(for: Self.animated(url))
        let frames = try #require(response.frames)
        let reference = try ImageDecoder.decodeFrames(try Self.gif(), options: DecodeOptions(size: .maxPixelSize(64)))
        #expect(frames.count == 31 && reference.count == 31)
        for (frame, expected) in zip(frames, reference) {
            #expect(frame.bitmap.width == 64 && frame.bitmap.height == 48)
            #expect(frame.bitmap.pixels == expected.bitmap.pixels)
            #expect(abs(frame.duration - 0.1) < 1e-9)
        }
        #expect(response.image.pixels == frames[0].bitmap.pixels)
        #expect(response.container.format == .gif)
        // The memory cache costs every frame.
        let cached = try #require(pipeline.cache[Self.animated(url)])
        #expect(cached.cost == frames.reduce(0) { $0 + $1.bitmap.byteCount })
        #expect(cached.cost > 30 * frames[0].bitmap.byteCount)
    }

    /// The still request and the animated one share the download, not the decode, and each
    /// has its own memory entry.
    @Test func stillAndAnimatedRequestsShareOnlyTheDownload() async throws {
        let (server, url) = try Self.server()
        defer { server.stop() }
        let pipeline = ImagePipeline()
        server.hold("/chi.gif")
        let still = pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(64)))
        let moving = pipeline.imageTask(with: Self.animated(url))
        try await server.waitForRequests(path: "/chi.gif", count: 1)
        server.release("/chi.gif")
        let (a, b) = try await (still.response, moving.response)
        #expect(a.frames == nil && b.frames?.count == 31)
        #expect(server.requestCount(for: "/chi.gif") == 1)
        #expect(pipeline.metrics.decode.started == 2)
        let again = try await pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(64)))
        #expect(again.cacheType == .memory && again.frames == nil)
        let againMoving = try await pipeline.image(for: Self.animated(url))
        #expect(againMoving.cacheType == .memory && againMoving.frames?.count == 31)
    }

    @Test func processorsApplyToEveryFrame() async throws {
        let (server, url) = try Self.server()
        defer { server.stop() }
        let response = try await ImagePipeline().image(for: Self.animated(url, processors: [ImageProcessors.Circle()]))
        let frames = try #require(response.frames)
        #expect(frames.count == 31)
        #expect(frames.allSatisfy { $0.bitmap.width == 48 && $0.bitmap.height == 48 && $0.bitmap.format == .rgba8 })
        #expect(response.image.width == 48)
    }

    /// The pixel limit counts every frame: an animation over it fails; its first frame alone,
    /// within it, still decodes.
    @Test func thePixelLimitCountsEveryFrame() async throws {
        let (server, url) = try Self.server()
        defer { server.stop() }
        let pipeline = ImagePipeline { $0.maximumDecodedPixelCount = 320 * 240 * 4 }
        let error = try #require(await errorThrown { try await pipeline.image(for: Self.animated(url, size: 320)) } as? ImagePipeline.Error)
        #expect(error.code == .decodingFailed)
        let still = try await pipeline.image(for: ImageRequest(url: url))
        #expect(still.image.width == 320 && still.frames == nil)
    }

    @Test func aStillImageHasNoFrames() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let png = try Bitmap(width: 20, height: 10, format: .rgb8) { _ in }.encode(as: .png)
        server.serve(path: "/still.png", data: png, contentType: "image/png")
        let response = try await ImagePipeline().image(for: Self.animated(server.url(for: "/still.png")))
        #expect(response.frames == nil && response.image.width == 20)
    }

    /// A GIF comes out as an animated WebP showing the same picture at every moment: libwebp
    /// merges identical consecutive frames into one longer one, so the timelines are compared.
    @Test func aGIFEncodesAsAnAnimatedWebP() async throws {
        let (server, url) = try Self.server()
        defer { server.stop() }
        let response = try await ImagePipeline().image(for: Self.animated(url))
        let frames = try #require(response.frames)
        let webp = try response.container.encodedAsWebP(lossless: true)
        let info = try ImageDecoder.info(for: webp)
        #expect(info.format == .webp && info.frameCount > 1 && info.width == 64 && info.height == 48)
        let decoded = try ImageDecoder.decodeFrames(webp)
        let total = { (frames: [AnimationFrame]) in frames.reduce(0) { $0 + $1.duration } }
        #expect(abs(total(decoded) - total(frames)) < 0.001)
        // The frame shown at each original frame's start, lossless: the same pixels.
        var start = 0.0
        for original in frames {
            var end = 0.0
            let shown = try #require(decoded.first { end += $0.duration; return end > start + 0.0005 })
            #expect(shown.bitmap.converted(to: original.bitmap.format).pixels == original.bitmap.pixels, "at \(start) s")
            start += original.duration
        }
        // Only WebP holds an animation.
        #expect(throws: ImagingError.self) { try frames.encode(as: .jpeg(quality: 80)) }
        #expect(throws: ImagingError.self) { try frames.encode(as: .webp(quality: 101)) }
    }

    @MainActor
    @Test func fetchImageExposesTheFrames() async throws {
        let (server, url) = try Self.server()
        defer { server.stop() }
        let model = FetchImage(pipeline: ImagePipeline())
        model.load(ImageRequest(url: url, options: [.decodeAllFrames]))
        model.displaySize(width: 32, height: 32, scale: 2)
        await waitUntil(model) { $0.phase.image != nil }
        let frames = try #require(model.frames)
        #expect(frames.count == 31)
        #expect(frames[0].bitmap.pixels == model.phase.image?.pixels)
    }
}
