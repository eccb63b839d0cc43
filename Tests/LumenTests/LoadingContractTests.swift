import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

// Contract tests for data loading through the pipeline (issue 3 "Data loading", DESIGN §1–2),
// against the loopback server's fault injection, written by an independent review from the
// contract, not from the implementation.

private func httpPipeline(limit: Int? = nil, coalescing: Bool = true, cache: Bool = true) -> ImagePipeline {
    var configuration = ImagePipeline.Configuration(dataLoader: DataLoader())
    configuration.decoder = TrivialImageDecoder()
    configuration.isTaskCoalescingEnabled = coalescing
    if let limit { configuration.maximumResponseDataSize = limit }
    if !cache { configuration.imageCache = nil }
    return ImagePipeline(configuration: configuration)
}

private func failure(_ body: () async throws -> ImageResponse) async -> ImagePipeline.Error? {
    do {
        _ = try await body()
        return nil
    } catch {
        return error as? ImagePipeline.Error
    }
}

private func bytes(_ count: Int, seed: UInt8 = 1) -> Data {
    Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
}

@Suite(.timeLimit(.minutes(1)))
struct LoadingHTTPContractTests {
    /// Non-2xx with a body: a typed error carrying the status for every subscriber; the next
    /// request reaches the server again (no negative caching).
    @Test(arguments: [401, 404, 500, 503])
    func nonSuccessStatusIsATypedErrorForEverySubscriber(status: Int) async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/a.jpg", data: bytes(500))
        server.respond(path: "/a.jpg", status: status)
        server.hold("/a.jpg")
        let pipeline = httpPipeline()
        let tasks = (0..<3).map { _ in pipeline.imageTask(with: ImageRequest(url: server.url(for: "/a.jpg"))) }
        try await server.waitForRequests(path: "/a.jpg", count: 1)
        server.release("/a.jpg")
        for task in tasks {
            let error = await failure { try await task.response }
            #expect(error?.code == .dataLoadingFailed)
            #expect(error?.statusCode == status)
        }
        #expect(server.requestCount(for: "/a.jpg") == 1)
        server.respond(path: "/a.jpg", status: nil)
        _ = try await pipeline.image(for: server.url(for: "/a.jpg"))
        #expect(server.requestCount(for: "/a.jpg") == 2)
    }

    /// A body cut short of its Content-Length (the connection closes mid-body) is a failure,
    /// never a shorter image; the next request starts over.
    @Test func aBodyCutShortIsAFailure() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/cut.jpg", data: bytes(10_000))
        server.truncate(path: "/cut.jpg", after: 4_000)
        let pipeline = httpPipeline()
        let error = await failure { try await pipeline.image(for: server.url(for: "/cut.jpg")) }
        #expect(error?.code == .dataLoadingFailed)
        server.truncate(path: "/cut.jpg", after: nil)
        let (data, _) = try await pipeline.data(for: ImageRequest(url: server.url(for: "/cut.jpg")))
        #expect(data == bytes(10_000))
        #expect(server.requestCount(for: "/cut.jpg") == 2)
    }

    /// With a retry policy, what a real connection does wrong is retried by the default
    /// predicate: a body cut short, a port nobody listens on. A 404 is not.
    @Test func theDefaultRetryPredicateRetriesRealTransportFailures() async throws {
        let server = try LoopbackServer()
        server.serve(path: "/cut.jpg", data: bytes(10_000))
        server.truncate(path: "/cut.jpg", after: 4_000)
        server.serve(path: "/gone.jpg", data: bytes(100))
        server.respond(path: "/gone.jpg", status: 404)
        var configuration = ImagePipeline.Configuration(dataLoader: DataLoader())
        configuration.decoder = TrivialImageDecoder()
        configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 2)
        let pipeline = ImagePipeline(configuration: configuration)
        let cut = await failure { try await pipeline.image(for: server.url(for: "/cut.jpg")) }
        #expect(cut?.code == .dataLoadingFailed)
        #expect(server.requestCount(for: "/cut.jpg") == 2)
        let gone = await failure { try await pipeline.image(for: server.url(for: "/gone.jpg")) }
        #expect(gone?.statusCode == 404)
        #expect(server.requestCount(for: "/gone.jpg") == 1)
        let closed = server.url(for: "/cut.jpg")
        server.stop()
        let before = pipeline.metrics.networkRequestsStarted
        let refused = await failure { try await pipeline.image(for: closed) }
        #expect(refused?.code == .dataLoadingFailed)
        #expect(refused.map(ImagePipeline.RetryPolicy.isTransient) == true, "\(String(describing: refused))")
        #expect(pipeline.metrics.networkRequestsStarted - before == 2)
    }

    /// A chunked body of unknown length arrives whole.
    @Test func aChunkedBodyArrivesWhole() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/c.jpg", data: bytes(50_000))
        server.setChunked(for: "/c.jpg", chunkSize: 1_000)
        let pipeline = httpPipeline()
        let (data, _) = try await pipeline.data(for: ImageRequest(url: server.url(for: "/c.jpg")))
        #expect(data == bytes(50_000))
        #expect(pipeline.metrics.bytesDownloaded == 50_000)
        #expect(pipeline.metrics.networkRequestsStarted == 1)
    }

    /// An empty 200 body is an error (`dataIsEmpty`), with or without a length.
    @Test(arguments: [false, true])
    func anEmptyBodyIsAnError(chunked: Bool) async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/empty.jpg", data: Data())
        if chunked { server.setChunked(for: "/empty.jpg") }
        let pipeline = httpPipeline()
        let error = await failure { try await pipeline.image(for: server.url(for: "/empty.jpg")) }
        #expect(error?.code == .dataIsEmpty)
    }

    /// The maximum size is enforced from Content-Length: a response announcing more than the
    /// limit fails at its first bytes, while the rest of the body is still withheld; both
    /// subscribers of the one download get the error.
    @Test func anAnnouncedLengthOverTheLimitFailsAtItsFirstBytes() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/big.jpg", data: bytes(100_000))
        // Nothing is answered before both tasks have subscribed: otherwise the download can
        // fail (a failed stage leaves the pool at once) before the second task exists, which
        // then starts a second download of its own, and a second disconnect.
        server.hold("/big.jpg")
        server.holdBody("/big.jpg", after: 1_000) // never released before the failure
        let pipeline = httpPipeline(limit: 10_000)
        let tasks = (0..<2).map { _ in pipeline.imageTask(with: ImageRequest(url: server.url(for: "/big.jpg"))) }
        server.releaseRequests("/big.jpg")
        for task in tasks {
            let error = await failure { try await task.response }
            #expect(error?.code == .dataTooLarge)
            #expect(error?.byteCount == 100_000)
        }
        #expect(pipeline.metrics.networkRequestsStarted == 1)
        #expect(pipeline.metrics.bytesDownloaded <= 1_000)
        try await server.waitUntil { $0.clientDisconnects == 1 }
        server.release("/big.jpg")
    }

    /// A body without Content-Length is limited while it streams: the download fails once the
    /// bytes pass the limit, before the rest of the body is sent.
    @Test func anUnknownLengthIsLimitedWhileStreaming() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/drip.jpg", data: bytes(100_000))
        server.setChunked(for: "/drip.jpg", chunkSize: 1_000)
        server.holdBody("/drip.jpg", after: 20_000) // past the limit, the rest held forever
        let pipeline = httpPipeline(limit: 10_000)
        let error = await failure { try await pipeline.image(for: server.url(for: "/drip.jpg")) }
        #expect(error?.code == .dataTooLarge)
        #expect(error?.limit == 10_000)
        #expect(pipeline.metrics.bytesDownloaded <= 20_000)
        server.release("/drip.jpg")
    }

    /// Progress is real: while the body is held part-way the task reports what arrived, with
    /// the total from Content-Length; values never go down and end at the total.
    @Test func progressIsMonotonicWithTheTotalFromContentLength() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/p.jpg", data: bytes(300_000))
        server.holdBody("/p.jpg", after: 100_000)
        let pipeline = httpPipeline()
        let task = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/p.jpg")))
        let joiner = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/p.jpg"), thumbnail: .maxPixelSize(4)))
        var seen: [ImageTask.Progress] = []
        var released = false
        var finished = false
        for await event in task.events {
            switch event {
            case .progress(let progress):
                seen.append(progress)
                #expect(progress.total == 300_000)
                if !released, progress.completed >= 100_000 {
                    #expect(progress.completed == 100_000)
                    #expect(joiner.progress.completed == 100_000)
                    released = true
                    server.release("/p.jpg")
                }
            case .preview:
                break
            case .finished(let result):
                _ = try result.get()
                finished = true
            }
        }
        #expect(finished)
        #expect(released)
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.completed <= $1.completed })
        #expect(seen.last?.completed == 300_000)
        #expect(pipeline.metrics.bytesDownloaded == 300_000)
        _ = try await joiner.response
    }

    /// A stream opened while the body is held part-way starts with the progress so far: a
    /// reader that arrives late still sees where the download stands before more arrives.
    @Test func aStreamOpenedMidDownloadStartsWithTheProgressSoFar() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/late.jpg", data: bytes(300_000))
        server.holdBody("/late.jpg", after: 100_000)
        let pipeline = httpPipeline()
        let task = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/late.jpg")))
        // A first reader, there from the start, sees the held part arrive.
        for await event in task.events {
            if case .progress(let progress) = event, progress.completed == 100_000 { break }
        }
        let events = task.events
        server.release("/late.jpg")
        var first: ImageTask.Event?
        for await event in events where first == nil { first = event }
        guard case .progress(let progress)? = first else {
            Issue.record("the first event is \(String(describing: first))")
            return
        }
        #expect(progress == ImageTask.Progress(completed: 100_000, total: 300_000))
        _ = try await task.response
    }

    /// A download one subscriber cancels mid-body goes on for the other; cancelling the last one
    /// closes the connection.
    @Test func cancellingMidBodyKeepsTheDownloadForTheOtherSubscriber() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/m.jpg", data: bytes(200_000))
        server.holdBody("/m.jpg", after: 50_000)
        let pipeline = httpPipeline()
        let first = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/m.jpg")))
        let second = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/m.jpg"), processors: [MockImageProcessor("p")]))
        try await server.waitUntil { $0.pausedBodies == 1 }
        first.cancel()
        server.release("/m.jpg")
        _ = try await second.response
        #expect(server.requestCount(for: "/m.jpg") == 1)
        #expect(server.statistics.clientDisconnects == 0)

        server.holdBody("/n.jpg", after: 50_000)
        server.serve(path: "/n.jpg", data: bytes(200_000))
        server.holdBody("/n.jpg", after: 50_000)
        let only = pipeline.imageTask(with: ImageRequest(url: server.url(for: "/n.jpg")))
        try await server.waitUntil { $0.pausedBodies == 1 }
        only.cancel()
        try await server.waitUntil { $0.clientDisconnects == 1 }
        await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.networkRequestsInFlight == 0 }
        server.release("/n.jpg")
    }

    /// A server for many users must not hand one user's cookie to another: a `Set-Cookie` from
    /// Alice's response must not be sent on Bob's request (his credentials, not the session's
    /// cookie jar, decide what he gets).
    @Test func aCookieSetForOneUserIsNotSentForAnother() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let marker = "lumenreview\(UInt32.random(in: 0...UInt32.max))"
        server.serve(path: "/jar/alice.jpg", data: bytes(100), headers: ["Set-Cookie": "\(marker)=alice-session; Path=/jar"])
        server.serve(path: "/jar/bob.jpg", data: bytes(100, seed: 2))
        defer {
            let storage = HTTPCookieStorage.shared
            for cookie in storage.cookies ?? [] where cookie.name == marker { storage.deleteCookie(cookie) }
        }
        let pipeline = httpPipeline()
        var alice = URLRequest(url: server.url(for: "/jar/alice.jpg"))
        alice.setValue("Bearer alice", forHTTPHeaderField: "Authorization")
        _ = try await pipeline.image(for: ImageRequest(urlRequest: alice))
        var bob = URLRequest(url: server.url(for: "/jar/bob.jpg"))
        bob.setValue("Bearer bob", forHTTPHeaderField: "Authorization")
        _ = try await pipeline.image(for: ImageRequest(urlRequest: bob))
        let sent = server.recordedRequests(for: "/jar/bob.jpg").first
        #expect(sent?.header("authorization") == "Bearer bob")
        #expect(sent?.header("cookie") == nil)
        // The jar is process-wide: another pipeline with its own DataLoader sends it too.
        server.serve(path: "/jar/carol.jpg", data: bytes(100, seed: 3))
        _ = try await httpPipeline().image(for: server.url(for: "/jar/carol.jpg"))
        let carol = server.recordedRequests(for: "/jar/carol.jpg").first
        #expect(carol?.header("cookie") == nil)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct LoadingLocalContractTests {
    /// `file:` and `data:` URLs are read without the network: typed failures, no network
    /// request counted.
    @Test func localURLsFailTypedWithoutTheNetwork() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-review-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("a.bin")
        try bytes(300_000).write(to: file)
        let empty = directory.appendingPathComponent("empty.bin")
        try Data().write(to: empty)
        let pipeline = httpPipeline(limit: 200_000)
        let cases: [(String, URL, ImagePipeline.Error.Code)] = [
            ("directory", directory, .dataLoadingFailed),
            ("missing", directory.appendingPathComponent("missing.bin"), .dataLoadingFailed),
            ("over the limit", file, .dataTooLarge),
            ("empty file", empty, .dataIsEmpty),
            ("no comma", URL(string: "data:image/png;base64")!, .dataLoadingFailed),
            ("bad base64", URL(string: "data:;base64,@@@@")!, .dataLoadingFailed),
            // (A bad %-escape can't be tested here: URL(string:) re-escapes the "%" itself.)
            ("empty data", URL(string: "data:,")!, .dataIsEmpty),
        ]
        for (name, url, expected) in cases {
            let error = await failure { try await pipeline.image(for: url) }
            #expect(error?.code == expected, "\(name): \(String(describing: error))")
        }
        let ok = try await pipeline.data(for: ImageRequest(url: URL(string: "data:;base64,AAEC")!))
        #expect(ok.0 == Data([0, 1, 2]))
        #expect(pipeline.metrics.networkRequestsStarted == 0)
        #expect(pipeline.metrics.localLoadsStarted == cases.count + 1)
    }

    /// A device (one that never ends, here) is no file to load an image from: refused at
    /// once as not a regular file, before any byte is read.
    @Test func aDeviceIsRefusedAtOnce() async throws {
        let pipeline = httpPipeline(limit: 1 << 20)
        let error = await failure { try await pipeline.image(for: URL(fileURLWithPath: "/dev/zero")) }
        #expect(error?.code == .dataLoadingFailed)
        guard case .fileUnreadable(_, let reason)? = error?.underlyingError as? DataLoader.Error else {
            Issue.record("expected DataLoader.Error.fileUnreadable, got \(String(describing: error))")
            return
        }
        #expect(reason == "not a regular file (a FIFO, socket or device)")
        #expect(pipeline.metrics.bytesDownloaded == 0)
    }
}
