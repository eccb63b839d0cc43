import Foundation
import Lumen

/// Lumen's pipeline as an HTTP image server: `GET /{signature}/{options}/{source}`.
///
/// One shared ``ImagePipeline`` serves every client, so concurrent requests for one source
/// share one origin fetch, equal decode sizes share one decode, and equal option sets share
/// processing and one encode (the server's own stage, keyed by source, canonical options and
/// output format). Encoded results are kept in memory (and on disk with a cache directory), so
/// a hot request copies bytes and decodes nothing.
///
/// ```swift
/// var configuration = ImageServer.Configuration()
/// configuration.port = 0
/// configuration.signers = [try URLSigner(keyHex: key, saltHex: salt)]
/// let server = try ImageServer(configuration: configuration)   // listening when this returns
/// print("listening on http://127.0.0.1:\(server.port)")
/// // …
/// await server.drain()                                          // finish what is in flight, stop
/// ```
public final class ImageServer: Sendable {
    public let configuration: Configuration
    /// The pipeline every request goes through.
    public let pipeline: ImagePipeline
    /// The port the server listens on (the one picked, for port 0).
    public let port: Int
    /// The port of the metrics listener, with ``Configuration/metricsListen``.
    public let metricsPort: Int?

    private let service: ImageService
    private let http: any HTTPServing
    private let metricsHTTP: (any HTTPServing)?
    private let caches: [DataCache]
    private let redis: RedisClient?

