import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension ImagePipeline {
    /// All of a pipeline's tuning in one value. Defaults are stated on each property.
    ///
    /// The loader, decoder, caches and work queues are objects: copies of a configuration
    /// share them, so two pipelines made from one configuration value share the memory cache
    /// and the concurrency limits of each queue. Give each pipeline its own queues (and
    /// caches) to keep them independent.
    public struct Configuration: Sendable {
        /// Loads the bytes of URL requests. Default: ``makeDefaultDataLoader()``'s new loader
        /// (a ``CurlDataLoader`` on Linux, a ``DataLoader`` elsewhere).
        public var dataLoader: any DataLoading
        /// Decodes bytes into images on the decoding queue's workers. Default
        /// ``ImageDecoders/Default``.
        public var decoder: any ImageDecoding
        /// The memory cache of decoded images, consulted synchronously before any work starts
        /// (see ``ImagePipeline/Cache``). Default: a new ``ImageCache`` made for this
        /// configuration value — not a process-wide one, so independent pipelines (and tests)
        /// never see each other's images; copies of the configuration share it. `nil` turns
        /// the memory layer off.
        public var imageCache: (any ImageCaching)?
        /// The disk cache of bytes (original data and, by ``dataCachePolicy``, encoded processed
        /// images). Default `nil` (off); set `DataCache(name: "images")` to keep bytes under
        /// `$XDG_CACHE_HOME/lumen/images` with HTTP revalidation. Read and written off the
        /// graph's owner: every read (original bytes, processed images) runs on a decoding
        /// worker, where its decode follows, never behind downloads in the data-loading queue.
        public var dataCache: (any DataCaching)?
        /// What is written to ``dataCache``. Default ``DataCachePolicy/storeOriginalData``.
        public var dataCachePolicy: DataCachePolicy
        /// Whether disk entries' freshness follows the responses' `Cache-Control` (`max-age`,
        /// `no-cache`, `immutable`) within the disk cache's TTL, and, for a response with none of
        /// them but a `Last-Modified`, the heuristic of ``heuristicFreshnessFraction``. `false`:
        /// the TTL alone decides.
        /// Either way a stale entry with a validator is revalidated with a conditional request
        /// and `no-store` responses are never written. Default `true`.
        public var isHTTPCachingRespected: Bool
        /// The fraction of its age at storage (`storedAt` less `Last-Modified`) for which a
        /// disk entry whose response stated no freshness (no `max-age`, `Expires`, `no-cache`
        /// or `immutable`) but a `Last-Modified` is fresh: RFC 9111 §4.2.2's heuristic, capped
        /// by ``maximumHeuristicFreshness`` and by the disk cache's TTL. After it the entry is
        /// revalidated. 0 makes such entries stale at once. Applies while
        /// ``isHTTPCachingRespected``. Default 0.1 (10%).
        public var heuristicFreshnessFraction: Double
        /// The longest heuristic freshness (see ``heuristicFreshnessFraction``), in seconds.
        /// Default 86 400 (one day).
        public var maximumHeuristicFreshness: TimeInterval
        /// Whether equivalent requests share running work at every stage. With `false`, every
        /// request builds its own chain (fetch, decode, each processor). Default `true`.
        public var isTaskCoalescingEnabled: Bool
        /// Whether a progressive JPEG that is still downloading is decoded as it arrives, giving
        /// ``ImageTask/Event/preview(_:)`` events: full-frame, coarser images (decoded at the
        /// request's decode size, with its processors applied, ``ImageResponse/isPreview``
        /// `true`) before the final image. At most one preview decode runs per decode stage at
        /// a time (scans that arrive meanwhile are skipped, only the newest is decoded next);
        /// the final decode supersedes any pending preview; previews are never cached and never
        /// sent after the final image. Baseline JPEGs and other formats give no previews. Only
        /// the decoder's ``ImageDecoding/decodePreview(_:context:)`` makes previews. Previews
        /// are decoded only while some ``ImageTask/events`` stream of this pipeline is open
        /// (`image(for:)` callers never see them, so they cost nothing there). Default `false`.
        public var isProgressiveDecodingEnabled: Bool
        /// Whether every request's decode size (``ImageRequest/thumbnail``) is rounded up to
        /// 64-pixel buckets (``DisplaySize/bucketSize``) where it enters the pipeline, as
        /// ``FetchImage`` rounds display sizes: `.maxPixelSize(199)` and `.maxPixelSize(201)`
        /// both become `.maxPixelSize(256)`, so they share one decode, one memory-cache entry
        /// and one processed disk entry, whoever asks. A `.size` target has its longest side
        /// rounded up and its other side scaled by the same factor (rounded up), keeping its
        /// aspect ratio and content mode. The rounding applies to ``ImagePipeline/imageTask(with:)``,
        /// ``ImagePipeline/image(for:)-(ImageRequest)``, ``ImagePipeline/cache`` lookups by
        /// request and ``ImagePrefetcher``; the task's ``ImageTask/request`` and its responses
        /// carry the rounded size. The image is never decoded above its natural size: a request
        /// rounded up past the image's size gets the image at its natural size (the default
        /// decoder never upscales). Default `false`: sizes are used exactly as given.
        public var isDecodeSizeBucketingEnabled: Bool
        /// Downloads (and data closures): async work, at most 6 at once by default.
        public var dataLoadingQueue: WorkQueue
        /// Decodes (and the disk-cache lookups of original bytes that precede them): dedicated
        /// worker threads, one per core by default.
        public var decodingQueue: WorkQueue
        /// Processors: dedicated worker threads, one per core by default.
        public var processingQueue: WorkQueue
        /// Encodes (for the processed-image disk cache): one worker by default.
        public var encodingQueue: WorkQueue
        /// The largest response accepted, in bytes: checked against the declared length at the
        /// first chunk and again while the body streams in. Default 64 MiB.
        public var maximumResponseDataSize: Int
        /// The largest image decoded, in pixels, checked from the header before pixels are
        /// allocated (``LumenImaging/DecodeOptions/maximumPixelCount``). Default 100 megapixels.
        public var maximumDecodedPixelCount: Int
        /// When failed downloads are retried. Default ``RetryPolicy/none``.
        public var retryPolicy: RetryPolicy
        /// Runs before each load of a URL request (every attempt, revalidations included),
        /// in the fetch stage, and returns the request to send: Nuke's `willLoadData`. Add a
        /// freshly refreshed token, sign a URL. Default `nil`.
        ///
        /// The hook sees only what the load is keyed on: the `URLRequest` every request sharing
        /// this load has in common, and their ``ImageRequest/credentialScope`` (in
        /// ``ImagePipeline/LoadContext``). Whatever it adds for one user therefore reaches only
        /// that user's requests and cache entries: give each user's requests their own scope.
        /// On a request without a scope the hook may set only headers that never identify a
        /// user (`User-Agent`, `Accept-Encoding`, `Cache-Control`, `Pragma` and the tracing
        /// headers `X-Request-ID`, `traceparent`, `tracestate`); any other change — a credential
        /// or other header, the URL, the method or the body — fails the load with
        /// ``ImagePipeline/Error/Code/unscopedCredentials`` before anything is sent. An error the
        /// hook throws fails the load as ``ImagePipeline/Error/Code/dataLoadingFailed`` (retried
        /// only if the retry policy calls it transient). Counted in
        /// ``ImagePipeline/Metrics/requestHookCalls`` and ``ImagePipeline/Metrics/requestHookRefusals``.
        public var willLoadData: (@Sendable (URLRequest, ImagePipeline.LoadContext) async throws -> URLRequest)?
        /// Called for every stage event (work started, joined, completed, failed, cancelled)
        /// and for every problem a cache absorbed (``ImagePipeline/Event/cacheFailure(_:)``),
        /// on the thread where it happened, never while the graph is locked. Default `nil` (off).
        public var eventHandler: (@Sendable (ImagePipeline.Event) -> Void)?
        /// Receives diagnostic messages (failures, invalidation). Default `nil`: a library
        /// never prints.
        public var logger: (@Sendable (String) -> Void)?

        /// A new loader of the platform's default kind, with its defaults.
        ///
        /// On Linux a ``CurlDataLoader``: `URLSession` there is FoundationNetworking, which a
        /// server can crash remotely (a response head cut short by a clean close makes it trap)
        /// and which busy-polls a core while a transfer waits; see ``CurlDataLoader``. On
        /// Apple platforms a ``DataLoader`` over `URLSession`. Both load `http`, `https`,
        /// `file` and `data` URLs and throw the same errors for the same failures.
        public static func makeDefaultDataLoader() -> any DataLoading {
            #if canImport(CCurl) && canImport(CLumenCurl)
            CurlDataLoader()
            #else
            DataLoader()
            #endif
        }

        /// The defaults with a ``DataCache`` named `name` (in its default directory, see
        /// ``DataCache/defaultDirectory(name:)``) as ``dataCache``, as Nuke's
        /// `Configuration.withDataCache` makes. `sizeLimit`: bytes on disk (default: the
        /// cache's default, 150 MB).
        public static func withDataCache(name: String = "lumen", sizeLimit: Int? = nil) -> Configuration {
            var configuration = Configuration()
            configuration.dataCache = sizeLimit.map { DataCache(name: name, sizeLimit: $0) } ?? DataCache(name: name)
            return configuration
        }

        /// Creates a configuration with the defaults, using `dataLoader` for downloads.
        public init(dataLoader: any DataLoading = Configuration.makeDefaultDataLoader()) {
            let cores = max(1, ProcessInfo.processInfo.activeProcessorCount)
            self.dataLoader = dataLoader
            self.decoder = ImageDecoders.Default()
            self.imageCache = ImageCache()
            self.dataCache = nil
            self.dataCachePolicy = .storeOriginalData
            self.isHTTPCachingRespected = true
            self.heuristicFreshnessFraction = 0.1
            self.maximumHeuristicFreshness = 86_400
            self.isTaskCoalescingEnabled = true
            self.isProgressiveDecodingEnabled = false
            self.isDecodeSizeBucketingEnabled = false
            self.dataLoadingQueue = WorkQueue(name: "lumen.data", maxConcurrentCount: 6, execution: .tasks)
            self.decodingQueue = WorkQueue(name: "lumen.decode", maxConcurrentCount: cores, execution: .threads)
            self.processingQueue = WorkQueue(name: "lumen.process", maxConcurrentCount: cores, execution: .threads)
            self.encodingQueue = WorkQueue(name: "lumen.encode", maxConcurrentCount: 1, execution: .threads)
            self.maximumResponseDataSize = 64 << 20
            self.maximumDecodedPixelCount = 100_000_000
            self.retryPolicy = .none
            self.eventHandler = nil
            self.willLoadData = nil
            self.logger = nil
        }
    }
}
