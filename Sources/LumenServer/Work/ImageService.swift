import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Lumen
import Synchronization

/// Turns HTTP requests into images: parse and check (signature, options, source policy)
/// before any work; answer from the result caches when they can; otherwise join or start the
/// encode stage, which asks the shared pipeline for the processed image.
final class ImageService: HTTPHandling {
    let configuration: ImageServer.Configuration
    let pipeline: ImagePipeline
    let metrics: MetricsStore
    private let sources: SourcePolicy
    private let memory: ResultCache
    private let disk: DataCache?
    /// The fleet's Redis, with `--redis`.
    private let shared: SharedStore?
    private let encodes = EncodeStage()
    private let encodingQueue: WorkQueue
    /// Requests waiting for work, and whether the server is draining.
    private let load = Mutex((waiting: 0, isDraining: false))
    /// Whether `/metrics` is served by the main listener.
    let servesMetrics: Bool

    init(configuration: ImageServer.Configuration, pipeline: ImagePipeline, metrics: MetricsStore, resultDisk: DataCache?,
         shared: SharedStore?) {
        self.shared = shared
        self.configuration = configuration
        self.pipeline = pipeline
        self.metrics = metrics
        self.sources = SourcePolicy(allowedHosts: configuration.allowedHosts, localRoot: configuration.localRoot)
        self.memory = ResultCache(budget: configuration.memoryCacheBytes)
        self.disk = resultDisk
        self.encodingQueue = pipeline.configuration.encodingQueue
        self.servesMetrics = configuration.metricsListen == nil
    }

    func beginDraining() { load.withLock { $0.isDraining = true } }
    var isDraining: Bool { load.withLock { $0.isDraining } }

    // MARK: - HTTPHandling

    func respond(to request: HTTPRequest) -> HTTPReply {
        guard request.method == "GET" || request.method == "HEAD" else {
            return .now(.error(405, "only GET and HEAD are served", headers: [("Allow", "GET, HEAD")]))
        }
        switch request.path {
        case "/health":
            return .now(isDraining ? .error(503, "draining") : HTTPResponse(
                status: 200, headers: [("Content-Type", "text/plain"), ("Cache-Control", "no-store")], body: Data("ok\n".utf8)))
        case "/metrics" where servesMetrics:
            return .now(metricsResponse())
        default:
            break
        }
        let job: Job
        do { job = try makeJob(request) } catch { return .now(.error(error.status, error.reason)) }
        if let hit = memory[job.key] {
            metrics.state.withLock { $0.resultMemoryHits += 1 }
            return .now(response(hit, job: job, request: request))
        }
        let admitted = load.withLock { load -> Bool in
            guard load.waiting < configuration.maximumQueue else { return false }
            load.waiting += 1
            return true
        }
        guard admitted else {
            metrics.state.withLock { $0.queueRejections += 1 }
            return .now(.error(429, "too many requests are waiting; try again", headers: [("Retry-After", "1")]))
        }
        return .later { [self] in
            defer { load.withLock { $0.waiting -= 1 } }
            do {
                let image = try await result(for: job)
                return response(image, job: job, request: request)
            } catch let refusal as Refusal {
                return .error(refusal.status, refusal.reason)
            } catch {
                let (status, reason) = ErrorStatus.map(error)
                return .error(status, reason)
            }
        }
    }

    func didRespond(to request: HTTPRequest, with response: HTTPResponse, seconds: Double) {
        metrics.state.withLock { $0.record(status: response.status, seconds: seconds) }
        guard let log = configuration.accessLog else { return }
        log(AccessLog.line(request, response, seconds: seconds, format: configuration.logFormat, maximumSide: configuration.maximumOutputSide))
    }

    var queuedCount: Int { load.withLock { $0.waiting } }

    func metricsResponse() -> HTTPResponse {
        var snapshot = metrics.state.withLock { $0 }
        snapshot.pipeline = pipeline.metrics
        snapshot.queued = queuedCount
        return HTTPResponse(
            status: 200, headers: [("Content-Type", "text/plain; version=0.0.4"), ("Cache-Control", "no-store")],
            body: Data(snapshot.prometheusText.utf8))
    }

    // MARK: - Jobs

    /// A checked request: where the image comes from, what to make of it, and its key.
    struct Job: Sendable {
        let source: ImageSource
        let options: ImageOptions
        let output: OutputChoice
        /// Source identity + canonical options + output: keys the encode stage and the caches.
        let key: String
        /// Whether the format followed `Accept` (the response then varies on it).
        var variesOnAccept: Bool { options.format == .auto }
    }

    private func makeJob(_ request: HTTPRequest) throws(Refusal) -> Job {
        let path = try ImagePath(request.path, maximumSide: configuration.maximumOutputSide)
        try checkSignature(path)
        let source = try sources.resolve(path.sourceText)
        let output = OutputChoice(path.options, accept: request.header("Accept"))
        let identity = switch source {
        case .remote(let url): url.absoluteString
        case .local(let url): "local:" + url.path
        }
        return Job(source: source, options: path.options, output: output,
                   key: "lumen-result-v1 \(identity) \(path.options.canonical) \(output.token)")
    }