    /// Starts a server: it is listening when this returns.
    /// - Throws: ``ServerError`` when the configuration is unusable or the address is taken.
    public init(configuration: Configuration) throws {
        guard !configuration.signers.isEmpty || configuration.allowsUnsigned else { throw ServerError.unsigned }
        guard configuration.maximumOutputSide > 0, configuration.maximumQueue >= 0, configuration.workers > 0 else {
            throw ServerError.invalidConfiguration("max-output-side and workers must be positive, max-queue not negative")
        }
        if let root = configuration.localRoot {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root.path, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ServerError.invalidConfiguration("--local-root is not a directory: \(root.path)")
            }
        }
        guard configuration.redisTTL > 0, configuration.redisMaximumValueBytes >= 0, configuration.redisTimeout > 0 else {
            throw ServerError.invalidConfiguration("redis-ttl and redis-timeout must be positive, redis-max-value not negative")
        }
        var configuration = configuration
        if configuration.logFormat == .json, let logger = configuration.logger {
            // Diagnostics in the access log's form, so that a JSON log stays one object per line.
            configuration.logger = { message in logger(AccessLog.diagnostic(message)) }
        }
        self.configuration = configuration
        let metrics = MetricsStore()
        var caches: [DataCache] = []
        var resultDisk: DataCache?
        var shared: SharedStore?
        if let address = configuration.redis {
            let logger = configuration.logger
            let client = RedisClient(address: address, timeout: configuration.redisTimeout) { isUp, reason in
                metrics.state.withLock {
                    $0.redis.isUp = isUp
                    $0.redis.stateChanges += 1
                }
                logger?(isUp ? "redis: \(reason)" : "redis: unreachable (\(reason)); serving from this node's caches and the origin")
            }
            shared = SharedStore(
                client: client, ttl: configuration.redisTTL, maximumValueBytes: configuration.redisMaximumValueBytes,
                lockMilliseconds: Int((configuration.sourceTimeout + 1) * 1000), metrics: metrics, logger: logger)
            self.redis = client
        } else {
            self.redis = nil
        }
        // --allow-host holds for every redirect too, not only for the URL asked for.
        var policy = ConnectionPolicy(allowing: configuration.allowedSourceAddresses)
        if !configuration.allowedHosts.isEmpty {
            let hosts = SourcePolicy(allowedHosts: configuration.allowedHosts, localRoot: nil)
            policy.allowsRedirect = { url in hosts.isAllowed(host: url.host ?? "") }
        }
        let origin = configuration.dataLoader ?? CurlDataLoader(
            requestTimeout: configuration.sourceTimeout, resourceTimeout: configuration.sourceTimeout,
            allowsLocalFiles: configuration.localRoot != nil, connectionPolicy: policy, maximumRedirects: 5)
        var pipelineConfiguration = ImagePipeline.Configuration(
            dataLoader: SharedOriginLoader(base: origin, shared: shared, metrics: metrics))
        if let directory = configuration.cacheDirectory {
            let logger = configuration.logger
            let originals = DataCache(
                name: "originals", directory: directory.appendingPathComponent("originals"),
                sizeLimit: max(1, configuration.cacheSizeBytes / 4 * 3),
                onFailure: { failure in logger?("disk cache: \(failure)") })
            let results = DataCache(
                name: "results", directory: directory.appendingPathComponent("results"),
                sizeLimit: max(1, configuration.cacheSizeBytes / 4),
                onFailure: { failure in logger?("disk cache: \(failure)") })
            pipelineConfiguration.dataCache = originals
            caches = [originals, results]
            resultDisk = results
        }
        // A small cache of bitmaps: the server keeps encoded results (memory and disk), so
        // bitmaps only need to outlive the moment between a result's encode and its storing
        // (requests that arrive then make it again, from a cached bitmap). The pipeline's
        // default budget kept a bitmap per recent result: several times their bytes.
        pipelineConfiguration.imageCache = ImageCache(costLimit: 16 * 1024 * 1024)
        pipelineConfiguration.decoder = TimedDecoder(base: ImageDecoders.Default(), counters: metrics)
        pipelineConfiguration.maximumResponseDataSize = configuration.maximumSourceBytes
        pipelineConfiguration.maximumDecodedPixelCount = configuration.maximumSourcePixels
        pipelineConfiguration.decodingQueue.maxConcurrentCount = configuration.workers
        pipelineConfiguration.processingQueue.maxConcurrentCount = configuration.workers
        pipelineConfiguration.encodingQueue.maxConcurrentCount = configuration.workers
        pipelineConfiguration.logger = configuration.logger
        let pipeline = ImagePipeline(configuration: pipelineConfiguration)
        self.pipeline = pipeline
        self.caches = caches
        let service = ImageService(
            configuration: configuration, pipeline: pipeline, metrics: metrics, resultDisk: resultDisk, shared: shared)
        self.service = service
        let settings = HTTPSettings(
            host: configuration.host, port: configuration.port, threads: configuration.httpThreads,
            maximumConnections: configuration.maximumConnections, clientTimeout: configuration.clientTimeout,
            headerMemory: 32 * 1024)
        let http: MicroHTTPServer
        do { http = try MicroHTTPServer(settings: settings, handler: service) } catch {
            redis?.close()
            throw error
        }
        self.http = http
        self.port = http.port
        if let listen = configuration.metricsListen {
            do {
                let metricsServer = try MicroHTTPServer(
                    settings: HTTPSettings(host: listen.host, port: listen.port, threads: 1, maximumConnections: 64,
                                           clientTimeout: configuration.clientTimeout, headerMemory: 16 * 1024),
                    handler: MetricsHandler(service: service))
                self.metricsHTTP = metricsServer
                self.metricsPort = metricsServer.port
            } catch {
                http.stop()
                redis?.close()
                throw error
            }
        } else {
            self.metricsHTTP = nil
            self.metricsPort = nil
        }
    }

    /// A snapshot of the server's counters and its pipeline's.
    public var metrics: Metrics {
        var snapshot = service.metrics.state.withLock { $0 }
        snapshot.pipeline = pipeline.metrics
        snapshot.inFlight = http.inFlightCount
        snapshot.queued = service.queuedCount
        return snapshot
    }

    /// The graceful stop (SIGTERM): stops accepting, answers `/health` with 503, lets requests
    /// in flight finish for up to `timeout` seconds (default ``Configuration/drainTimeout``),
    /// flushes the disk caches, and stops.
    public func drain(timeout: Double? = nil) async {
        service.beginDraining()
        http.stopAccepting()
        let deadline = monotonicNow() + (timeout ?? configuration.drainTimeout)
        while http.inFlightCount > 0 && monotonicNow() < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        stop()
        for cache in caches { await cache.flush() }
    }

    /// Stops at once: requests still running are answered 503 and every connection closes.
    public func stop() {
        http.stop()
        metricsHTTP?.stop()
        redis?.close()
    }

    deinit { stop() }
}

/// The metrics listener's handler: `/metrics` and `/health` only.
private struct MetricsHandler: HTTPHandling {
    let service: ImageService

    func respond(to request: HTTPRequest) -> HTTPReply {
        switch (request.method, request.path) {
        case ("GET", "/metrics"), ("HEAD", "/metrics"): .now(service.metricsResponse())
        case ("GET", "/health"), ("HEAD", "/health"): service.respond(to: request)
        default: .now(.error(404, "this listener serves /metrics and /health"))
        }
    }

    func didRespond(to request: HTTPRequest, with response: HTTPResponse, seconds: Double) {}
}
