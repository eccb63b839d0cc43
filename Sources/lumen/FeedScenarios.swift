import Foundation
@_spi(Testing) import Lumen
import LumenTestSupport

/// The four production risks of the demo, each a short scenario against the loopback server
/// that prints the counters proving the behaviour and returns the claims that failed.
/// Deterministic: the server holds requests (or bodies) to keep downloads in flight, and the
/// scenarios wait on counters, never on time (a deadline only turns a hang into a message).
struct FeedScenarios: Sendable {
    let server: LoopbackServer
    /// Bytes of a photo to serve (a few hundred KB).
    let photo: Data

    struct Outcome: Sendable {
        var name: String
        var lines: [String]
        var violations: [String]
        var json: [String: Int]
    }

    func runAll() async -> [Outcome] {
        var outcomes: [Outcome] = []
        let scenarios: [(String, @Sendable () async throws -> Outcome)] = [
            ("duplicate sharing", { try await self.duplicateSharing() }),
            ("bounded prefetch", { try await self.boundedPrefetch() }),
            ("failure eviction and retry", { try await self.failureEvictionAndRetry() }),
            ("cancellation under sharing", { try await self.cancellationUnderSharing() }),
        ]
        for (name, scenario) in scenarios {
            do {
                outcomes.append(try await withDeadline(seconds: 20, name, scenario))
            } catch {
                outcomes.append(Outcome(name: name, lines: [], violations: ["\(name): \(error)"], json: [:]))
            }
        }
        return outcomes
    }

    private func serve(_ path: String) -> URL {
        server.serve(path: path, data: photo, contentType: "image/jpeg", etag: "\"risk-\(photo.count)\"", cacheControl: "max-age=60")
        return server.url(for: path)
    }

    private func thumbnail(_ url: URL, priority: ImageRequest.Priority = .normal) -> ImageRequest {
        ImageRequest(url: url, priority: priority, thumbnail: .maxPixelSize(256))
    }

    /// N identical requests at once: one download, one decode, N−1 joins.
    func duplicateSharing() async throws -> Outcome {
        let count = 8
        let path = "/risk/shared.jpg"
        let url = serve(path)
        let pipeline = ImagePipeline()
        server.hold(path)
        let tasks = (0..<count).map { _ in pipeline.imageTask(with: thumbnail(url)) }
        try await server.waitForRequests(path: path, count: 1)
        server.release(path)
        var sizes: Set<String> = []
        for task in tasks { let image = try await task.image; sizes.insert("\(image.width)×\(image.height)") }
        let m = pipeline.metrics
        let network = server.requestCount(for: path)
        var violations: [String] = []
        if network != 1 { violations.append("duplicate sharing: \(count) identical requests made \(network) network requests, expected 1") }
        if m.decode.started != 1 || m.decode.joined != count - 1 {
            violations.append("duplicate sharing: decode started \(m.decode.started), joined \(m.decode.joined); expected 1 and \(count - 1)")
        }
        return Outcome(name: "duplicate sharing", lines: [
            "\(count) concurrent requests for \(path) at 256 px (download held until all had subscribed)",
            "decode: \(m.decode.started) started, \(m.decode.joined) joined · fetch: \(m.fetch.started) started · network requests: \(network) · decodes: \(m.decodes)",
            "every caller got the image (\(sizes.sorted().joined(separator: ", ")))",
        ], violations: violations, json: ["requests": count, "decodeStarted": m.decode.started, "decodeJoined": m.decode.joined, "networkRequests": network])
    }

    /// Many prefetches, slow responses: never more than the limit in flight at the server.
    func boundedPrefetch() async throws -> Outcome {
        let count = 16, limit = 2
        let urls = (0..<count).map { i -> URL in
            let path = "/risk/prefetch-\(i).jpg"
            let url = serve(path)
            server.setLatency(.milliseconds(15), for: path)
            return url
        }
        let pipeline = ImagePipeline()
        let prefetcher = ImagePrefetcher(pipeline: pipeline, maxConcurrentRequestCount: limit)
        server.resetStatistics()
        prefetcher.startPrefetching(with: urls.map { thumbnail($0) })
        await prefetcher.waitUntilIdle()
        let stats = server.statistics
        let m = pipeline.metrics
        let outcomes = prefetcher.outcomes
        var violations: [String] = []
        if stats.peakInFlightRequests > limit {
            violations.append("bounded prefetch: \(stats.peakInFlightRequests) requests in flight at once, limit \(limit)")
        }
        if stats.totalRequests != count || outcomes.succeeded != count {
            violations.append("bounded prefetch: \(stats.totalRequests) network requests and \(outcomes.succeeded) prefetches done for \(count) URLs")
        }
        let cached = urls.filter { pipeline.cache.containsCachedImage(for: thumbnail($0)) }.count
        if cached != count { violations.append("bounded prefetch: \(cached) of \(count) prefetched images are in the memory cache") }
        return Outcome(name: "bounded prefetch", lines: [
            "ImagePrefetcher(maxConcurrentRequestCount: \(limit)) given \(count) URLs at once; the server delays each response 15 ms",
            "peak concurrent requests at the server: \(stats.peakInFlightRequests) (limit \(limit)) · pipeline peak: \(m.peakNetworkRequestsInFlight) · network requests: \(stats.totalRequests) · prefetched: \(outcomes.succeeded), in the memory cache: \(cached)",
        ], violations: violations, json: ["prefetches": count, "limit": limit, "serverPeakInFlight": stats.peakInFlightRequests, "networkRequests": stats.totalRequests])
    }