    private func checkSignature(_ path: ImagePath) throws(Refusal) {
        if configuration.signers.isEmpty {
            guard configuration.allowsUnsigned, path.signature == "_" else {
                throw Refusal(403, "this server takes unsigned paths only, with _ as the signature")
            }
            return
        }
        if path.signature == "_" && configuration.allowsUnsigned { return }
        // Every pair is tried, so that the time taken does not say which one matched.
        var valid = false
        for signer in configuration.signers where signer.isValid(path.signature, for: path.signedPath) { valid = true }
        guard valid else { throw Refusal(403, "the signature does not match the path") }
    }

    /// The encoded result of `job`: from disk, or from running or new work.
    private func result(for job: Job) async throws -> EncodedImage {
        if let disk, let (data, metadata) = disk.cachedData(for: job.key), let etag = metadata.etag,
           let contentType = metadata.contentType {
            let image = EncodedImage(data: data, contentType: contentType, etag: etag)
            memory.store(image, for: job.key)
            metrics.state.withLock { $0.resultDiskHits += 1 }
            return image
        }
        let (image, joined) = try await encodes.result(for: job.key) { [self] in
            // A result stored between this request's memory lookup and its turn here (the
            // encode it would have joined just finished) is taken, not made again.
            if let stored = memory[job.key] { return stored }
            return try await make(job)
        }
        if joined { metrics.state.withLock { $0.encodeJoins += 1 } }
        return image
    }

    private func make(_ job: Job) async throws -> EncodedImage {
        let sharedKey = SharedStore.key(.result, job.key)
        if let shared, let entry = await shared.get(sharedKey, kind: .result), let contentType = entry.fields["Content-Type"] {
            let image = EncodedImage(data: entry.payload, contentType: contentType, etag: Self.etag(entry.payload))
            keep(image, for: job.key)
            return image
        }
        let request = ImageRequest(
            urlRequest: URLRequest(url: job.source.url, timeoutInterval: configuration.sourceTimeout),
            processors: RequestPlan.processors(for: job.options), thumbnail: RequestPlan.thumbnail(for: job.options))
        var response = try await pipeline.image(for: request)
        let (format, contentType) = job.output.resolve(sourceFormat: response.container.format, hasAlpha: response.image.format.hasAlpha)
        if format == .webp, (response.container.sourceFrameCount ?? 1) > 1 {
            // An animated GIF or WebP served as WebP stays animated: its frames are decoded
            // (after the first frame's decode told that there are more), then encoded together.
            var animated = request
            animated.options.insert(.decodeAllFrames)
            response = try await pipeline.image(for: animated)
            metrics.state.withLock { $0.animatedResults += 1 }
        }
        let container = response.container
        let quality = job.options.quality
        let started = monotonicNow()
        let data = try await encodingQueue.run {
            if format == .webp, let frames = container.frames, frames.count > 1 {
                return try frames.encode(as: .webp(quality: quality ?? 80))
            }
            return try RequestPlan.encode(container.image, as: format, quality: quality)
        }
        let seconds = monotonicNow() - started
        metrics.state.withLock { $0.encodes += 1; $0.encodeSeconds += seconds }
        let encoded = EncodedImage(data: data, contentType: contentType, etag: Self.etag(data))
        keep(encoded, for: job.key)
        await shared?.put(SharedStore.Entry(fields: ["Content-Type": contentType], payload: data), for: sharedKey)
        return encoded
    }

    /// Keeps a result in this node's caches (memory, and disk with a cache directory).
    private func keep(_ image: EncodedImage, for key: String) {
        memory.store(image, for: key)
        disk?.storeData(image.data, metadata: CacheMetadata(etag: image.etag, contentType: image.contentType, storedAt: Date()), for: key)
    }

    private func response(_ image: EncodedImage, job: Job, request: HTTPRequest) -> HTTPResponse {
        var headers: [(name: String, value: String)] = [
            ("Cache-Control", "public, max-age=\(configuration.maxAge)"), ("ETag", image.etag),
        ]
        if job.variesOnAccept { headers.append(("Vary", "Accept")) }
        if let tags = request.header("If-None-Match"), Self.matches(tags, image.etag) {
            return HTTPResponse(status: 304, headers: headers)
        }
        headers.insert(("Content-Type", image.contentType), at: 0)
        return HTTPResponse(status: 200, headers: headers, body: image.data)
    }

    /// Whether an `If-None-Match` list names `etag` (weak comparison, as RFC 9110 asks for it).
    static func matches(_ list: String, _ etag: String) -> Bool {
        list.split(separator: ",").contains { item in
            let tag = item.trimmingCharacters(in: .whitespaces)
            return tag == "*" || tag == etag || tag == "W/" + etag
        }
    }

    static func etag(_ data: Data) -> String {
        "\"" + SharedStore.hex(SharedStore.digest(data).prefix(16)) + "\""
    }
}
