import Foundation
import Lumen
import LumenTestSupport
import Testing

/// The README's "A taste of the API", run as written (against a loopback server instead of
/// the internet), so the README cannot drift from the code.
@Suite(.timeLimit(.minutes(1)))
struct ReadmeExampleTests {
    @Test func theReadmeExampleRunsAsWritten() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let photo = Bitmap(width: 800, height: 600, format: .rgb8) { pixels in
            for i in pixels.indices { pixels[i] = UInt8(truncatingIfNeeded: i / 7) }
        }
        server.serve(path: "/avatar.jpg", data: try photo.encode(as: .jpeg(quality: 90)), contentType: "image/jpeg")
        let avatarURL = server.url(for: "/avatar.jpg")
        let cacheDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-readme-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: cacheDirectory) }

        // --- README example begins (only `directory:` added, to keep the test hermetic) ---
        var configuration = ImagePipeline.Configuration()
        configuration.dataCache = DataCache(name: "avatars", directory: cacheDirectory)  // original bytes on disk
        let pipeline = ImagePipeline(configuration: configuration)

        // Decoded at the size it is shown, never bigger; equivalent requests share the work.
        let request = ImageRequest(url: avatarURL, processors: [ImageProcessors.Circle()], thumbnail: .maxPixelSize(128))
        async let first = pipeline.image(for: request)
        async let second = pipeline.image(for: request)
        let (a, b) = try await (first, second)  // one download, one decode, one circle
        let again = try await pipeline.image(for: request)
        let png = try again.image.encode(as: .png)
        // --- README example ends ---

        // An 800×600 photo decoded at 128×96; the circle crops the centre square.
        #expect(a.image.width == 96 && a.image.height == 96 && a.image.format == .rgba8)
        #expect(b.image.width == 96)
        #expect(again.cacheType == .memory)
        #expect(try ImageDecoder.info(for: png).format == .png)
        #expect(pipeline.metrics.networkRequestsStarted == 1)
        #expect(pipeline.metrics.decode.started == 1)
        #expect(pipeline.metrics.process.started == 1)
        #expect(server.statistics.totalRequests == 1)
    }
}
