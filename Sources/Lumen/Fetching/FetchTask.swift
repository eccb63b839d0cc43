import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The fetch stage: answers from the disk cache when it holds fresh original bytes, else
/// loads them with the data loader (or calls the request's data closure) on the data-loading
/// queue, streaming progress to subscribers, and writes them to the disk cache.
///
/// Disk reads run on a decoding worker (where a hit's decode follows), writes on the
/// data-loading queue's task; never under the graph's lock. A stale entry with validators is revalidated: the request carries `If-None-Match` /
/// `If-Modified-Since`, a `304 Not Modified` renews the entry and serves its bytes (unless it
/// names another ETag: then the bytes are loaded again without validators), a `200`
/// replaces it. Failures are never written. `file:` and `data:` URLs, and methods other than
/// `GET`, bypass the disk cache.
///
/// With progressive decoding on, the body is scanned as it arrives and, at each new scan of a
/// progressive JPEG, the bytes so far go to the subscribers as a `.preview` event (see
/// ProgressiveDecoding.swift).
///
/// The maximum response size is enforced from the declared length at the first chunk and
/// again while the body accumulates; an empty body is an error. Failures the retry policy
/// allows are retried while the task still has subscribers, after the policy's wait (backoff
/// or `Retry-After`), which the last subscriber leaving cuts short.
final class FetchTask: SharedTask<FetchedData>, @unchecked Sendable { // state guarded by graph.lock
    let request: ImageRequest
    let key: FetchKey
    /// The original data's disk-cache key; `nil` when the pipeline has no disk cache or the
    /// source is local.
    let diskKey: String?
    /// Whether a subscriber needs the original bytes on disk even under
    /// `.storeEncodedImages` (a data request, or a request for the unprocessed original).
    @exclusivity(unchecked) var wantsOriginalOnDisk = false
    /// Whether a decode stage asked for progressive previews: the body is then scanned for
    /// scan boundaries as it arrives. Read off the lock by the loader's callback.
    private let wantsPreviews = Atomic<Bool>(false)
    /// The body of the load running, once it completed a scan (see ``bodyPrefix(_:)``).
    @exclusivity(unchecked) private var scannedBody: Body?

    init(graph: WorkGraph, request: ImageRequest, key: FetchKey, diskKey: String?) {
        self.request = request
        self.key = key
        self.diskKey = !graph.caches.hasDataCache || !Self.isCacheable(request) || request.isInMemory ? nil : diskKey
        super.init(graph: graph, stage: .fetch)
    }

    override var keyDescription: String { key.description }
    override var poolKey: StagePoolKey { .fetch(key) }

    /// Asks for `.preview` events: the body so far each time a new scan of a progressive JPEG
    /// has arrived (see ProgressiveDecoding.swift). A subscriber joining mid-download enables it
    /// for the rest of the body: the scan catches up with the bytes already received once.
    func enablePreviews() {
        wantsPreviews.store(true, ordering: .relaxed)
    }

    /// A copy of the first `length` bytes of the body arriving now, for a preview that was
    /// skipped when they arrived (see `DecodeTask.decodeSkippedPreview()`); `nil` when no
    /// load runs or its body is shorter. Must hold the graph's lock.
    func bodyPrefix(_ length: Int) -> Data? {
        scannedBody?.prefix(length)
    }

