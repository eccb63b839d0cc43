import Foundation
import Synchronization
import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A pipeline wired to a mock loader (or any loader), a trivial decoder, an event recorder, a
/// memory cache and a disk cache in a fresh temporary directory on an injected clock.
final class PipelineCacheHarness: Sendable {
    let directory: URL
    let clock: CacheTestClock
    let loader: MockDataLoader
    let decoder: TrivialImageDecoder
    let recorder: PipelineEventRecorder
    let imageCache: ImageCache
    let dataCache: DataCache?
    let pipeline: ImagePipeline

    init(
        disk: Bool = true,
        directory: URL? = nil,
        clock: CacheTestClock = CacheTestClock(),
        imageCache: ImageCache = ImageCache(),
        configure: (inout ImagePipeline.Configuration) -> Void = { _ in }
    ) {
        self.directory = directory ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("lumen-pipeline-cache-\(UUID().uuidString)", isDirectory: true)
        self.clock = clock
        loader = MockDataLoader()
        decoder = TrivialImageDecoder()
        recorder = PipelineEventRecorder()
        self.imageCache = imageCache
        dataCache = disk ? DataCache(name: "test", directory: self.directory, clock: clock.cacheClock) : nil
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = decoder
        configuration.eventHandler = recorder.handler
        configuration.imageCache = imageCache
        configuration.dataCache = dataCache
        configuration.decodingQueue = WorkQueue(name: "test.decode", maxConcurrentCount: 2, execution: .threads)
        configuration.processingQueue = WorkQueue(name: "test.process", maxConcurrentCount: 2, execution: .threads)
        configure(&configuration)
        pipeline = ImagePipeline(configuration: configuration)
    }

    /// Waits until the disk cache's queued writes are on disk.
    func flush() async {
        await dataCache?.flush()
    }

    /// Removes the directory (call at the end of a test).
    func cleanUp() {
        dataCache?.flushSynchronously()
        _ = try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        try? FileManager.default.removeItem(at: directory)
    }
}

enum PipelineCacheURLs {
    static let a = URL(string: "https://images.example.com/a.jpg")!
    static let b = URL(string: "https://images.example.com/b.jpg")!

    static func signed(_ signature: String) -> URL {
        URL(string: "https://images.example.com/object.jpg?signature=\(signature)")!
    }
}

/// A request for `url` carrying `Authorization: authorization`.
func pipelineCacheRequest(_ url: URL, authorization: String? = nil, imageID: String? = nil,
                          processors: [any ImageProcessing] = [], options: ImageRequest.Options = [],
                          thumbnail: DecodeSize? = nil) -> ImageRequest {
    var urlRequest = URLRequest(url: url)
    if let authorization { urlRequest.setValue(authorization, forHTTPHeaderField: "Authorization") }
    var request = ImageRequest(urlRequest: urlRequest, processors: processors, options: options, thumbnail: thumbnail)
    if let imageID { request.imageID = imageID }
    return request
}

/// PNG bytes of a small opaque test image.
func pipelineCachePNG(width: Int = 8, height: Int = 8, seed: UInt8 = 7) throws -> Data {
    let bitmap = Bitmap(width: width, height: height, format: .rgb8) { buffer in
        for i in 0..<(width * height * 3) { buffer[i] = UInt8(truncatingIfNeeded: i &* 31 &+ Int(seed)) }
    }
    return try bitmap.encode(as: .png)
}
