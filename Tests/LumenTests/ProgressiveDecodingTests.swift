import Foundation
import Testing
@_spi(Testing) @testable import Lumen
import LumenTestSupport

/// Progressive previews: a progressive JPEG that arrives chunk by chunk (the mock loader holds
/// every chunk until the test releases it) gives full-frame previews, then the final image.
@Suite(.timeLimit(.minutes(1)))
struct ProgressiveDecodingTests {
    static let url = URL(string: "https://example.com/progressive.jpg")!

    static func photo(width: Int, height: Int) -> Bitmap {
        Bitmap(width: width, height: height, format: .rgb8) { pixels in
            for i in pixels.indices {
                let x = (i / 3) % width, y = (i / 3) / width
                pixels[i] = UInt8(truncatingIfNeeded: x &* 5 &+ y &* 3 &+ (x * y) % 17 &* (i % 3 + 1))
            }
        }
    }

    static func jpeg(progressive: Bool, width: Int = 320, height: Int = 240) throws -> Data {
        try photo(width: width, height: height).encode(as: .jpeg(quality: 90, progressive: progressive))
    }

    /// Offsets of the start-of-scan markers (0xFFDA: entropy-coded data stuffs every 0xFF, so
    /// the pair appears only as a marker).
    static func scanStarts(_ data: Data) -> [Int] {
        let bytes = [UInt8](data)
        return (0..<(bytes.count - 1)).filter { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xDA }
    }

    /// Chunk ends that complete the first `count` scans each: just after the next scan's
    /// marker (the end of a scan is known once the marker after it has arrived).
    static func scanBoundaries(_ data: Data, count: Int) -> [Int] {
        let starts = scanStarts(data)
        precondition(starts.count > count, "not enough scans")
        return (1...count).map { starts[$0] + 2 }
    }

    struct Setup {
        let loader = MockDataLoader()
        let pipeline: ImagePipeline
        let decodingQueue: WorkQueue

        init(progressive: Bool = true, configure: (inout ImagePipeline.Configuration) -> Void = { _ in }) {
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.isProgressiveDecodingEnabled = progressive
            decodingQueue = WorkQueue(name: "test.decode", maxConcurrentCount: 2, execution: .threads)
            configuration.decodingQueue = decodingQueue
            configuration.processingQueue = WorkQueue(name: "test.process", maxConcurrentCount: 2, execution: .threads)
            configure(&configuration)
            pipeline = ImagePipeline(configuration: configuration)
            loader.holdsChunks = true
        }
    }

    /// Reads events until a preview (returned) or the end (`nil`).
    static func nextPreview(_ events: inout AsyncStream<ImageTask.Event>.Iterator) async -> ImageResponse? {
        while let event = await events.next() {
            switch event {
            case .progress: continue
            case .preview(let response): return response
            case .finished: return nil
            }
        }
        return nil
    }

    /// Reads events to the end: the previews seen and the final result.
    static func rest(_ events: inout AsyncStream<ImageTask.Event>.Iterator) async -> (previews: [ImageResponse], result: Result<ImageResponse, ImagePipeline.Error>?) {
        var previews: [ImageResponse] = []
        while let event = await events.next() {
            switch event {
            case .progress: continue
            case .preview(let response): previews.append(response)
            case .finished(let result): return (previews, result)
            }
        }
        return (previews, nil)
    }