    override func start() {
        if request.isInMemory {
            // Bytes already in memory: no download slot (a re-decode never waits behind slow
            // downloads). Cancellation needs no operation: `finish` ignores a disposed task.
            Task { [self] in await run(stale: nil) }
            return
        }
        guard diskKey != nil, CacheLayers.readsDisk(request.options) else {
            startLoading(stale: nil)
            return
        }
        // The disk is read on a decoding worker: on a hit, the decode it queues is usually
        // taken by this same thread as it finishes (no wake-up of a download task, then of
        // another worker). A miss goes on to the data-loading queue.
        let queue = graph.configuration.decodingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in
            guard case .miss(let stale) = readDisk() else { return }
            graph.sync {
                operation = nil
                guard !isDisposed else { return }
                startLoading(stale: stale)
            }
        }
        operation = (queue, item)
    }

    /// Queues the load on the data-loading queue. Must hold the graph's lock.
    private func startLoading(stale: (data: Data, metadata: CacheMetadata)?) {
        let queue = graph.configuration.dataLoadingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in await run(stale: stale) }
        operation = (queue, item)
    }

    /// Data closures and remote `GET`s go through the disk cache; local URLs and other methods
    /// (whose bytes the disk key, made of the image identity, would not describe) don't.
    private static func isCacheable(_ request: ImageRequest) -> Bool {
        switch request.resource {
        case .closure: return true
        case .url(let url):
            return !isLocal(url)
        case .urlRequest(let urlRequest):
            let method = urlRequest.httpMethod?.uppercased() ?? "GET"
            return !isLocal(urlRequest.url) && method == "GET"
        }
    }

    /// Whether `url` is a `file:` or `data:` URL (read without the network), comparing the
    /// scheme's ASCII bytes without building a lowercased copy of it.
    private static func isLocal(_ url: URL?) -> Bool {
        guard let scheme = url?.scheme else { return false }
        func matches(_ name: StaticString) -> Bool {
            let expected = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
            var index = 0
            for byte in scheme.utf8 {
                guard index < expected.count, byte | 0x20 == expected[index] else { return false }
                index += 1
            }
            return index == expected.count
        }
        return matches("file") || matches("data")
    }

    private func complete(_ result: Result<FetchedData, ImagePipeline.Error>) {
        graph.sync {
            operation = nil
            switch result {
            case .success(let fetched): finish(with: fetched)
            case .failure(let error): fail(error)
            }
        }
    }

    private enum DiskAnswer {
        /// The task completed from the disk (or failed: nothing there and not allowed to load).
        case answered
        /// Load, revalidating the stale entry when there is one.
        case miss(stale: (data: Data, metadata: CacheMetadata)?)
    }

    /// Looks the disk cache up; completes the task on a fresh hit (any hit under
    /// `.returnCacheDataDontLoad`).
    private func readDisk() -> DiskAnswer {
        let caches = graph.caches
        let options = request.options
        var stale: (data: Data, metadata: CacheMetadata)?
        if let diskKey, CacheLayers.readsDisk(options), let entry = caches.cachedData(for: diskKey) {
            if options.contains(.returnCacheDataDontLoad) || caches.isFresh(entry.metadata) {
                graph.metricsStore.withLock { $0.diskCacheFreshHits += 1 }
                complete(.success(FetchedData(data: entry.data, urlResponse: nil, cacheType: .disk)))
                return .answered
            }
            stale = entry
        }
        if options.contains(.returnCacheDataDontLoad) {
            complete(.failure(.dataMissingInCache))
            return .answered
        }
        return .miss(stale: stale)
    }

    private func run(stale: (data: Data, metadata: CacheMetadata)?) async {
        let caches = graph.caches
        let options = request.options
        if options.contains(.returnCacheDataDontLoad) {
            complete(.failure(.dataMissingInCache))
            return
        }
        var conditionalHeaders: [String: String] = [:]
        if let stale, request.url != nil { conditionalHeaders = stale.metadata.conditionalHeaders }
        let policy = graph.configuration.retryPolicy
        var attempt = 0
        // The bytes a cut attempt delivered, which the next one asks the rest of
        // (FetchTask+Resume.swift).
        var partial: PartialBody?
        while true {
            attempt += 1
            if partial == nil, !conditionalHeaders.isEmpty { graph.metricsStore.withLock { $0.revalidations += 1 } }
            let outcome = await loadOnce(conditionalHeaders: conditionalHeaders, attempt: attempt, resuming: partial)
            partial = nil
            switch outcome.result {
            case .success(var fetched):
                if fetched.isNotModified {
                    guard let stale, let diskKey, !conditionalHeaders.isEmpty else {
                        complete(.failure(.dataIsEmpty)) // a 304 nobody asked for has no bytes
                        return
                    }
                    guard stale.metadata.isConfirmed(byNotModified: fetched.urlResponse) else {
                        // The 304 names another ETag than the stored bytes': they are not known
                        // to be current, and renewing them under that ETag would have every later
                        // revalidation confirm the wrong bytes. Ask again without validators (a
                        // 304 to that fails the load).
                        conditionalHeaders = [:]
                        continue
                    }
                    graph.metricsStore.withLock { $0.notModified += 1 }
                    caches.renew(key: diskKey, metadata: stale.metadata, response: fetched.urlResponse)
                    fetched = FetchedData(data: stale.data, urlResponse: fetched.urlResponse, cacheType: .disk)
                } else if let diskKey, CacheLayers.writesDisk(options), CacheLayers.isWholeBody(fetched.urlResponse) {
                    let writes = caches.storesOriginalData || graph.sync { wantsOriginalOnDisk }
                    if writes { caches.storeData(fetched.data, response: fetched.urlResponse, for: diskKey) }
                }
                complete(.success(fetched))
                return
            case .failure(let error) where outcome.abandonedResume:
                // The range request's answer did not continue the bytes: load it all again.
                graph.metricsStore.withLock { $0.resumesAbandoned += 1 }
                if attempt < policy.maximumAttempts, !Task.isCancelled { continue }
                complete(.failure(error))
                return
            case .failure(let error):
                if error.code != .cancelled, attempt < policy.maximumAttempts, !Task.isCancelled, policy.shouldRetry(error) {
                    partial = outcome.partial
                    guard await waitBeforeRetry(attempt, after: error, policy: policy) else {
                        complete(.failure(.cancelled))
                        return
                    }
                    graph.metricsStore.withLock { $0.retries += 1 }
                    continue
                }
                complete(.failure(error))
                return
            }
        }
    }

    /// Waits the retry policy's delay before retry number `retry`; `false` when the fetch
    /// was cancelled (its last subscriber left) before or during the wait, which then ends at
    /// once: the policy's `sleep` runs in this fetch's Swift task, which cancellation reaches.
    private func waitBeforeRetry(_ retry: Int, after error: ImagePipeline.Error, policy: ImagePipeline.RetryPolicy) async -> Bool {
        let delay = policy.delay(beforeRetry: retry, after: error, now: policy.clock.now, random: Double.random(in: 0...1))
        guard delay > 0 else { return !Task.isCancelled }
        do {
            try await policy.sleep(delay)
        } catch {
            // A sleep that throws for another reason than cancellation still ends the wait.
            if !Task.isCancelled { return true }
        }
        if Task.isCancelled {
            graph.metricsStore.withLock { $0.retryWaitsCancelled += 1 }
            return false
        }
        graph.metricsStore.withLock { $0.retryWaitSeconds += delay }
        return true
    }

    /// One attempt's result; on a failure, the bytes a next attempt may continue, and whether
    /// the attempt was a resume the server's answer did not continue.
    private struct Attempt {
        var result: Result<FetchedData, ImagePipeline.Error>
        var partial: PartialBody?
        var abandonedResume = false
    }

    private func loadOnce(conditionalHeaders: [String: String], attempt: Int, resuming partial: PartialBody?) async -> Attempt {
        let limit = graph.configuration.maximumResponseDataSize
        let resource = request.resource
        if case .closure(_, let load) = resource {
            do {
                let data = try await load()
                try Task.checkCancellation()
                if !request.isInMemory { graph.metricsStore.withLock { $0.bytesDownloaded += data.count } }
                if data.isEmpty { return Attempt(result: .failure(.dataIsEmpty)) }
                if data.count > limit { return Attempt(result: .failure(.dataTooLarge(limit: limit, byteCount: data.count))) }
                return Attempt(result: .success(FetchedData(data: data, urlResponse: nil)))
            } catch {
                return Attempt(result: .failure(Self.wrap(error)))
            }
        }
        guard var urlRequest = request.urlRequest else { preconditionFailure("FetchTask: a URL resource without a URLRequest") }
        if let partial {
            urlRequest = partial.rangeRequest(urlRequest)
        } else {
            for (name, value) in conditionalHeaders { urlRequest.setValue(value, forHTTPHeaderField: name) }
        }
        // With a disk cache, Lumen caches the bytes: a `URLCache` on the loader's session must
        // neither answer (it would bypass revalidation and the cache's own checks) nor store
        // them a second time (`DataLoader` declines to store responses to such requests).
        if graph.caches.hasDataCache { urlRequest.cachePolicy = .reloadIgnoringLocalCacheData }
        if let hook = graph.configuration.willLoadData {
            switch await runRequestHook(hook, on: urlRequest, attempt: attempt) {
            case .success(let hooked): urlRequest = hooked
            case .failure(let error): return Attempt(result: .failure(error))
            }
        }
        // `file:` and `data:` URLs go through the loader too, but not over the network.
        let isNetwork = !Self.isLocal(urlRequest.url)
        graph.metricsStore.withLock {
            if isNetwork {
                $0.networkRequestsStarted += 1
                $0.networkRequestsInFlight += 1
                $0.peakNetworkRequestsInFlight = max($0.peakNetworkRequestsInFlight, $0.networkRequestsInFlight)
            } else {
                $0.localLoadsStarted += 1
            }
        }
        defer { if isNetwork { graph.metricsStore.withLock { $0.networkRequestsInFlight -= 1 } } }
        let body = Body(limit: limit, resuming: partial)
        // However the load ends, its bytes are no longer a skipped preview's to take.
        defer { forgetScannedBody(body) }
        // A resumed body is not scanned: its previews were sent while its first part arrived.
        let scans = partial == nil
        do {
            let response = try await graph.configuration.dataLoader.loadData(for: urlRequest) { [self] chunk, response in
                let (progress, preview) = try body.append(chunk, response: response, scanning: scans && wantsPreviews.load(ordering: .relaxed))
                graph.metricsStore.withLock { $0.bytesDownloaded += chunk.count }
                graph.sync {
                    send(progress: progress)
                    if let preview {
                        scannedBody = body
                        send(preview: FetchedData(data: preview, urlResponse: response))
                    }
                }
            }
            try Task.checkCancellation()
            if let partial {
                return finishResumed(partial, body: body, response: response)
            }
            if (response as? HTTPURLResponse)?.statusCode == 304 {
                return Attempt(result: .success(FetchedData(data: Data(), urlResponse: response, isNotModified: true)))
            }
            let data = body.data
            if data.isEmpty { return Attempt(result: .failure(.dataIsEmpty)) }
            return Attempt(result: .success(FetchedData(data: data, urlResponse: response)))
        } catch {
            let failure = Self.wrap(error)
            if partial != nil, Self.isResumeRefusal(error) {
                return Attempt(result: .failure(failure), partial: nil, abandonedResume: true)
            }
            let kept = body.continuable(for: urlRequest)
            return Attempt(result: .failure(failure), partial: kept)
        }
    }

    /// A resumed attempt's end: the rest appended to the bytes before it (answered with the
    /// first response's headers, the whole representation's), or a new whole body.
    private func finishResumed(_ partial: PartialBody, body: Body, response: URLResponse) -> Attempt {
        switch body.answer ?? partial.answer(to: response) {
        case .continues:
            let data = body.data
            if let total = partial.totalLength, Int64(data.count) != total {
                let mismatch = ResumeMismatch(status: 206, contentRange: (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Range"))
                return Attempt(result: .failure(.dataLoadingFailed(mismatch)), abandonedResume: true)
            }
            graph.metricsStore.withLock {
                $0.resumedDownloads += 1
                $0.resumedBytes += partial.data.count
            }
            return Attempt(result: .success(FetchedData(data: data, urlResponse: partial.response)))
        case .startsOver:
            let data = body.data
            if data.isEmpty { return Attempt(result: .failure(.dataIsEmpty)) }
            return Attempt(result: .success(FetchedData(data: data, urlResponse: response)))
        case .mismatched:
            let http = response as? HTTPURLResponse
            let mismatch = ResumeMismatch(status: http?.statusCode ?? 0, contentRange: http?.value(forHTTPHeaderField: "Content-Range"))
            return Attempt(result: .failure(.dataLoadingFailed(mismatch)), abandonedResume: true)
        }
    }

    /// Whether `error`, thrown by a resumed attempt, says that the server will not continue
    /// the bytes: a `206` that does not continue them, or `416 Range Not Satisfiable`.
    private static func isResumeRefusal(_ error: any Error) -> Bool {
        if let error = error as? ImagePipeline.Error, error.underlyingError is ResumeMismatch { return true }
        if let status = (error as? any HTTPStatusCodeProviding)?.statusCode, status == 416 { return true }
        return false
    }

    /// `urlRequest` as the configuration's request hook returns it, or the load's failure: the
    /// hook's error, or ``ImagePipeline/Error/Code/unscopedCredentials`` when it changed what
    /// may identify a user on a request without a credential scope (``RequestHookRule``).
    private func runRequestHook(
        _ hook: @escaping @Sendable (URLRequest, ImagePipeline.LoadContext) async throws -> URLRequest, on urlRequest: URLRequest, attempt: Int
    ) async -> Result<URLRequest, ImagePipeline.Error> {
        let scope = request.credentialScope
        graph.metricsStore.withLock { $0.requestHookCalls += 1 }
        let hooked: URLRequest
        do {
            hooked = try await hook(urlRequest, ImagePipeline.LoadContext(credentialScope: scope, attempt: attempt))
            try Task.checkCancellation()
        } catch {
            return .failure(Self.wrap(error))
        }
        if scope == nil, let changes = RequestHookRule.unscopedChanges(from: urlRequest, to: hooked) {
            graph.metricsStore.withLock { $0.requestHookRefusals += 1 }
            return .failure(.unscopedCredentials(changes))
        }
        return .success(hooked)
    }

    /// The load of `body` ended: `bodyPrefix(_:)` no longer reads it.
    private func forgetScannedBody(_ body: Body) {
        guard wantsPreviews.load(ordering: .relaxed) else { return }
        graph.sync { if scannedBody === body { scannedBody = nil } }
    }

    private static func wrap(_ error: any Error) -> ImagePipeline.Error {
        if let error = error as? ImagePipeline.Error { return error }
        if Task.isCancelled || error is CancellationError { return .cancelled }
        if let error = error as? URLError, error.code == .cancelled { return .cancelled }
        return .dataLoadingFailed(error)
    }
}
