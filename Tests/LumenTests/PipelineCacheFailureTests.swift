import Foundation
import Testing
import Lumen
import LumenTestSupport

/// A broken disk cache never fails a request: the pipeline goes to the network and reports.
@Suite(.timeLimit(.minutes(1)))
struct PipelineCacheFailureTests {
    private func entryFile(_ h: PipelineCacheHarness, _ url: URL) throws -> URL {
        let dataCache = try #require(h.dataCache)
        let key = DataCache.key(imageID: url.absoluteString)
        return dataCache.url(for: key)
    }

    @Test func aDeletedDirectoryFallsBackToTheNetworkAndIsRecreated() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        _ = try await h.pipeline.image(for: PipelineCacheURLs.a)
        await h.flush()
        try FileManager.default.removeItem(at: h.directory)
        h.pipeline.cache.removeAllFromMemory()

        let response = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(response.cacheType == nil)
        #expect(h.loader.loadCount == 2)
        await h.flush()
        #expect(FileManager.default.fileExists(atPath: try entryFile(h, PipelineCacheURLs.a).path))
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .disk)
    }

    @Test func aDirectoryReplacedByAFileFailsNoRequestAndIsReported() async throws {
        let logged = CacheTestRecorder<String>()
        let h = PipelineCacheHarness { $0.logger = { logged.record($0) } }
        defer { h.cleanUp() }
        await h.flush()
        try FileManager.default.removeItem(at: h.directory)
        try Data("not a directory".utf8).write(to: h.directory)

        let response = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(response.cacheType == nil)
        await h.recorder.wait { $0.cacheFailures >= 1 }
        let failures = h.recorder.events.compactMap { event -> DataCache.Failure? in
            if case .cacheFailure(let failure) = event { return failure }
            return nil
        }
        #expect(failures.contains { $0.kind == .writeFailed })
        #expect(h.pipeline.metrics.cacheFailures >= 1)
        #expect(logged.all.contains { $0.contains("cache failure") })

        // Later requests keep working, from memory and (memory emptied) from the network.
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .memory)
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == nil)
        #expect(h.loader.loadCount == 2)
    }

    /// A truly read-only directory (writes fail with EACCES), in a second process: as root —
    /// where permissions do not bind — `lumen-cache-probe` drops to uid 65534 before it builds
    /// its pipeline, and fails (exit 3) if it cannot, so this test never passes on a directory
    /// the probe could have written.
    @Test func aReadOnlyDirectoryFailsNoRequestAndIsReported() async throws {
        let dir = try CacheTestDirectory()
        let runsAsRoot = geteuid() == 0
        if runsAsRoot {
            // uid 65534 must reach the directory: every directory above it searchable by others.
            var ancestor = dir.url.resolvingSymlinksInPath().deletingLastPathComponent()
            while true {
                let mode = try #require(try FileManager.default.attributesOfItem(atPath: ancestor.path)[.posixPermissions] as? Int)
                try #require(mode & 0o001 != 0, "\(ancestor.path) (mode \(String(mode, radix: 8))) is not searchable by uid 65534")
                if ancestor.path == "/" { break }
                ancestor.deleteLastPathComponent()
            }
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: dir.path)

        let outcome = try await Executables.run("lumen-cache-probe", ["pipeline-read-only", dir.path])
        #expect(outcome.status == 0, "\(outcome.standardOutput)\(outcome.standardError)")
        let summary = outcome.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(summary.hasPrefix("ok read-only as uid \(runsAsRoot ? 65534 : geteuid()):"), "\(summary)")
        #expect(summary.contains("2 dropped writes reported (errno \(EACCES))"), "\(summary)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    /// A full disk, in a second process whose file-size limit (RLIMIT_FSIZE, 64 KiB) makes the
    /// write of a larger image fail with EFBIG.
    @Test func aFullDiskFailsNoRequestAndLeavesNothingPartial() async throws {
        let dir = try CacheTestDirectory()
        let outcome = try await Executables.run("lumen-cache-probe", ["pipeline-full-disk", dir.path])
        #expect(outcome.status == 0, "\(outcome.standardOutput)\(outcome.standardError)")
        let summary = outcome.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(summary.hasPrefix("ok full disk"), "\(summary)")
        #expect(summary.contains("2 dropped writes reported (errno \(EFBIG))"), "\(summary)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    @Test func aGarbageEntryIsAMissFetchedAgainAndReported() async throws {
        let h = PipelineCacheHarness()
        defer { h.cleanUp() }
        let first = try await h.pipeline.image(for: PipelineCacheURLs.a)
        await h.flush()
        try Data(repeating: 0x5A, count: 300).write(to: try entryFile(h, PipelineCacheURLs.a))
        h.pipeline.cache.removeAllFromMemory()

        let second = try await h.pipeline.image(for: PipelineCacheURLs.a)
        #expect(second.cacheType == nil)
        #expect(second.image == first.image)
        #expect(h.loader.loadCount == 2)
        await h.recorder.wait { $0.cacheFailures >= 1 }
        #expect(h.recorder.events.contains { event in
            if case .cacheFailure(let failure) = event { return failure.kind == .corruptEntryRemoved }
            return false
        })
        // The fresh download replaced it.
        await h.flush()
        h.pipeline.cache.removeAllFromMemory()
        #expect(try await h.pipeline.image(for: PipelineCacheURLs.a).cacheType == .disk)
        #expect(h.loader.loadCount == 2)
    }

    @Test func aPipelineNoLongerHearsFromACacheAfterItIsGone() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-pipeline-cache-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let dataCache = DataCache(name: "shared", directory: directory)
        let recorder = PipelineEventRecorder()
        do {
            var configuration = ImagePipeline.Configuration(dataLoader: MockDataLoader())
            configuration.dataCache = dataCache
            configuration.eventHandler = recorder.handler
            _ = ImagePipeline(configuration: configuration)
        }
        await dataCache.flush()
        try FileManager.default.removeItem(at: directory)
        try Data("file".utf8).write(to: directory)
        dataCache.storeData(Data([1]), metadata: CacheMetadata(storedAt: Date()), for: "k")
        await dataCache.flush()
        #expect(dataCache.metrics.writeFailures == 1)
        #expect(recorder.counts.cacheFailures == 0)
    }
}
