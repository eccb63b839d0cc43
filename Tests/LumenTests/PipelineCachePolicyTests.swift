import Foundation
import Testing
import Synchronization
@_spi(Testing) import Lumen
import LumenTestSupport

/// What each data-cache policy writes, and what a disk hit reads.
@Suite(.timeLimit(.minutes(1)))
struct PipelineCachePolicyTests {
    /// The real decoder, recording the first bytes of everything it decodes.
    final class RecordingDecoder: ImageDecoding {
        private let inputs = Mutex<[Data]>([])
        var decoded: [Data] { inputs.withLock { $0 } }

        func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
            inputs.withLock { $0.append(data.prefix(8)) }
            return try ImageDecoders.Default().decode(data, context: context)
        }
    }

    private static let pngMagic = Data([0x89, 0x50, 0x4E, 0x47])
    private static let jpegMagic = Data([0xFF, 0xD8])

    private static func rgbaPNG() throws -> Data {
        let bitmap = Bitmap(width: 6, height: 5, format: .rgba8) { buffer in
            for i in 0..<(6 * 5 * 4) { buffer[i] = UInt8(truncatingIfNeeded: i &* 17 &+ 3) }
        }
        return try bitmap.encode(as: .png)
    }

    /// A harness with `policy`; with `encodingQueue`, encodes go to that queue (tests suspend
    /// it, so an encode the pipeline asked for is still pending when the response arrives:
    /// the encode is queued before the stage finishes).
    private func harness(_ policy: DataCachePolicy, directory: URL? = nil, decoder: RecordingDecoder,
                         encodingQueue: WorkQueue? = nil) -> PipelineCacheHarness {
        PipelineCacheHarness(directory: directory) {
            $0.dataCachePolicy = policy
            $0.decoder = decoder
            if let encodingQueue { $0.encodingQueue = encodingQueue }
        }
    }

    /// An encoding queue that holds what it is given until resumed.
    private func suspendedEncodingQueue() -> WorkQueue {
        let queue = WorkQueue(name: "test.encode", maxConcurrentCount: 1, execution: .threads)
        queue.isSuspended = true
        return queue
    }

    @Test(arguments: [false, true])
    func storeEncodedImagesWritesProcessedImagesOnly(hasAlpha: Bool) async throws {
        let decoder = RecordingDecoder()
        let encoding = suspendedEncodingQueue()
        let h = harness(.storeEncodedImages, decoder: decoder, encodingQueue: encoding)
        defer { h.cleanUp() }
        let source = hasAlpha ? try Self.rgbaPNG() : try pipelineCachePNG()
        h.loader.serve(source, for: PipelineCacheURLs.a)
        let applications = ProcessorApplications()
        let request = ImageRequest(url: PipelineCacheURLs.a, processors: [MockImageProcessor("p", applications: applications)])

        let first = try await h.pipeline.image(for: request)
        #expect(encoding.pendingCount == 1)  // the processed image's encode, queued
        encoding.isSuspended = false
        await h.pipeline.waitForMetrics { $0.diskCache.writes >= 1 }
        await h.flush()
        #expect(h.pipeline.metrics.diskCache.writes == 1)
        #expect(!h.pipeline.cache.containsData(for: request)) // no original bytes

        // A new pipeline over the directory: the processed entry answers; no network, no processor.
        let decoder2 = RecordingDecoder()
        let encoding2 = suspendedEncodingQueue()
        let second = harness(.storeEncodedImages, directory: h.directory, decoder: decoder2, encodingQueue: encoding2)
        let response = try await second.pipeline.image(for: request)
        #expect(encoding2.pendingCount == 0)  // a disk hit is not encoded again
        #expect(response.cacheType == .disk)
        #expect(second.loader.loadCount == 0)
        #expect(applications["mock.p"] == 1)
        #expect(response.image.width == first.image.width && response.image.height == first.image.height)
        #expect(decoder2.decoded.count == 1)
        let magic = decoder2.decoded.first ?? Data()
        #expect(magic.starts(with: hasAlpha ? Self.pngMagic : Self.jpegMagic))
        if hasAlpha { #expect(response.image == first.image) } // PNG is lossless
        // A disk hit is not encoded and written again.
        await second.flush()
        #expect(second.pipeline.metrics.diskCache.writes == 0)
    }

    @Test func storeAllWritesBothTheOriginalAndTheProcessedImage() async throws {
        let decoder = RecordingDecoder()
        let h = harness(.storeAll, decoder: decoder)
        defer { h.cleanUp() }
        h.loader.serve(try pipelineCachePNG(), for: PipelineCacheURLs.a)
        let processed = ImageRequest(url: PipelineCacheURLs.a, processors: [MockImageProcessor("p")])
        _ = try await h.pipeline.image(for: processed)
        await h.pipeline.waitForMetrics { $0.diskCache.writes >= 2 }
        await h.flush()
        #expect(h.pipeline.cache.containsData(for: processed))
        #expect(h.dataCache?.metrics.writes == 2)

        // Another processor starts from the original bytes on disk.
        h.pipeline.cache.removeAllFromMemory()
        let other = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, processors: [MockImageProcessor("q")]))
        #expect(other.cacheType == .disk)
        #expect(h.loader.loadCount == 1)
    }

    @Test func storeOriginalDataNeverEncodes() async throws {
        let decoder = RecordingDecoder()
        let encoding = suspendedEncodingQueue()
        let h = harness(.storeOriginalData, decoder: decoder, encodingQueue: encoding)
        defer { h.cleanUp() }
        h.loader.serve(try pipelineCachePNG(), for: PipelineCacheURLs.a)
        _ = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, processors: [MockImageProcessor("p")], thumbnail: .maxPixelSize(4)))
        #expect(encoding.pendingCount == 0)  // nothing was queued for encoding
        await h.flush()
        #expect(h.dataCache?.metrics.writes == 1)
        #expect(h.pipeline.metrics.diskCache.writes == 1)
    }

    @Test func dataForRequestStoresOriginalBytesUnderEveryPolicyAndNeverEncodes() async throws {
        let decoder = RecordingDecoder()
        let h = harness(.storeEncodedImages, decoder: decoder)
        defer { h.cleanUp() }
        let png = try pipelineCachePNG()
        h.loader.serve(png, for: PipelineCacheURLs.a)
        let request = ImageRequest(url: PipelineCacheURLs.a, processors: [MockImageProcessor("p")])
        let (data, _) = try await h.pipeline.data(for: request)
        #expect(data == png)
        await h.flush()
        #expect(h.pipeline.cache.cachedData(for: request) == png)
        #expect(h.dataCache?.metrics.writes == 1)
        #expect(decoder.decoded.isEmpty)

        // The bytes on disk serve data(for:) with no network.
        let (again, _) = try await h.pipeline.data(for: request)
        #expect(again == png)
        #expect(h.loader.loadCount == 1)
    }
}

extension PipelineCachePolicyTests {
    @Test func theProcessedEntryOnDiskAnswersBeforeAMemoryPrefix() async throws {
        let decoder = RecordingDecoder()
        let h = harness(.storeEncodedImages, decoder: decoder)
        defer { h.cleanUp() }
        h.loader.serve(try pipelineCachePNG(), for: PipelineCacheURLs.a)
        let applications = ProcessorApplications()
        let a = MockImageProcessor("a", applications: applications)
        let b = MockImageProcessor("b", applications: applications)
        let onlyA = ImageRequest(url: PipelineCacheURLs.a, processors: [a])
        let ab = ImageRequest(url: PipelineCacheURLs.a, processors: [a, b])
        _ = try await h.pipeline.image(for: onlyA)
        _ = try await h.pipeline.image(for: ab)
        await h.pipeline.waitForMetrics { $0.diskCache.writes >= 2 }
        await h.flush()
        h.pipeline.cache[ab] = nil // [a] stays in memory
        let before = applications.total
        let response = try await h.pipeline.image(for: ab)
        #expect(response.cacheType == .disk)
        #expect(applications.total == before) // neither a nor b ran: the processed entry answered
        #expect(h.loader.loadCount == 1)
    }
}
