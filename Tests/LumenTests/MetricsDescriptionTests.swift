import Foundation
@testable import Lumen
import Testing

/// `print(pipeline.metrics)` and the caches' metrics read as text (issue 23: "`Metrics` prints
/// readably"): every counter named beside its value, grouped in lines, not Swift's one-line
/// dump of nested structs.
@Suite(.timeLimit(.minutes(1)))
struct MetricsDescriptionTests {
    /// Every counter gets a value of its own, so that each can be found in the text.
    @Test func pipelineMetricsNameEveryCounter() {
        var m = ImagePipeline.Metrics()
        (m.fetch.started, m.fetch.joined, m.fetch.completed, m.fetch.failed, m.fetch.cancelled) = (101, 102, 103, 104, 105)
        (m.decode.started, m.decode.joined, m.decode.completed, m.decode.failed, m.decode.cancelled) = (201, 202, 203, 204, 205)
        (m.process.started, m.process.joined, m.process.completed, m.process.failed, m.process.cancelled) = (301, 302, 303, 304, 305)
        m.networkRequestsStarted = 11; m.peakNetworkRequestsInFlight = 12; m.networkRequestsInFlight = 13
        m.retries = 14; m.retryWaitSeconds = 1.5; m.retryWaitsCancelled = 15; m.localLoadsStarted = 16
        m.bytesDownloaded = 17_000; m.decodes = 18; m.decodesInterrupted = 19; m.resampledFromMemory = 20
        m.previewDecodes = 21; m.processorApplications = 22; m.previewProcessorApplications = 23
        (m.memoryCache.lookups, m.memoryCache.hits, m.memoryCache.writes) = (24, 25, 26); m.memoryCacheRejectedOversize = 27
        (m.diskCache.lookups, m.diskCache.hits, m.diskCache.writes) = (28, 29, 30); m.diskCacheFreshHits = 31
        m.revalidations = 32; m.notModified = 33; m.cacheFailures = 34; m.liveTasks = 35; m.liveRequests = 36
        m.requestHookCalls = 37; m.requestHookRefusals = 38
        m.resumedDownloads = 39; m.resumedBytes = 40; m.resumesAbandoned = 41
        let text = "\(m)"
        let expected = [
            "fetch:        started 101, joined 102, completed 103, failed 104, cancelled 105",
            "decode:       started 201, joined 202, completed 203, failed 204, cancelled 205",
            "process:      started 301, joined 302, completed 303, failed 304, cancelled 305",
            "11 requests started (peak 12 in flight, 13 now)", "14 retries (1.500 s waited, 15 waits cancelled)",
            "16 local loads", "17000 bytes downloaded", "37 request hook calls (38 refused)",
            "39 resumed (40 bytes kept, 41 resumes abandoned)", "18 decodes (19 interrupted)", "20 resampled from memory",
            "21 preview decodes", "22 processor applications (23 on previews)",
            "memory cache: 24 lookups, 25 hits, 26 writes, 27 rejected as oversize",
            "disk cache:   28 lookups, 29 hits, 30 writes; 31 fresh hits, 32 revalidations, 33 not modified, 34 cache failures",
            "live:         35 tasks, 36 requests",
        ]
        for part in expected { #expect(text.contains(part), "\(part) missing from\n\(text)") }
        #expect(text.hasPrefix("ImagePipeline.Metrics\n"))
        #expect(text.split(separator: "\n").count == 9)
        #expect(!text.contains("StageMetrics("), "\(text)")
    }

    @Test func cacheMetricsNameEveryCounter() {
        var data = DataCache.Metrics()
        (data.lookups, data.hits, data.misses, data.writes, data.writeFailures) = (1, 2, 3, 4, 5)
        (data.evictions, data.corruptEntriesRemoved, data.renewals, data.sweeps) = (6, 7, 8, 9)
        #expect("\(data)" == "DataCache.Metrics: 1 lookups, 2 hits, 3 misses, 4 writes, 5 write failures, 6 evictions, "
                + "7 corrupt entries removed, 8 renewals, 9 sweeps")
        var image = ImageCache.Metrics()
        (image.hits, image.misses, image.writes, image.evictions) = (1, 2, 3, 4)
        (image.expirations, image.rejectedOversizeCount, image.totalCount, image.totalCost) = (5, 6, 7, 8)
        #expect("\(image)" == "ImageCache.Metrics: 1 hits, 2 misses, 3 writes, 4 evictions, 5 expirations, "
                + "6 rejected as oversize, 7 entries, 8 bytes held")
    }
}
