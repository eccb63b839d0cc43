import Foundation
import Testing
@_spi(Testing) @testable import Lumen
import LumenTestSupport

// Contract tests for the disk and memory layers, written by an independent review from the
// contract (the cache-layers issue, DESIGN.md §3, Lumen.docc/CacheLayers.md), not from the
// implementation.
@Suite(.timeLimit(.minutes(1)))
struct CacheStorageContractTests {
    private static func bytes(_ count: Int, seed: UInt8 = 1) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
    }

    private static func entryFiles(_ directory: URL) -> [(name: String, size: Int)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.count == 64 && $0.allSatisfy(\.isHexDigit) }.map { name in
            let size = (try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[.size] as? Int) ?? 0
            return (name, size)
        }
    }

    private static func metadata(_ clock: CacheTestClock) -> CacheMetadata {
        CacheMetadata(etag: "\"e\"", storedAt: clock.now)
    }

    // MARK: Defaults

    @Test func defaults() throws {
        let directory = try CacheTestDirectory()
        let cache = DataCache(name: "d", directory: directory.url)
        #expect(cache.sizeLimit == 150 * 1024 * 1024)
        #expect(cache.ttl == 7 * 24 * 3600)
        let home = URL(fileURLWithPath: "/home/someone")
        #expect(DataCache.defaultDirectory(name: "n", environment: ["XDG_CACHE_HOME": "/x/cache", "HOME": "/h"], home: home).path == "/x/cache/lumen/n")
        #expect(DataCache.defaultDirectory(name: "n", environment: ["HOME": "/h"], home: home).path == "/h/.cache/lumen/n")
        #expect(DataCache.defaultDirectory(name: "n", environment: [:], home: home).path == "/home/someone/.cache/lumen/n")
        let expected = min(Double(ProcessInfo.processInfo.physicalMemory) * 0.15, 512 * 1024 * 1024)
        #expect(abs(Double(ImageCache.defaultCostLimit) - expected) <= 1)
        #expect(ImageCache().entryCostLimit == 0.1)
        #expect(ImageCache().ttl == nil)
    }

    // MARK: Damaged entries

    @Test func anEntryFileReplacedByADirectoryIsAMissAndReported() async throws {
        let directory = try CacheTestDirectory()
        let failures = CacheTestRecorder<DataCache.Failure>()
        let clock = CacheTestClock()
        let cache = DataCache(name: "d", directory: directory.url, clock: clock.cacheClock, onFailure: failures.record)
        cache.storeData(Self.bytes(100), metadata: Self.metadata(clock), for: "k")
        await cache.flush()
        let path = cache.url(for: "k").path
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        try Data("x".utf8).write(to: URL(fileURLWithPath: path).appendingPathComponent("inner"))
        #expect(cache.cachedData(for: "k") == nil)
        #expect(!failures.all.isEmpty)
        // A new write for the key lands and is served.
        cache.storeData(Self.bytes(100, seed: 9), metadata: Self.metadata(clock), for: "k")
        await cache.flush()
        let reader = DataCache(name: "d", directory: directory.url, clock: clock.cacheClock)
        #expect(reader.cachedData(for: "k")?.data == Self.bytes(100, seed: 9))
    }

    @Test func aZeroByteEntryIsAMissRemovedAndReported() async throws {
        let directory = try CacheTestDirectory()
        let failures = CacheTestRecorder<DataCache.Failure>()
        let cache = DataCache(name: "d", directory: directory.url, onFailure: failures.record)
        await cache.flush()
        _ = FileManager.default.createFile(atPath: cache.url(for: "k").path, contents: Data())
        #expect(cache.cachedData(for: "k") == nil)
        #expect(!FileManager.default.fileExists(atPath: cache.url(for: "k").path))
        #expect(cache.metrics.corruptEntriesRemoved == 1)
        #expect(failures.all.contains { $0.kind == .corruptEntryRemoved })
    }

    @Test func anotherKeysEntryUnderTheRightNameIsNeverServed() async throws {
        let directory = try CacheTestDirectory()
        let clock = CacheTestClock()
        let cache = DataCache(name: "d", directory: directory.url, clock: clock.cacheClock)
        cache.storeData(Self.bytes(100, seed: 2), metadata: Self.metadata(clock), for: "b")
        await cache.flush()
        try FileManager.default.copyItem(at: cache.url(for: "b"), to: cache.url(for: "a"))
        let fresh = DataCache(name: "d", directory: directory.url, clock: clock.cacheClock)
        #expect(fresh.cachedData(for: "a") == nil)
        #expect(fresh.cachedData(for: "b")?.data == Self.bytes(100, seed: 2))
    }

    @Test func aTruncatedEntryIsFetchedAgainByThePipeline() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.a
        h.loader.serve(Self.bytes(500), for: url)
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        let file = h.dataCache!.url(for: DataCache.key(imageID: url.absoluteString))
        let data = try Data(contentsOf: file)
        try data.prefix(data.count - 10).write(to: file)
        h.pipeline.cache.removeAllFromMemory()
        let again = try await h.pipeline.image(for: url)
        #expect(again.cacheType == nil)
        #expect(h.loader.loadCount(for: url) == 2)
        #expect(h.pipeline.metrics.cacheFailures >= 1)
        #expect(h.recorder.counts.cacheFailures >= 1)
    }

    @Test func aHugeGarbageFileWithAnEntryNameIsSweptAndTheLimitHolds() async throws {
        let directory = try CacheTestDirectory()
        let garbage = directory.url.appendingPathComponent(String(repeating: "ab", count: 32))
        try Self.bytes(3 * 1024 * 1024).write(to: garbage)
        let foreign = directory.url.appendingPathComponent("notes.txt")
        try Data("keep me".utf8).write(to: foreign)
        let cache = DataCache(name: "d", directory: directory.url, sizeLimit: 1024 * 1024)
        await cache.flush()
        #expect(!FileManager.default.fileExists(atPath: garbage.path))
        #expect((cache.approximateTotalSize ?? .max) <= 1024 * 1024)
        cache.storeData(Self.bytes(1000), metadata: CacheMetadata(storedAt: Date()), for: "k")
        await cache.flush()
        #expect(cache.cachedData(for: "k")?.data == Self.bytes(1000))
    }

    // MARK: Budgets

    @Test func aSizeLimitSmallerThanOneEntryNeverFailsARequest() async throws {
        let directory = try CacheTestDirectory()
        let clock = CacheTestClock()
        let dataCache = DataCache(name: "tiny", directory: directory.url, sizeLimit: 1, clock: clock.cacheClock)
        let loader = MockDataLoader()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.dataCache = dataCache
        configuration.imageCache = nil
        let pipeline = ImagePipeline(configuration: configuration)
        for _ in 0..<3 { #expect(try await pipeline.image(for: PipelineCacheURLs.a).cacheType == nil) }
        await dataCache.flush()
        #expect(loader.loadCount == 3)
        #expect(Self.entryFiles(directory.url).isEmpty)
    }

    @Test func theSizeLimitHoldsWhileTheProgramRunsAndSweepsGoTo80Percent() async throws {
        let directory = try CacheTestDirectory()
        let clock = CacheTestClock()
        let limit = 40_000
        let cache = DataCache(name: "d", directory: directory.url, sizeLimit: limit, clock: clock.cacheClock)
        await cache.flush()
        var sawSweepTo80 = false
        for i in 0..<60 {
            clock.advance(by: 1)
            cache.storeData(Self.bytes(1000, seed: UInt8(i)), metadata: Self.metadata(clock), for: "k\(i)")
            await cache.flush()
            let total = Self.entryFiles(directory.url).reduce(0) { $0 + $1.size }
            #expect(total <= limit, "after write \(i): \(total) bytes on disk")
            if cache.metrics.sweeps > 1, total <= limit * 8 / 10 + 1200 { sawSweepTo80 = true }
        }
        #expect(sawSweepTo80)
        // Oldest first: the latest entry survives, the first does not.
        #expect(cache.cachedData(for: "k59") != nil)
        #expect(cache.cachedData(for: "k0") == nil)
    }

    @Test func aSweepDropsExpiredEntriesFirstThenTheLeastRecentlyUsed() async throws {
        let directory = try CacheTestDirectory()
        let clock = CacheTestClock()
        let cache = DataCache(name: "d", directory: directory.url, sizeLimit: 1_000_000, ttl: 10 * 3600, clock: clock.cacheClock)
        cache.storeData(Self.bytes(100), metadata: Self.metadata(clock), for: "old")
        clock.advance(by: 2 * 3600)
        cache.storeData(Self.bytes(100), metadata: Self.metadata(clock), for: "a")
        clock.advance(by: 2 * 3600)
        cache.storeData(Self.bytes(100), metadata: Self.metadata(clock), for: "b")
        await cache.flush()
        // TTL boundary: `old` was stored exactly 10 h ago at the next step.
        clock.advance(by: 6 * 3600 - 1)
        cache.sweep()
        await cache.flush()
        #expect(cache.cachedData(for: "old") != nil, "one second before the TTL")
        clock.advance(by: 1)
        cache.sweep()
        await cache.flush()
        #expect(FileManager.default.fileExists(atPath: cache.url(for: "a").path))
        #expect(!FileManager.default.fileExists(atPath: cache.url(for: "old").path), "stored exactly ttl ago: expired")
    }

    @Test func aReadTouchesTheLRUStampAtMostOnceAnHour() async throws {
        let directory = try CacheTestDirectory()
        let clock = CacheTestClock()
        // One entry's size on disk, measured in a scratch cache.
        let scratchDirectory = try CacheTestDirectory()
        let scratch = DataCache(name: "s", directory: scratchDirectory.url, clock: clock.cacheClock)
        scratch.storeData(Self.bytes(1000, seed: 1), metadata: Self.metadata(clock), for: "a")
        await scratch.flush()
        let entrySize = Self.entryFiles(scratchDirectory.url).first!.size
        // Four entries exceed the limit; three fit in 80% of it.
        let cache = DataCache(name: "d", directory: directory.url, sizeLimit: entrySize * 39 / 10, clock: clock.cacheClock)
        cache.storeData(Self.bytes(1000, seed: 1), metadata: Self.metadata(clock), for: "a")
        clock.advance(by: 60)
        cache.storeData(Self.bytes(1000, seed: 2), metadata: Self.metadata(clock), for: "b")
        await cache.flush()
        func mtime(_ key: String) throws -> Date {
            try FileManager.default.attributesOfItem(atPath: cache.url(for: key).path)[.modificationDate] as! Date
        }
        let stampA = try mtime("a")
        clock.advance(by: 30 * 60)
        _ = cache.cachedData(for: "a")
        #expect(try mtime("a") == stampA, "read within the hour: not touched")
        clock.advance(by: 2 * 3600)
        _ = cache.cachedData(for: "a")
        #expect(try mtime("a") > stampA, "read after an hour: touched")
        // Now `b` is the least recently used: a write over the budget evicts it, not `a`.
        clock.advance(by: 60)
        cache.storeData(Self.bytes(1000, seed: 3), metadata: Self.metadata(clock), for: "c")
        clock.advance(by: 60)
        cache.storeData(Self.bytes(1000, seed: 4), metadata: Self.metadata(clock), for: "d")
        await cache.flush()
        #expect(cache.cachedData(for: "b") == nil)
        #expect(cache.cachedData(for: "a") != nil)
        #expect(cache.cachedData(for: "d") != nil)
    }

    @Test func theDiskTTLBoundaryMakesAnEntryStaleExactlyAtTheTTL() async throws {
        let clock = CacheTestClock()
        let metadata = CacheMetadata(storedAt: clock.now)
        #expect(metadata.isFresh(now: clock.now.addingTimeInterval(99.999), ttl: 100))
        #expect(!metadata.isFresh(now: clock.now.addingTimeInterval(100), ttl: 100))
        #expect(metadata.isFresh(now: clock.now.addingTimeInterval(-1000), ttl: 100))
    }

    @Test func concurrentRemoveAllWhileReadsAndWritesRunNeverServesWrongBytes() async throws {
        let directory = try CacheTestDirectory()
        let clock = CacheTestClock()
        let cache = DataCache(name: "d", directory: directory.url, sizeLimit: 200_000, clock: clock.cacheClock)
        let keys = (0..<16).map { "key\($0)" }
        func payload(_ key: String) -> Data { Data((key + String(repeating: "-", count: 500) + key).utf8) }
        let wrong = CallCounter()
        await withTaskGroup(of: Void.self) { group in
            for round in 0..<4 {
                group.addTask {
                    for key in keys { cache.storeData(payload(key), metadata: CacheMetadata(storedAt: clock.now), for: key) }
                }
                group.addTask {
                    for _ in 0..<3 { for key in keys { if let hit = cache.cachedData(for: key), hit.data != payload(key) { wrong.increment() } } }
                }
                group.addTask { if round % 2 == 0 { cache.removeAll() } }
            }
        }
        await cache.flush()
        #expect(wrong.value == 0)
        for key in keys { if let hit = cache.cachedData(for: key) { #expect(hit.data == payload(key)) } }
        cache.removeAll()
        for key in keys { #expect(cache.cachedData(for: key) == nil) }
        await cache.flush()
        #expect(Self.entryFiles(directory.url).isEmpty)
        #expect(cache.approximateTotalSize == 0)
        // Files on disk agree with what a new reader sees.
        let reader = DataCache(name: "d", directory: directory.url, clock: clock.cacheClock)
        for key in keys { #expect(reader.cachedData(for: key) == nil) }
    }

    // MARK: Unusable directories

    @Test func aDirectoryReplacedByAFileNeverFailsARequestAndIsReported() async throws {
        let logs = CacheTestRecorder<String>()
        let h = PipelineCacheHarness { $0.logger = { logs.record($0) } }
        defer { h.cleanUp(); try? FileManager.default.removeItem(at: h.directory) }
        await h.flush()
        try FileManager.default.removeItem(at: h.directory)
        try Data("not a directory".utf8).write(to: h.directory)
        let response = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(response.cacheType == nil)
        await h.flush()
        await h.recorder.wait { $0.cacheFailures >= 1 }
        #expect(h.pipeline.metrics.cacheFailures >= 1)
        #expect(!logs.all.isEmpty)
    }

    @Test func aMissingDirectoryIsRecreated() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        await h.flush()
        try FileManager.default.removeItem(at: h.directory)
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        await h.flush()
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .disk)
        #expect(h.loader.loadCount == 1)
    }

    // MARK: Wiring

    @Test func aDiskHitIsNotWrittenAgainAndANewPipelineStartsWarm() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.a
        _ = try await h.pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(8)))
        await h.flush()
        let writes = h.dataCache!.metrics.writes
        #expect(writes == 1)
        // Another decode size: decoded again from the bytes on disk, no network.
        let bigger = try await h.pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(16)))
        #expect(bigger.cacheType == .disk)
        #expect(bigger.image.width == 16)
        await h.flush()
        #expect(h.dataCache!.metrics.writes == writes)
        #expect(h.pipeline.metrics.diskCache.writes == writes)
        // A new pipeline over the directory.
        let loader = MockDataLoader()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = TrivialImageDecoder()
        configuration.dataCache = DataCache(name: "test", directory: h.directory, clock: h.clock.cacheClock)
        let restarted = ImagePipeline(configuration: configuration)
        #expect(try await restarted.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(32))).cacheType == .disk)
        #expect(loader.loadCount == 0)
        #expect(h.loader.loadCount == 1)
    }

    @Test func encodedProcessedImagesAnswerANewPipelineWithoutProcessing() async throws {
        let applications = ProcessorApplications()
        let processor = MockImageProcessor("p", applications: applications)
        let h = PipelineCacheHarness { $0.dataCachePolicy = .storeEncodedImages }
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.a
        let request = ImageRequest(url: url, processors: [processor], thumbnail: .maxPixelSize(8))
        _ = try await h.pipeline.image(for: request)
        await h.pipeline.waitForMetrics { $0.diskCache.writes >= 1 } // encoded off the response's path
        await h.flush()
        #expect(applications.total == 1)
        // Original bytes are not written under storeEncodedImages for a processed request.
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
        let loader = MockDataLoader()
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        // The real decoder: the stored bytes are an encoded image.
        configuration.dataCachePolicy = .storeEncodedImages
        configuration.dataCache = DataCache(name: "test", directory: h.directory, clock: h.clock.cacheClock)
        let restarted = ImagePipeline(configuration: configuration)
        let response = try await restarted.image(for: request)
        #expect(response.cacheType == .disk)
        #expect(applications.total == 1)
        #expect(loader.loadCount == 0)
        #expect(response.image.width == 9)
    }

    @Test func dataForRequestNeverEncodesAndWritesTheOriginalBytes() async throws {
        let h = PipelineCacheHarness { $0.dataCachePolicy = .storeEncodedImages }
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.b
        let body = Self.bytes(300)
        h.loader.serve(body, for: url)
        let (data, _) = try await h.pipeline.data(for: ImageRequest(url: url, processors: [MockImageProcessor("p")]))
        #expect(data == body)
        await h.flush()
        #expect(h.pipeline.cache.cachedData(for: ImageRequest(url: url)) == body)
        #expect(h.dataCache!.metrics.writes == 1)
        #expect(h.decoder.decodeCount == 0)
    }

    @Test func cacheManagementByRequest() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let a = ImageRequest(url: PipelineCacheURLs.a)
        let b = ImageRequest(url: PipelineCacheURLs.b)
        _ = try await h.pipeline.image(for: a)
        _ = try await h.pipeline.image(for: b)
        await h.flush()
        #expect(h.pipeline.cache[a] != nil && h.pipeline.cache.containsData(for: a))
        h.pipeline.cache.removeAll(for: a)
        #expect(h.pipeline.cache[a] == nil && !h.pipeline.cache.containsData(for: a))
        #expect(h.pipeline.cache[b] != nil && h.pipeline.cache.containsData(for: b))
        h.pipeline.cache.removeAllFromMemory()
        #expect(h.pipeline.cache[b] == nil && h.pipeline.cache.containsData(for: b))
        _ = try await h.pipeline.image(for: b)
        h.pipeline.cache.removeAll()
        #expect(h.pipeline.cache[b] == nil && !h.pipeline.cache.containsData(for: b))
        #expect(try await h.pipeline.image(for: b).cacheType == nil)
        #expect(h.loader.loadCount == 3)
    }

    @Test func readAndWriteOptionsActOnOneLayerEach() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.a
        _ = try await h.pipeline.image(for: ImageRequest(url: url, options: [.disableDiskCacheWrites, .disableMemoryCacheWrites]))
        await h.flush()
        #expect(h.pipeline.cache[ImageRequest(url: url)] == nil)
        #expect(!h.pipeline.cache.containsData(for: ImageRequest(url: url)))
        _ = try await h.pipeline.image(for: url)
        await h.flush()
        #expect(h.loader.loadCount == 2)
        #expect(try await h.pipeline.image(for: ImageRequest(url: url, options: [.disableMemoryCacheReads])).cacheType == .disk)
        #expect(try await h.pipeline.image(for: ImageRequest(url: url, options: [.disableMemoryCacheReads, .disableDiskCacheReads])).cacheType == nil)
        #expect(h.loader.loadCount == 3)
        h.pipeline.cache.removeAllFromMemory()
        let noDisk = try await h.pipeline.image(for: ImageRequest(url: url, options: [.disableDiskCacheReads]))
        #expect(noDisk.cacheType == nil)
        #expect(h.loader.loadCount == 4)
        let offlineMiss = await errorThrown {
            try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.b, options: [.returnCacheDataDontLoad]))
        }
        #expect(offlineMiss.flatMap(ImagePipeline.Error.Code.of) == .dataMissingInCache)
        #expect(h.loader.loadCount == 4)
    }

    @Test func intermediatePrefixesAreStoredOnlyWhenAskedFor() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let url = PipelineCacheURLs.a
        let p1 = MockImageProcessor("1"), p2 = MockImageProcessor("2")
        _ = try await h.pipeline.image(for: ImageRequest(url: url, processors: [p1, p2]))
        #expect(h.imageCache.totalCount == 1)
        #expect(h.pipeline.cache[ImageRequest(url: url, processors: [p1])] == nil)
        #expect(h.pipeline.cache[ImageRequest(url: url)] == nil)
        #expect(h.pipeline.cache[ImageRequest(url: url, processors: [p1, p2])] != nil)
    }

    @Test func memoryHitIsSynchronousAndReportedAsMemory() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let request = ImageRequest(url: PipelineCacheURLs.a, thumbnail: .maxPixelSize(4))
        let first = try await h.pipeline.image(for: request)
        #expect(first.cacheType == nil)
        #expect(h.pipeline.cache[request]?.image == first.image)
        let second = try await h.pipeline.image(for: request)
        #expect(second.cacheType == .memory)
        #expect(h.pipeline.metrics.memoryCache.hits >= 1)
    }

    // MARK: Memory cache

    @Test func aCostLimitOfZeroStoresNothingAndCountsIt() {
        let cache = ImageCache(costLimit: 0)
        #expect(!cache.storeValue(cacheTestImage(cost: 4), forKey: cacheKey("a")))
        #expect(cache.totalCount == 0)
        #expect(cache.metrics.rejectedOversizeCount == 1)
    }

    @Test func anEntryAtExactlyTenPercentIsStoredAndAboveIsRejected() {
        for limit in [4000, 40_000, 1_234_560, 100 * 1024 * 1024] {
            let cache = ImageCache(costLimit: limit)
            let atLimit = limit / 10
            #expect(cache.storeValue(cacheTestImage(cost: atLimit), forKey: cacheKey("at")), "limit \(limit)")
            #expect(!cache.storeValue(cacheTestImage(cost: atLimit + 4), forKey: cacheKey("above")))
            #expect(cache.metrics.rejectedOversizeCount == 1)
        }
    }

    @Test func anOversizeImageInThePipelineIsCountedNotSilent() async throws {
        let h = PipelineCacheHarness(disk: false, imageCache: ImageCache(costLimit: 100))
        let response = try await h.pipeline.image(for: ImageRequest(url: PipelineCacheURLs.a, thumbnail: .maxPixelSize(10)))
        #expect(response.cacheType == nil)
        #expect(h.pipeline.metrics.memoryCacheRejectedOversize == 1)
        #expect(h.imageCache.metrics.rejectedOversizeCount == 1)
    }

    @Test func ttlExpiresExactlyAtTheTTLOnTheInjectedClock() {
        let clock = CacheTestClock()
        let cache = ImageCache(ttl: 10, clock: clock.cacheClock)
        cache[cacheKey("a")] = cacheTestImage(cost: 4)
        clock.advance(by: 9.5)
        #expect(cache[cacheKey("a")] != nil)
        clock.advance(by: 0.5)
        #expect(cache[cacheKey("a")] == nil)
        #expect(cache.metrics.expirations == 1)
        #expect(cache.totalCount == 0 && cache.totalCost == 0)
        // A clock that goes backwards keeps entries alive, never crashes.
        cache[cacheKey("b")] = cacheTestImage(cost: 4)
        clock.advance(by: -3600)
        #expect(cache[cacheKey("b")] != nil)
    }

    @Test func trimWithNegativeTargetsEmptiesTheCache() {
        let cache = ImageCache(costLimit: 1_000_000)
        for i in 0..<5 { cache[cacheKey("\(i)")] = cacheTestImage(cost: 40) }
        cache.trim(toCost: -1)
        #expect(cache.totalCount == 0 && cache.totalCost == 0)
        for i in 0..<5 { cache[cacheKey("\(i)")] = cacheTestImage(cost: 40) }
        cache.trim(toCount: -5)
        #expect(cache.totalCount == 0)
        cache[cacheKey("x")] = cacheTestImage(cost: 40)
        #expect(cache[cacheKey("x")] != nil)
    }

    @Test func loweringALimitEvictsAtOnceLeastRecentlyUsedFirst() {
        let cache = ImageCache(costLimit: 1_000_000)
        for i in 0..<10 { cache[cacheKey("\(i)")] = cacheTestImage(cost: 400) }
        _ = cache[cacheKey("0")]
        cache.costLimit = 3600
        #expect(cache.totalCost <= 3600)
        #expect(cache[cacheKey("0")] != nil)
        #expect(cache[cacheKey("1")] == nil)
        cache.countLimit = 2
        #expect(cache.totalCount == 2)
        cache.trim(toCost: 400)
        #expect(cache.totalCount == 1)
        #expect(cache.metrics.evictions >= 9)
    }
}
