import Foundation
import Testing
import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Contract review of progressive previews (`isProgressiveDecodingEnabled`, `.preview` events,
/// `ImageResponse.isPreview`).
@Suite(.timeLimit(.minutes(1)))
struct ProgressiveContractTests {
    static func photo(width: Int, height: Int) -> Bitmap {
        Bitmap(width: width, height: height, format: .rgb8) { pixels in
            for i in pixels.indices {
                let x = (i / 3) % width, y = (i / 3) / width
                pixels[i] = UInt8(truncatingIfNeeded: (x * 3) ^ (y * 5) &+ (i % 3) * 40)
            }
        }
    }

    static func jpeg(progressive: Bool, width: Int = 400, height: Int = 300) throws -> Data {
        try photo(width: width, height: height).encode(as: .jpeg(quality: 85, progressive: progressive))
    }

    /// Offsets of the start-of-scan markers.
    static func scanStarts(_ data: Data) -> [Int] {
        let bytes = [UInt8](data)
        return (0..<(bytes.count - 1)).filter { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xDA }
    }

    enum Seen: Equatable {
        case progress(Int64)
        case preview(width: Int, height: Int, isPreview: Bool)
        case finished(width: Int, height: Int, isPreview: Bool)
        case failed(String)
    }

    static func record(_ event: ImageTask.Event) -> Seen {
        switch event {
        case .progress(let p): return .progress(p.completed)
        case .preview(let r): return .preview(width: r.image.width, height: r.image.height, isPreview: r.isPreview)
        case .finished(.success(let r)): return .finished(width: r.image.width, height: r.image.height, isPreview: r.isPreview)
        case .finished(.failure(let e)): return .failed("\(e)")
        }
    }

    static func isPreview(_ seen: Seen) -> Bool { if case .preview = seen { true } else { false } }
    static func isEnd(_ seen: Seen) -> Bool {
        switch seen {
        case .finished, .failed: true
        default: false
        }
    }

    /// Over HTTP with the default loader: the body pauses after two scans; a preview arrives
    /// while it is paused; after the release the final image ends the stream; nothing follows it.
    @Test func loopbackProgressiveGivesPreviewsThenTheFinalImage() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let jpeg = try Self.jpeg(progressive: true)
        let starts = Self.scanStarts(jpeg)
        #expect(starts.count >= 4)
        server.serve(path: "/p.jpg", data: jpeg, contentType: "image/jpeg")
        server.holdBody("/p.jpg", after: starts[2] + 2)
        var configuration = ImagePipeline.Configuration()
        configuration.isProgressiveDecodingEnabled = true
        let pipeline = ImagePipeline(configuration: configuration)
        // An events stream open before the download starts (previews are decoded only while
        // one is open): a held request's, so that no byte of the image arrives unseen.
        server.serve(path: "/dummy", data: jpeg)
        server.hold("/dummy")
        let dummy = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/dummy")))
        let dummyEvents = dummy.events
        defer { dummy.cancel(); _ = dummyEvents }
        let task = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/p.jpg")))
        var seen: [Seen] = []
        var released = false
        for await event in task.events {
            let s = Self.record(event)
            seen.append(s)
            if Self.isPreview(s), !released {
                released = true
                #expect(server.statistics.pausedBodies == 1) // the preview came while the body was paused
                server.release("/p.jpg")
            }
        }
        #expect(released)
        #expect(seen.last == .finished(width: 400, height: 300, isPreview: false))
        #expect(seen.filter(Self.isEnd).count == 1)
        for s in seen where Self.isPreview(s) { #expect(s == .preview(width: 400, height: 300, isPreview: true)) }
        // `image(for:)` never sees a preview; the memory cache holds the final image.
        let again = try await pipeline.image(for: server.url(for: "/p.jpg"))
        #expect(!again.isPreview)
        #expect(again.cacheType == .memory)
    }

    @Test func loopbackBaselineGivesNoPreviews() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let jpeg = try Self.jpeg(progressive: false)
        server.serve(path: "/b.jpg", data: jpeg, contentType: "image/jpeg")
        let held = jpeg.count * 3 / 4
        server.holdBody("/b.jpg", after: held)
        var configuration = ImagePipeline.Configuration()
        configuration.isProgressiveDecodingEnabled = true
        let pipeline = ImagePipeline(configuration: configuration)
        // An events stream open before the download starts (previews are decoded only while
        // one is open): a held request's, so that no byte of the image arrives unseen.
        server.serve(path: "/dummy", data: jpeg)
        server.hold("/dummy")
        let dummy = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/dummy")))
        let dummyEvents = dummy.events
        defer { dummy.cancel(); _ = dummyEvents }
        let task = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/b.jpg")))
        let stream = task.events
        var seen: [Seen] = []
        var released = false
        if task.progress.completed >= Int64(held) { // arrived before the stream was open
            released = true
            server.release("/b.jpg")
        }
        for await event in stream {
            let s = Self.record(event)
            seen.append(s)
            if case .progress(let n) = s, n >= Int64(held), !released {
                released = true
                server.release("/b.jpg")
            }
        }
        #expect(released)
        #expect(!seen.contains(where: Self.isPreview))
        #expect(seen.last == .finished(width: 400, height: 300, isPreview: false))
        #expect(pipeline.metrics.previewDecodes == 0)
    }

    /// Previews of a request with processors (and a decode size) are processed: the same size
    /// as the final image.
    @Test func previewsOfAProcessedRequestAreProcessed() async throws {
        let loader = MockDataLoader()
        let jpeg = try Self.jpeg(progressive: true)
        let url = URL(string: "https://example.com/processed.jpg")!
        let starts = Self.scanStarts(jpeg)
        loader.serve(jpeg, for: url, splitAt: [starts[1] + 2, starts[2] + 2, starts[3] + 2])
        loader.holdsChunks = true
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.isProgressiveDecodingEnabled = true
        let pipeline = ImagePipeline(configuration: configuration)
        let request = ImageRequest(url: url, processors: [ImageProcessors.Resize(width: 100)], thumbnail: .maxPixelSize(200))
        let task = pipeline.imageTask(with: request)
        let stream = task.events
        var seen: [Seen] = []
        loader.releaseChunks(1)
        for await event in stream {
            let s = Self.record(event)
            seen.append(s)
            if Self.isPreview(s) { loader.holdsChunks = false }
        }
        #expect(seen.contains(where: Self.isPreview))
        #expect(seen.last == .finished(width: 100, height: 75, isPreview: false))
        for s in seen where Self.isPreview(s) { #expect(s == .preview(width: 100, height: 75, isPreview: true)) }
        #expect(pipeline.metrics.previewProcessorApplications >= 1)
        #expect(pipeline.metrics.processorApplications == 1)
        #expect(seen.filter(Self.isEnd).count == 1)
    }

    /// Two requests share the decode: the plain one's previews are full size, the processed
    /// one's are processed; each stream ends with exactly one `.finished`.
    @Test(arguments: 0..<3)
    func sharedDecodeGivesEachRequestItsOwnPreviews(round: Int) async throws {
        let loader = MockDataLoader()
        let jpeg = try Self.jpeg(progressive: true)
        let url = URL(string: "https://example.com/shared-\(round).jpg")!
        let starts = Self.scanStarts(jpeg)
        loader.serve(jpeg, for: url, splitAt: [starts[1] + 2, starts[2] + 2, starts[3] + 2])
        loader.holdsChunks = true
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.isProgressiveDecodingEnabled = true
        let pipeline = ImagePipeline(configuration: configuration)
        let plain = pipeline.imageTask(with: ImageRequest(url: url))
        let small = pipeline.imageTask(with: ImageRequest(url: url, processors: [ImageProcessors.Resize(width: 100)]))
        let plainEvents = plain.events, smallEvents = small.events
        loader.releaseChunks(1)
        async let a: [Seen] = { var out: [Seen] = []; for await e in plainEvents { out.append(Self.record(e)) }; return out }()
        var b: [Seen] = []
        for await e in smallEvents {
            let s = Self.record(e)
            b.append(s)
            if Self.isPreview(s) { loader.holdsChunks = false }
        }
        let seenA = await a
        #expect(b.contains(where: Self.isPreview))
        for s in seenA where Self.isPreview(s) { #expect(s == .preview(width: 400, height: 300, isPreview: true)) }
        for s in b where Self.isPreview(s) { #expect(s == .preview(width: 100, height: 75, isPreview: true)) }
        #expect(seenA.last == .finished(width: 400, height: 300, isPreview: false))
        #expect(b.last == .finished(width: 100, height: 75, isPreview: false))
        #expect(seenA.filter(Self.isEnd).count == 1 && b.filter(Self.isEnd).count == 1)
        #expect(loader.loadCount == 1 && pipeline.metrics.decodes == 1)
    }

    /// Off by default: no previews even for a progressive JPEG with an open stream.
    @Test func offByDefault() async throws {
        let loader = MockDataLoader()
        let jpeg = try Self.jpeg(progressive: true)
        let url = URL(string: "https://example.com/off.jpg")!
        let starts = Self.scanStarts(jpeg)
        loader.serve(jpeg, for: url, splitAt: [starts[1] + 2, starts[2] + 2])
        loader.isSuspended = true
        let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
        let task = pipeline.imageTask(with: ImageRequest(url: url))
        let stream = task.events
        loader.resume()
        var seen: [Seen] = []
        for await event in stream { seen.append(Self.record(event)) }
        #expect(!seen.contains(where: Self.isPreview))
        #expect(pipeline.metrics.previewDecodes == 0)
        #expect(seen.last == .finished(width: 400, height: 300, isPreview: false))
    }
}