    static func meanDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
        let pa = a.pixels, pb = b.pixels
        guard pa.count == pb.count, !pa.isEmpty else { return .infinity }
        var sum = 0
        for i in pa.indices { sum += abs(Int(pa[i]) - Int(pb[i])) }
        return Double(sum) / Double(pa.count)
    }

    // MARK: - The scanner

    @Test func scannerFindsEveryScanButTheLastReadingEachByteOnce() throws {
        let jpeg = try Self.jpeg(progressive: true)
        let scans = Self.scanStarts(jpeg).count
        #expect(scans >= 3)
        // Whole, then byte by byte: the same count (the last scan ends with the image).
        var whole = ProgressiveJPEGScanner()
        let isPreview = jpeg.withUnsafeBytes { whole.advance(over: $0) }
        #expect(!isPreview) // complete bytes: the final image, no preview
        #expect(whole.completedScans == scans - 1)
        #expect(!whole.isActive)
        var piecewise = ProgressiveJPEGScanner()
        var reports = 0
        for end in 1...jpeg.count where jpeg.prefix(end).withUnsafeBytes({ piecewise.advance(over: $0) }) { reports += 1 }
        #expect(piecewise.completedScans == scans - 1)
        #expect(reports == scans - 1) // one report per scan that ends before the image does
        // A scan is complete only once the marker after it has arrived.
        let second = Self.scanStarts(jpeg)[1]
        var cut = ProgressiveJPEGScanner()
        _ = jpeg.prefix(second - 1).withUnsafeBytes { cut.advance(over: $0) }
        var cutAfter = ProgressiveJPEGScanner()
        _ = jpeg.prefix(second + 2).withUnsafeBytes { cutAfter.advance(over: $0) }
        #expect(cutAfter.completedScans == 1)
        #expect(cut.completedScans <= 1) // a table segment may sit between the scans
    }

    @Test func scannerStopsAtBaselineAndForeignBytes() throws {
        var baseline = ProgressiveJPEGScanner()
        let jpeg = try Self.jpeg(progressive: false)
        _ = jpeg.prefix(jpeg.count / 2).withUnsafeBytes { baseline.advance(over: $0) }
        #expect(!baseline.isActive && baseline.completedScans == 0)
        var png = ProgressiveJPEGScanner()
        _ = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A]).withUnsafeBytes { png.advance(over: $0) }
        #expect(!png.isActive)
        var junk = ProgressiveJPEGScanner()
        _ = Data([0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01]).withUnsafeBytes { junk.advance(over: $0) } // length < 2
        #expect(!junk.isActive)
    }

    // MARK: - The pipeline

    @Test func progressiveDownloadGivesFullFramePreviewsThenTheFinalImage() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 2))
        let request = ImageRequest(url: Self.url)
        let task = setup.pipeline.imageTask(with: request)
        var events = task.events.makeAsyncIterator()

        setup.loader.releaseChunks(1)
        let first = try #require(await Self.nextPreview(&events))
        #expect(first.isPreview)
        #expect(first.image.width == 320 && first.image.height == 240) // full frame
        #expect(first.urlResponse != nil && first.cacheType == nil)
        // Previews are never cached.
        #expect(setup.pipeline.cache[request] == nil)

        setup.loader.releaseChunks(1)
        let second = try #require(await Self.nextPreview(&events))
        #expect(second.isPreview && second.image.width == 320)

        setup.loader.holdsChunks = false
        let (later, result) = await Self.rest(&events)
        #expect(later.isEmpty) // nothing left to preview: the rest ends with the image
        let final = try #require(try result?.get())
        #expect(!final.isPreview)
        #expect(final.image.width == 320 && final.image.height == 240)
        // The first scans are coarser than the final image, and refine towards it.
        let firstError = Self.meanDifference(first.image, final.image)
        let secondError = Self.meanDifference(second.image, final.image)
        #expect(firstError > 0)
        #expect(secondError <= firstError)
        // The final image, not a preview, is what the memory cache holds.
        let cached = try #require(setup.pipeline.cache[request])
        #expect(!cached.isPreview)
        let metrics = setup.pipeline.metrics
        #expect(metrics.previewDecodes == 2)
        #expect(metrics.decodes == 1)
        #expect(metrics.networkRequestsStarted == 1)
    }

    /// Previews cost nothing when nobody can show them: with no `events` stream open in the
    /// pipeline a completed scan queues no preview decode; with one open, it does.
    @Test(arguments: [false, true])
    func previewsAreDecodedOnlyWhileATaskHasAnEventsStream(watched: Bool) async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 1))
        setup.decodingQueue.isSuspended = true
        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))
        let events = watched ? task.events : nil

        setup.loader.releaseChunks(1)  // the first scan, complete
        await setup.loader.waitForChunks(1)
        #expect(setup.decodingQueue.pendingCount == (watched ? 1 : 0))

        setup.loader.holdsChunks = false
        setup.decodingQueue.isSuspended = false
        let response = try await task.response
        #expect(!response.isPreview && response.image.width == 320)
        #expect(setup.pipeline.metrics.decodes == 1)
        withExtendedLifetime(events) {}
    }

    /// A stream opened after a scan arrived unwatched (the task starts at once; `events` may
    /// come a moment later) gets the preview of that scan: the skipped one is decoded when the
    /// stream opens, and only then.
    @Test func aStreamOpenedAfterAnUnwatchedScanStillGetsItsPreview() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 2))
        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))

        setup.loader.releaseChunks(2)  // two scans, complete, nobody watching
        await setup.loader.waitForChunks(2)
        #expect(setup.decodingQueue.pendingCount == 0 && setup.pipeline.metrics.previewDecodes == 0)

        var events = task.events.makeAsyncIterator() // the rest of the body is still held
        let preview = try #require(await Self.nextPreview(&events))
        #expect(preview.isPreview && preview.image.width == 320)
        #expect(setup.pipeline.metrics.previewDecodes == 1) // the newest skipped scan only

        setup.loader.holdsChunks = false
        let (later, result) = await Self.rest(&events)
        #expect(later.isEmpty)
        #expect(try result?.get().isPreview == false)
        #expect(setup.pipeline.metrics.previewDecodes == 1)
    }

    /// A skipped preview is dropped once the final bytes arrive: a stream opened then sees only
    /// the final image.
    @Test func aSkippedPreviewIsDroppedWhenTheFinalBytesArrive() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 1))
        setup.decodingQueue.isSuspended = true // the final decode waits
        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))
        setup.loader.holdsChunks = false
        await setup.loader.waitForChunks(2)
        await setup.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        #expect(setup.decodingQueue.pendingCount == 1) // the final decode

        var events = task.events.makeAsyncIterator()
        #expect(setup.decodingQueue.pendingCount == 1) // no preview joined it
        setup.decodingQueue.isSuspended = false
        let (previews, result) = await Self.rest(&events)
        #expect(previews.isEmpty)
        #expect(try result?.get().isPreview == false)
        #expect(setup.pipeline.metrics.previewDecodes == 0)
    }

    @Test func previewsAreDecodedAtTheDecodeSizeAndProcessed() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 1))
        let thumbnail = ImageRequest(url: Self.url, thumbnail: .maxPixelSize(160))
        let processed = ImageRequest(url: Self.url, processors: [ImageProcessors.Resize(width: 100)])
        let small = setup.pipeline.imageTask(with: thumbnail)
        let resized = setup.pipeline.imageTask(with: processed)
        var smallEvents = small.events.makeAsyncIterator()
        var resizedEvents = resized.events.makeAsyncIterator()

        setup.loader.releaseChunks(1)
        let smallPreview = try #require(await Self.nextPreview(&smallEvents))
        #expect(smallPreview.isPreview && smallPreview.image.width == 160 && smallPreview.image.height == 120)
        let resizedPreview = try #require(await Self.nextPreview(&resizedEvents))
        #expect(resizedPreview.isPreview && resizedPreview.image.width == 100 && resizedPreview.image.height == 75)
        #expect(setup.pipeline.cache[processed] == nil && setup.pipeline.cache[thumbnail] == nil)

        setup.loader.holdsChunks = false
        let smallFinal = try #require(try await Self.rest(&smallEvents).result?.get())
        let resizedFinal = try #require(try await Self.rest(&resizedEvents).result?.get())
        #expect(!smallFinal.isPreview && smallFinal.image.width == 160)
        #expect(!resizedFinal.isPreview && resizedFinal.image.width == 100)
        let metrics = setup.pipeline.metrics
        #expect(metrics.networkRequestsStarted == 1)
        #expect(metrics.previewProcessorApplications == 1)
        #expect(metrics.processorApplications == 1) // previews are counted apart
    }

    /// Whether the decode queue (suspended) holds a preview decode once the first chunk, which
    /// completes a scan, has been taken.
    static func queuesPreviewAfterFirstScan(progressiveFile: Bool, enabled: Bool) async throws -> (queued: Int, previews: Int, decodes: Int) {
        let setup = Setup(progressive: enabled)
        let jpeg = try Self.jpeg(progressive: progressiveFile)
        // A baseline file has one scan: cut it halfway.
        setup.loader.serve(jpeg, for: Self.url, splitAt: progressiveFile ? Self.scanBoundaries(jpeg, count: 1) : [jpeg.count / 2])
        setup.decodingQueue.isSuspended = true
        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))
        var events = task.events.makeAsyncIterator()
        setup.loader.releaseChunks(1)
        await setup.loader.waitForChunks(1) // a preview, if any, was scheduled in that callback
        let queued = setup.decodingQueue.pendingCount
        setup.loader.holdsChunks = false
        await setup.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        setup.decodingQueue.isSuspended = false
        let (previews, result) = await Self.rest(&events)
        let final = try #require(try result?.get())
        #expect(!final.isPreview && final.image.width == 320)
        return (queued, previews.count, setup.pipeline.metrics.previewDecodes)
    }

    @Test func baselineJPEGAndDisabledSwitchGiveNoPreviews() async throws {
        // Control: a progressive file with the switch on queues a preview decode.
        let control = try await Self.queuesPreviewAfterFirstScan(progressiveFile: true, enabled: true)
        #expect(control.queued == 1)
        // (The final decode supersedes it while the queue is suspended: it never runs.)
        #expect(control.previews == 0 && control.decodes == 0)
        let baseline = try await Self.queuesPreviewAfterFirstScan(progressiveFile: false, enabled: true)
        #expect(baseline.queued == 0 && baseline.previews == 0 && baseline.decodes == 0)
        let disabled = try await Self.queuesPreviewAfterFirstScan(progressiveFile: true, enabled: false)
        #expect(disabled.queued == 0 && disabled.previews == 0 && disabled.decodes == 0)
    }

    @Test func previewsNeverPileUpAndTheFinalDecodeSupersedesThem() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 3))
        setup.decodingQueue.isSuspended = true
        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))
        var events = task.events.makeAsyncIterator()
        for chunk in 1...3 {
            setup.loader.releaseChunks(1)
            await setup.loader.waitForChunks(chunk)
            #expect(setup.decodingQueue.pendingCount == 1) // one preview at a time; newer scans wait
        }
        setup.loader.holdsChunks = false
        await setup.pipeline.waitForMetrics { $0.fetch.completed == 1 }
        // The final decode took the queued preview's place.
        #expect(setup.decodingQueue.pendingCount == 1)
        setup.decodingQueue.isSuspended = false
        let (previews, result) = await Self.rest(&events)
        #expect(previews.isEmpty)
        let final = try #require(try result?.get())
        #expect(!final.isPreview)
        #expect(setup.pipeline.metrics.previewDecodes == 0)
        await setup.pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
    }

    @Test func cancellingDuringPreviewsCancelsTheDownload() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 2))
        let task = setup.pipeline.imageTask(with: ImageRequest(url: Self.url))
        var events = task.events.makeAsyncIterator()
        setup.loader.releaseChunks(1)
        let preview = try #require(await Self.nextPreview(&events))
        #expect(preview.isPreview)
        task.cancel()
        let (previews, result) = await Self.rest(&events)
        #expect(previews.isEmpty)
        guard case .failure(let error)? = result else {
            Issue.record("expected a failure, got \(String(describing: result))")
            return
        }
        #expect(error.code == .cancelled)
        await setup.loader.waitForCancellations(1) // the load stopped waiting for its next chunk
        await setup.pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
        #expect(setup.pipeline.metrics.decodes == 0)
    }

    @Test func cancellingOneOfTwoSubscribersKeepsPreviewsComingForTheOther() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 2))
        let request = ImageRequest(url: Self.url)
        let leaving = setup.pipeline.imageTask(with: request)
        let staying = setup.pipeline.imageTask(with: request)
        var leavingEvents = leaving.events.makeAsyncIterator()
        var stayingEvents = staying.events.makeAsyncIterator()
        setup.loader.releaseChunks(1)
        #expect(await Self.nextPreview(&leavingEvents)?.isPreview == true)
        #expect(await Self.nextPreview(&stayingEvents)?.isPreview == true)
        leaving.cancel()
        let (_, leftWith) = await Self.rest(&leavingEvents)
        guard case .failure(let error)? = leftWith else {
            Issue.record("expected a failure, got \(String(describing: leftWith))")
            return
        }
        #expect(error.code == .cancelled)
        setup.loader.releaseChunks(1)
        #expect(await Self.nextPreview(&stayingEvents)?.isPreview == true)
        setup.loader.holdsChunks = false
        let final = try #require(try await Self.rest(&stayingEvents).result?.get())
        #expect(!final.isPreview)
        #expect(setup.loader.cancelledCount == 0)
        #expect(setup.pipeline.metrics.previewDecodes == 2)
    }

    @Test func everySubscriberGetsPreviewsIncludingOneThatJoinsMidDownload() async throws {
        let setup = Setup()
        let jpeg = try Self.jpeg(progressive: true)
        setup.loader.serve(jpeg, for: Self.url, splitAt: Self.scanBoundaries(jpeg, count: 2))
        let request = ImageRequest(url: Self.url)
        let a = setup.pipeline.imageTask(with: request)
        let b = setup.pipeline.imageTask(with: request)
        var aEvents = a.events.makeAsyncIterator()
        var bEvents = b.events.makeAsyncIterator()
        setup.loader.releaseChunks(1)
        #expect(await Self.nextPreview(&aEvents)?.isPreview == true)
        #expect(await Self.nextPreview(&bEvents)?.isPreview == true)

        let late = setup.pipeline.imageTask(with: request)
        var lateEvents = late.events.makeAsyncIterator()
        setup.loader.releaseChunks(1)
        let lateFirst = try #require(await Self.nextPreview(&lateEvents))
        #expect(lateFirst.isPreview && lateFirst.image.width == 320)
        #expect(await Self.nextPreview(&aEvents)?.isPreview == true)
        #expect(await Self.nextPreview(&bEvents)?.isPreview == true)

        setup.loader.holdsChunks = false
        for events in [aEvents, bEvents, lateEvents] {
            var events = events
            let final = try #require(try await Self.rest(&events).result?.get())
            #expect(!final.isPreview)
        }
        let metrics = setup.pipeline.metrics
        #expect(metrics.networkRequestsStarted == 1)
        #expect(metrics.decodes == 1)
        #expect(metrics.previewDecodes == 2)
        #expect(metrics.decode.joined == 2)
    }

    /// Over real HTTP with the default loader: the server pauses the body after the first scan.
    /// Holds the DocC sample of DecodingAndDownsampling.md ("Progressive previews") verbatim.
    @Test func realDownloadShowsAPreviewWhileTheBodyIsPaused() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let jpeg = try Self.jpeg(progressive: true, width: 640, height: 480)
        server.serve(path: "/progressive.jpg", data: jpeg, contentType: "image/jpeg")
        server.holdBody("/progressive.jpg", after: Self.scanBoundaries(jpeg, count: 1)[0])
        let url = server.url(for: "/progressive.jpg")
        var shown: [Bitmap] = []
        func show(_ image: Bitmap) {
            shown.append(image)
            server.release("/progressive.jpg") // the first preview came while the body was paused
        }

        func sample() async throws {
            // Sample:
            var configuration = ImagePipeline.Configuration()
            configuration.isProgressiveDecodingEnabled = true
            let pipeline = ImagePipeline(configuration: configuration)

            let task = pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(320)))
            for await event in task.events {
                switch event {
                case .progress: break
                case .preview(let preview): show(preview.image) // coarse, full frame
                case .finished(let result): show(try result.get().image)
                }
            }
        }
        try await sample()

        #expect(shown.count >= 2) // at least one preview, then the final image
        #expect(shown.allSatisfy { $0.width == 320 && $0.height == 240 })
        #expect(server.statistics.requests(for: "/progressive.jpg") == 1)
    }

    @Test func defaultDecoderMakesPreviewsOnlyFromPartialProgressiveBytes() throws {
        let decoder = ImageDecoders.Default()
        let context = ImageDecodingContext(request: ImageRequest(url: Self.url), options: DecodeOptions())
        let progressive = try Self.jpeg(progressive: true)
        let cut = progressive.prefix(Self.scanBoundaries(progressive, count: 1)[0])
        let preview = try #require(try decoder.decodePreview(cut, context: context))
        #expect(preview.isPreview && preview.image.width == 320)
        #expect(try decoder.decodePreview(progressive, context: context) == nil) // whole: no preview
        let baseline = try Self.jpeg(progressive: false)
        #expect(throws: ImagingError.truncated) { try decoder.decodePreview(baseline.prefix(baseline.count / 2), context: context) }
        // A custom decoder without `decodePreview` makes none.
        #expect(try TrivialImageDecoder().decodePreview(cut, context: context) == nil)
    }
}
