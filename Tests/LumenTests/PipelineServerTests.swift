import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import Lumen
import LumenTestSupport

@Suite(.timeLimit(.minutes(1)))
struct PipelineServerTests {
    @Test func twoHundredRequestsOverTwentyURLsReachTheServerTwentyTimes() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        for i in 0..<20 {
            server.serve(path: "/\(i).jpg", data: Data(repeating: UInt8(i), count: 1000 * (i + 1)))
            server.hold("/\(i).jpg")
        }
        var configuration = ImagePipeline.Configuration(dataLoader: DataLoader())
        configuration.decoder = TrivialImageDecoder()
        let pipeline = ImagePipeline(configuration: configuration)
        let tasks = (0..<200).map { i in pipeline.imageTask(with: ImageRequest(url: server.url(for: "/\(i % 20).jpg"))) }
        server.releaseAll()
        for task in tasks { _ = try await task.response }
        let stats = server.statistics
        #expect(stats.totalRequests == 20)
        #expect(stats.peakInFlightRequests <= 6)
        #expect(stats.peakConnections <= 6)
        #expect(pipeline.metrics.peakNetworkRequestsInFlight <= 6)
        #expect(pipeline.metrics.networkRequestsStarted == 20)
    }
}

/// The pipeline over real HTTP: status errors keep their status, real images decode.
@Suite(.timeLimit(.minutes(1)))
struct PipelineHTTPTests {
    @Test func aNotFoundResponseFailsWithItsStatusCode() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let pipeline = ImagePipeline(configuration: ImagePipeline.Configuration(dataLoader: DataLoader()))
        await #expect {
            _ = try await pipeline.image(for: server.url(for: "/missing.jpg"))
        } throws: { error in
            (error as? ImagePipeline.Error)?.statusCode == 404
        }
    }

    @Test func aRealJPEGIsDownloadedAndDecodedAtTheRequestedSize() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let pixels = (0..<(640 * 480 * 3)).map { UInt8(truncatingIfNeeded: $0 &* 31 >> 4) }
        let jpeg = try Bitmap(width: 640, height: 480, format: .rgb8, pixels: pixels).encode(as: .jpeg(quality: 90))
        server.serve(path: "/photo.jpg", data: jpeg, contentType: "image/jpeg")
        let pipeline = ImagePipeline(configuration: ImagePipeline.Configuration(dataLoader: DataLoader()))
        var request = ImageRequest(url: server.url(for: "/photo.jpg"))
        request.thumbnail = .maxPixelSize(160)
        let response = try await pipeline.image(for: request)
        #expect(response.image.width == 160)
        #expect(response.image.height == 120)
        #expect((response.urlResponse as? HTTPURLResponse)?.statusCode == 200)
        #expect(server.statistics.totalRequests == 1)
    }
}
