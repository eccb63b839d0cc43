import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@testable import Lumen
import LumenTestSupport
@testable import lumen

/// Defects found by the review of the changes since e362fb9: the finished-stage count that
/// sends a request back to the memory cache, event streams and the result, what the retry
/// policy calls transient on Linux, and `lumen thumbnail`'s inputs.
@Suite(.timeLimit(.minutes(1)))
struct ReviewTodayTests {
    // MARK: - The finished-stage count

    /// A stage that stores nothing in memory (here a fetch, for a data request) finishing
    /// while a request looks in the memory cache sends that request to no second lookup:
    /// there is nothing new to find there.
    @Test func aStageThatStoresNothingInMemorySendsNoRequestBackToTheCache() async throws {
        let cache = PipelineFinishRaceTests.StallingImageCache()
        let h = PipelineHarness { $0.imageCache = cache }
        // Held in its only lookup (its final image) while the data request's fetch finishes.
        async let stalled: Void = withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            cache.arm(lookup: 1) { continuation.resume() }
        }
        async let started = withCheckedContinuation { (continuation: CheckedContinuation<ImageTask, Never>) in
            Thread { continuation.resume(returning: h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.b))) }.start()
        }
        await stalled
        _ = try await h.pipeline.data(for: ImageRequest(url: PipelineURLs.a))
        cache.releaseStall()
        let task = await started
        _ = try await task.response
        #expect(h.pipeline.metrics.memoryCache.lookups == 1)
        await h.waitUntilIdle()
    }

    // MARK: - Event streams

    /// A caller who finds the task ended — `response` answering at once, without waiting to
    /// be resumed — finds `.finished` in the streams already: the 32 events a stream holds are
    /// the newest progress and `.finished`, never 32 progress events with `.finished` to come.
    @Test func aStreamHoldsFinishedOnceTheResultCanBeRead() async throws {
        let gate = DispatchSemaphore(value: 0)
        let held = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let h = PipelineHarness { configuration in
            // The effects of the critical section that ends the task run after the lock is
            // released, this handler's first: hold them there.
            configuration.eventHandler = { event in
                guard case .completed(.decode, _) = event else { return }
                held.withLock { $0.take() }?.resume()
                gate.wait()
            }
        }
        h.loader.chunkSize = 1
        h.loader.serve(Data(repeating: 7, count: 300), for: PipelineURLs.a)
        h.loader.isSuspended = true
        let task = h.pipeline.imageTask(with: ImageRequest(url: PipelineURLs.a))
        let events = task.events
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            held.withLock { $0 = continuation }
            h.loader.resume()
        }
        _ = try await task.response // the task has ended: answers without waiting
        // Read exactly as many events as a stream holds: never waits, whatever they are.
        var iterator = events.makeAsyncIterator()
        var received: [ImageTask.Event] = []
        for _ in 0..<ImageTask.eventBufferLimit {
            if let event = await iterator.next() { received.append(event) }
        }
        gate.signal()
        while let event = await iterator.next() { received.append(event) }
        #expect(received.count == ImageTask.eventBufferLimit)
        guard case .finished(.success)? = received.last else {
            Issue.record("the last event is not .finished(.success)")
            return
        }
        await h.waitUntilIdle()
    }

    // MARK: - Transient failures on Linux

    /// A pipeline over the real loader that tries a failed download twice.
    private static func retryingPipeline() -> ImagePipeline {
        var configuration = ImagePipeline.Configuration(dataLoader: DataLoader())
        configuration.imageCache = nil
        configuration.dataCache = nil
        configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 2)
        return ImagePipeline(configuration: configuration)
    }

    /// A server that closes the connection without answering (FoundationNetworking:
    /// `badServerResponse`, libcurl's "empty reply") failed on the way: transient. (Asked of
    /// the error rather than shown by a second attempt, which would go to a stopped server's
    /// port, maybe another test's by then.)
    @Test func aConnectionClosedWithoutAnAnswerIsTransient() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/a.jpg", data: Data(repeating: 1, count: 64))
        server.hold("/a.jpg")
        let pipeline = ImagePipeline(configuration: ImagePipeline.Configuration(dataLoader: DataLoader()))
        let url = server.url(for: "/a.jpg")
        let load = Task { await errorThrown { try await pipeline.data(for: ImageRequest(url: url)) } }
        try await server.waitUntil { $0.heldRequests == 1 }
        server.stop() // closes the held request's connection: no status line, no bytes
        let error = try #require(await load.value as? ImagePipeline.Error)
        #expect(error.code == .dataLoadingFailed)
        #expect(ImagePipeline.RetryPolicy.isTransient(error), "\(String(describing: error.underlyingError))")
    }

    /// A chunked body cut short (the connection closed before its last chunk) failed on the
    /// way, as a body cut short of its `Content-Length` does: retried.
    @Test func aChunkedBodyCutShortIsRetried() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/a.jpg", data: Data(repeating: 1, count: 4096))
        server.setChunked(for: "/a.jpg", chunkSize: 256)
        server.truncate(path: "/a.jpg", after: 1024)
        let pipeline = Self.retryingPipeline()
        let error = await errorThrown { try await pipeline.data(for: ImageRequest(url: server.url(for: "/a.jpg"))) }
        #expect((error as? ImagePipeline.Error)?.code == .dataLoadingFailed)
        #expect(server.requestCount(for: "/a.jpg") == 2, "\(String(describing: (error as? ImagePipeline.Error)?.underlyingError))")
    }

    // MARK: - lumen thumbnail

    /// An input in the output directory that is a symbolic link (to a file elsewhere) is an
    /// input file too: no thumbnail replaces it, its own included.
    @Test func aThumbnailNeverReplacesALinkGivenAsInput() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-review-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let output = root.appendingPathComponent("out"), elsewhere = root.appendingPathComponent("photos")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        let target = elsewhere.appendingPathComponent("original.jpeg")
        try Data([0xFF, 0xD8]).write(to: target)
        let link = output.appendingPathComponent("a.jpeg")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        let jobs = ThumbnailCommand.jobs(for: [link.path], output: output.path, format: "jpeg")
        let plan = try #require(try? jobs.first?.plan.get())
        #expect(URL(fileURLWithPath: plan.destination).standardizedFileURL.path != link.standardizedFileURL.path)
    }

    /// `file://host/path` naming another host stays that URL (the loader refuses it), rather
    /// than becoming this machine's file of the same path.
    @Test func aFileURLOfAnotherHostIsNotReadHere() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-review-\(UUID().uuidString).jpg")
        try Data([0xFF, 0xD8, 0xFF]).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let url = try ThumbnailCommand.url(for: "file://otherhost" + file.path)
        #expect(url.host == "otherhost")
        let error = await errorThrown { try await DataLoader().loadData(for: URLRequest(url: url)) { _, _ in } }
        guard case .fileUnreadable? = error as? DataLoader.Error else {
            Issue.record("expected .fileUnreadable, got \(String(describing: error))")
            return
        }
        // `localhost` names this machine: still standardized and read.
        #expect(try ThumbnailCommand.url(for: "file://localhost" + file.path).path == file.standardizedFileURL.path)
    }
}
