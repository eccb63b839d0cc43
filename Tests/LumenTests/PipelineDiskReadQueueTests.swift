import Foundation
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

/// Disk reads run on the disk/decoding side: a disk hit never waits behind downloads, however
/// many stall in the data-loading queue's slots.
@Suite(.timeLimit(.minutes(1)))
struct PipelineDiskReadQueueTests {
    /// A harness whose disk cache stores processed images, decoded by the real decoder.
    private func harness(directory: URL? = nil) -> PipelineCacheHarness {
        PipelineCacheHarness(directory: directory) {
            $0.dataCachePolicy = .storeEncodedImages
            $0.decoder = ImageDecoders.Default()
        }
    }

    private static func stalledURL(_ i: Int) -> URL {
        URL(string: "https://images.example.com/stalled-\(i).png")!
    }

    @Test func processedImageOnDiskCompletesWhileEveryDownloadSlotStalls() async throws {
        let request = ImageRequest(url: PipelineCacheURLs.a, processors: [MockImageProcessor("p")])
        let writer = harness()
        defer { writer.cleanUp() }
        writer.loader.serve(try pipelineCachePNG(), for: PipelineCacheURLs.a)
        _ = try await writer.pipeline.image(for: request)
        await writer.pipeline.waitForMetrics { $0.diskCache.writes >= 1 }
        await writer.flush()

        // A new pipeline over the directory, its data-loading queue full of held downloads.
        let h = harness(directory: writer.directory)
        defer { h.loader.resume() }
        let slots = h.pipeline.configuration.dataLoadingQueue.maxConcurrentCount
        #expect(slots == 6)
        h.loader.isSuspended = true
        let png = try pipelineCachePNG()
        for i in 0..<slots { h.loader.serve(png, for: Self.stalledURL(i)) }
        let stalled = (0..<slots).map { h.pipeline.imageTask(with: ImageRequest(url: Self.stalledURL($0))) }
        await h.loader.waitForLoads(slots)
        // A load is counted a moment before it is held: yield until all six hold their slots.
        while h.loader.heldCount < slots { await Task.yield() }

        // Today's code queued this read behind the held downloads: it would never complete.
        let response = try await h.pipeline.image(for: request)
        #expect(response.cacheType == .disk)
        #expect(h.loader.loadCount(for: PipelineCacheURLs.a) == 0)

        // The stalled downloads are untouched: still held, none cancelled, none added.
        #expect(h.loader.heldCount == slots)
        #expect(h.loader.cancelledCount == 0)
        #expect(h.loader.loadCount == slots)

        h.loader.resume()
        for task in stalled { _ = try await task.response }
        #expect(h.loader.loadCount == slots)
    }
}