    /// A failing URL fails every waiter once; after the fault clears, a retry downloads afresh.
    func failureEvictionAndRetry() async throws -> Outcome {
        let waiters = 4
        let path = "/risk/flaky.jpg"
        let url = serve(path)
        let pipeline = ImagePipeline()
        server.respond(path: path, status: 500)
        server.hold(path)
        let tasks = (0..<waiters).map { _ in pipeline.imageTask(with: thumbnail(url)) }
        try await server.waitForRequests(path: path, count: 1)
        server.release(path)
        var statuses: [String] = []
        for task in tasks {
            do {
                _ = try await task.image
                statuses.append("success")
            } catch let error as ImagePipeline.Error {
                let status = error.statusCode ?? (error.underlyingError as? DataLoader.Error)?.statusCode
                statuses.append(status.map { "HTTP \($0)" } ?? "\(error.code)")
            }
        }
        let failedRequests = server.requestCount(for: path)
        let afterFailure = pipeline.metrics
        server.respond(path: path, status: nil)
        let retry = try await pipeline.image(for: thumbnail(url))
        let m = pipeline.metrics
        let total = server.requestCount(for: path)
        var violations: [String] = []
        if statuses != Array(repeating: "HTTP 500", count: waiters) {
            violations.append("failure: the \(waiters) waiters got \(statuses), expected HTTP 500 each")
        }
        if failedRequests != 1 || afterFailure.fetch.failed != 1 {
            violations.append("failure: \(failedRequests) network requests and \(afterFailure.fetch.failed) failed fetches while failing, expected 1 and 1")
        }
        if total != 2 || m.fetch.started != 2 || retry.cacheType != nil {
            violations.append("retry: \(total) network requests in all, \(m.fetch.started) fetches started, cache \(String(describing: retry.cacheType)); expected a fresh download")
        }
        return Outcome(name: "failure eviction and retry", lines: [
            "\(waiters) waiters on \(path) while the server answers 500: \(statuses.joined(separator: ", ")) — \(failedRequests) network request, \(afterFailure.fetch.failed) failed fetch",
            "fault cleared, retry: \(retry.image.width)×\(retry.image.height) from a fresh download (network requests now \(total), fetches started \(m.fetch.started))",
        ], violations: violations, json: ["waiters": waiters, "failedWaiters": statuses.filter { $0 == "HTTP 500" }.count, "networkRequestsWhileFailing": failedRequests, "networkRequestsAfterRetry": total])
    }

    /// Two waiters share a download; one cancels, the other gets its image. Then both cancel:
    /// the download stops.
    func cancellationUnderSharing() async throws -> Outcome {
        let pipeline = ImagePipeline()
        // One waiter leaves; the shared download goes on.
        let pathA = "/risk/cancel-one.jpg"
        let urlA = serve(pathA)
        server.holdBody(pathA, after: 4096)
        let first = pipeline.imageTask(with: thumbnail(urlA)), second = pipeline.imageTask(with: thumbnail(urlA))
        try await server.waitUntil { $0.pausedBodies >= 1 }
        first.cancel()
        let stillRunning = second.state == .running
        server.release(pathA)
        let image = try await second.image
        let afterOne = pipeline.metrics
        let requestsA = server.requestCount(for: pathA)
        // Every waiter leaves; the download is cancelled mid-body.
        let pathB = "/risk/cancel-all.jpg"
        let urlB = serve(pathB)
        server.resetStatistics()
        server.holdBody(pathB, after: 4096)
        let third = pipeline.imageTask(with: thumbnail(urlB)), fourth = pipeline.imageTask(with: thumbnail(urlB))
        try await server.waitUntil { $0.pausedBodies >= 1 }
        third.cancel()
        fourth.cancel()
        await pipeline.waitForMetrics { $0.fetch.cancelled >= 1 && $0.networkRequestsInFlight == 0 }
        try await server.waitUntil { $0.clientDisconnects >= 1 }
        let sent = server.statistics.bodyBytesSent
        server.release(pathB)
        let m = pipeline.metrics
        var violations: [String] = []
        if !stillRunning || afterOne.fetch.cancelled != 0 || requestsA != 1 {
            violations.append("cancellation: after one of two waiters cancelled, the other was \(stillRunning ? "running" : "stopped") and \(afterOne.fetch.cancelled) fetches were cancelled (\(requestsA) network requests)")
        }
        if m.fetch.cancelled != 1 || sent >= photo.count {
            violations.append("cancellation: after both waiters cancelled, \(m.fetch.cancelled) fetches were cancelled and \(sent) of \(photo.count) bytes were sent")
        }
        return Outcome(name: "cancellation under sharing", lines: [
            "2 waiters share \(pathA) (body held after 4 KB); one cancels: the other \(stillRunning ? "keeps waiting" : "STOPPED") and gets \(image.width)×\(image.height); fetches cancelled: \(afterOne.fetch.cancelled)",
            "2 waiters share \(pathB); both cancel: fetch cancelled \(m.fetch.cancelled), the server saw the client disconnect after \(sent) of \(photo.count) bytes",
        ], violations: violations, json: ["fetchCancelledAfterOne": afterOne.fetch.cancelled, "fetchCancelledAfterAll": m.fetch.cancelled, "bytesSentBeforeStop": sent, "bytesTotal": photo.count])
    }
}

/// Runs `body`, or throws when it takes longer than `seconds` (the body is then cancelled).
func withDeadline<T: Sendable>(seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        guard let first = try await group.next(), let value = first else {
            group.cancelAll()
            throw BenchError("\(what) did not finish within \(Int(seconds)) s")
        }
        group.cancelAll()
        return value
    }
}
