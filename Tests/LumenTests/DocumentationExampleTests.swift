import Foundation
import Observation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenUI
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The code samples of the DocC articles in `Sources/Lumen/Lumen.docc`, run as tests. Each test
// holds one article sample verbatim (comments that state a result become `#expect`s), plus the
// setup the article leaves implicit. When a sample changes in an article, change it here too.

/// Inputs the articles take for granted: image bytes and a scratch directory.
private enum DocFixtures {
    /// A photo-like RGB image: smooth gradients with some texture, so that JPEG behaves as it
    /// does on photos.
    static func photo(width: Int, height: Int) -> Bitmap {
        Bitmap(width: width, height: height, format: .rgb8) { buffer in
            for y in 0..<height {
                for x in 0..<width {
                    let i = (y * width + x) * 3
                    buffer[i] = UInt8(truncatingIfNeeded: x * 255 / max(1, width - 1))
                    buffer[i + 1] = UInt8(truncatingIfNeeded: y * 255 / max(1, height - 1))
                    buffer[i + 2] = UInt8(truncatingIfNeeded: (x ^ y) & 0x3F)
                }
            }
        }
    }

    /// `photo(width:height:)` encoded as a JPEG.
    static func jpeg(width: Int, height: Int) throws -> Data {
        try photo(width: width, height: height).encode(as: .jpeg(quality: 85))
    }

    /// The shared test corpus, `../shared/corpus` from the package root.
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("shared/corpus", isDirectory: true)

    /// A fresh empty directory under the temporary directory.
    static func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("lumen-doc-examples-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}

// MARK: - Lumen.md

@Suite(.timeLimit(.minutes(1)))
struct DocumentationExampleTests {
    /// The landing page's taste of the API, against a loopback server instead of the internet.
    @Test func landingPageLoadsAThumbnailOverHTTP() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.serve(path: "/photo.jpg", data: try DocFixtures.jpeg(width: 800, height: 600), contentType: "image/jpeg")
        let url = server.url(for: "/photo.jpg")

        // Sample:
        let pipeline = ImagePipeline(configuration: .init())
        let request = ImageRequest(url: url, thumbnail: .maxPixelSize(320))
        let response = try await pipeline.image(for: request)

        #expect(max(response.image.width, response.image.height) == 320)
        #expect(response.image.width * 600 / 800 == response.image.height)
        #expect(server.requestCount(for: "/photo.jpg") == 1)
    }
}

// MARK: - CoalescingAndCancellation.md

extension DocumentationExampleTests {
    @Suite(.timeLimit(.minutes(1)))
    struct CoalescingAndCancellation {
        /// A pipeline on a mock loader and the trivial decoder, as the article's samples assume.
        private static func setUp() -> (MockDataLoader, ImagePipeline.Configuration, ImagePipeline, URL) {
            let loader = MockDataLoader()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = TrivialImageDecoder()
            let pipeline = ImagePipeline(configuration: configuration)
            return (loader, configuration, pipeline, URL(string: "https://example.com/avatar.jpg")!)
        }

        @Test func equivalentRequestsShareOneDownloadAndOneDecode() async throws {
            let loader = MockDataLoader()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = TrivialImageDecoder()
            let pipeline = ImagePipeline(configuration: configuration)
            let url = URL(string: "https://example.com/avatar.jpg")!

            loader.isSuspended = true // hold the download while the callers arrive
            let tasks = (0..<8).map { _ in pipeline.imageTask(with: ImageRequest(url: url)) }
            loader.resume()
            for task in tasks { _ = try await task.response }

            let metrics = pipeline.metrics
            #expect(loader.loadCount == 1)
            #expect(metrics.decode.started == 1 && metrics.decode.joined == 7)
        }

        @Test func laterStagesDifferEarlierStagesAreShared() async throws {
            let (loader, _, pipeline, url) = Self.setUp()

            loader.isSuspended = true
            let small = pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(160)))
            let large = pipeline.imageTask(with: ImageRequest(url: url, thumbnail: .maxPixelSize(640)))
            let gray = pipeline.imageTask(with: ImageRequest(url: url, processors: [ImageProcessors.Grayscale()]))
            let grayBlurred = pipeline.imageTask(with: ImageRequest(
                url: url, processors: [ImageProcessors.Grayscale(), ImageProcessors.GaussianBlur(radius: 2)]))
            loader.resume()
            for task in [small, large, gray, grayBlurred] { _ = try await task.response }
            #expect(loader.loadCount == 1)
            #expect(pipeline.metrics.decodes == 3)
            #expect(pipeline.metrics.processorApplications == 2)
        }

        @Test func credentialsSeparateDownloadsTimeoutsDoNot() async throws {
            let (loader, _, pipeline, url) = Self.setUp()

            var alice = URLRequest(url: url)
            alice.setValue("Bearer alice", forHTTPHeaderField: "Authorization")
            var bob = URLRequest(url: url)
            bob.setValue("Bearer bob", forHTTPHeaderField: "Authorization")
            var aliceAgain = alice
            aliceAgain.timeoutInterval = 5 // not part of the key

            loader.isSuspended = true
            let tasks = [alice, bob, aliceAgain].map { pipeline.imageTask(with: ImageRequest(urlRequest: $0)) }
            loader.resume()
            for task in tasks { _ = try await task.response }
            #expect(loader.loadCount == 2)
        }

        @Test func byteLoadsShareTheDownloadWithImageRequests() async throws {
            let (loader, _, pipeline, url) = Self.setUp()
            loader.isSuspended = true
            let image = pipeline.imageTask(with: ImageRequest(url: url))
            let bytes = pipeline.dataTask(with: ImageRequest(url: url))
            loader.resume()
            let (data, _) = try await bytes.response
            _ = try await image.response
            #expect(loader.loadCount == 1)
            #expect(pipeline.metrics.fetch.joined == 1)
            #expect(!data.isEmpty)
        }

        @Test func memoryCacheOptionsAreNotPartOfAnyKey() async throws {
            let (loader, _, pipeline, url) = Self.setUp()
            loader.isSuspended = true
            let plain = pipeline.imageTask(with: ImageRequest(url: url))
            let noWrites = pipeline.imageTask(with: ImageRequest(url: url, options: [.disableMemoryCacheWrites]))
            loader.resume()
            _ = try await (plain.response, noWrites.response)
            #expect(pipeline.metrics.decode.started == 1 && pipeline.metrics.decode.joined == 1)
            #expect(pipeline.cache[ImageRequest(url: url)] != nil) // stored for the request that allowed it
        }

        @Test func oneImageIDIsStillTwoDownloadsWhileTheyRun() async throws {
            let (loader, _, pipeline, _) = Self.setUp()
            loader.isSuspended = true
            let tasks = ["monday", "tuesday"].map { signature in
                var request = ImageRequest(url: URL(string: "https://cdn.example.com/photo.jpg?signature=\(signature)")!)
                request.imageID = "photo-42"
                return pipeline.imageTask(with: request)
            }
            loader.resume()
            for task in tasks { _ = try await task.response }
            #expect(loader.loadCount == 2)
        }

        @Test func markedCredentialHeadersSeparateDownloads() async throws {
            let (loader, _, pipeline, url) = Self.setUp()
            loader.isSuspended = true

            func request(apiKey: String) -> ImageRequest {
                var urlRequest = URLRequest(url: url)
                urlRequest.setValue(apiKey, forHTTPHeaderField: "X-Api-Key")
                var request = ImageRequest(urlRequest: urlRequest)
                request.credentialHeaders = ["X-Api-Key"] // compared case-insensitively
                return request
            }
            let first = pipeline.imageTask(with: request(apiKey: "key-1"))
            let second = pipeline.imageTask(with: request(apiKey: "key-2"))

            loader.resume()
            _ = try await first.response
            _ = try await second.response
            #expect(loader.loadCount == 2)

            // Control: the same header, not marked as a credential, does not separate requests.
            loader.isSuspended = true
            let unmarked = ["key-3", "key-4"].map { key in
                var urlRequest = URLRequest(url: URL(string: "https://example.com/other.jpg")!)
                urlRequest.setValue(key, forHTTPHeaderField: "X-Api-Key")
                return pipeline.imageTask(with: ImageRequest(urlRequest: urlRequest))
            }
            loader.resume()
            for task in unmarked { _ = try await task.response }
            #expect(loader.loadCount == 3)
        }

        @Test func cancellingOneSubscriberKeepsTheSharedDownload() async throws {
            let (loader, _, pipeline, url) = Self.setUp()

            loader.isSuspended = true
            let first = pipeline.imageTask(with: ImageRequest(url: url))
            let second = pipeline.imageTask(with: ImageRequest(url: url))
            await loader.waitForLoads(1)

            first.cancel() // removes first's subscription only
            loader.resume()
            let response = try await second.response // the download went on
            #expect(first.state == .cancelled)
            #expect(loader.cancelledCount == 0)
            #expect(response.image.pixelCount > 0)
        }

        @Test func theLastSubscriberLeavingCancelsTheChain() async throws {
            let (loader, _, pipeline, url) = Self.setUp()

            loader.isSuspended = true
            let only = pipeline.imageTask(with: ImageRequest(url: url, processors: [ImageProcessors.Grayscale()]))
            await loader.waitForLoads(1)

            only.cancel() // the last subscriber: processing, decode and fetch are cancelled
            await loader.waitForCancellations(1) // the loader's Swift task was cancelled
            #expect(pipeline.metrics.fetch.cancelled == 1)
            #expect(pipeline.metrics.decode.cancelled == 1)
            #expect(pipeline.metrics.process.cancelled == 1)
        }

        @Test func cancellingTheAwaitingSwiftTaskCancelsTheRequest() async throws {
            let (loader, _, pipeline, url) = Self.setUp()
            loader.isSuspended = true
            var caught = false

            let load = Task { try await pipeline.image(for: url) }
            await loader.waitForLoads(1)
            load.cancel()
            do {
                _ = try await load.value
            } catch ImagePipeline.Error.cancelled {
                // Cancelled work always ends with the `.cancelled` code, never as a loading failure.
                caught = true
            }
            #expect(caught)
            await loader.waitForCancellations(1)
        }

        @Test func invalidatingFailsLaterRequests() async throws {
            let (_, _, pipeline, url) = Self.setUp()
            pipeline.invalidate()
            await #expect(throws: ImagePipeline.Error.self) { try await pipeline.image(for: url) }
            do {
                _ = try await pipeline.image(for: url)
            } catch let error as ImagePipeline.Error {
                #expect(error.code == .pipelineInvalidated)
            }
        }

        @Test func priorityIsTheMaximumOverTheGroup() async throws {
            let url = URL(string: "https://example.com/avatar.jpg")!

            let downloads = WorkQueue(name: "downloads", maxConcurrentCount: 6, execution: .tasks)
            downloads.isSuspended = true // keep items pending so that their priorities can be read
            var configuration = ImagePipeline.Configuration(dataLoader: MockDataLoader())
            configuration.decoder = TrivialImageDecoder()
            configuration.dataLoadingQueue = downloads
            let pipeline = ImagePipeline(configuration: configuration)

            let prefetch = pipeline.imageTask(with: ImageRequest(url: url, priority: .low))
            #expect(downloads.pendingPriorities == [.low])
            let visible = pipeline.imageTask(with: ImageRequest(url: url, priority: .high))
            #expect(downloads.pendingPriorities == [.high])
            visible.cancel()
            #expect(downloads.pendingPriorities == [.low])
            prefetch.priority = .veryHigh
            #expect(downloads.pendingPriorities == [.veryHigh])
            downloads.isSuspended = false
            _ = try await prefetch.response
        }

        @Test func failuresReachEverySubscriberAndAreNotRemembered() async throws {
            let (loader, _, pipeline, url) = Self.setUp()
            var failures: [ImagePipeline.Error] = []

            loader.fail(url, statusCode: 503)
            loader.isSuspended = true
            let a = pipeline.imageTask(with: ImageRequest(url: url))
            let b = pipeline.imageTask(with: ImageRequest(url: url))
            loader.resume()
            for task in [a, b] {
                do {
                    _ = try await task.response
                } catch let error as ImagePipeline.Error {
                    failures.append(error)
                }
            }
            #expect(failures.count == 2)
            #expect(failures.allSatisfy { $0.code == .dataLoadingFailed && $0.statusCode == 503 })
            #expect(loader.loadCount == 1)

            loader.removeFailure(for: url)
            _ = try await pipeline.image(for: url) // a fresh download: loader.loadCount == 2
            #expect(loader.loadCount == 2)
        }

        @Test func retryPolicyRetriesFailedDownloads() async throws {
            let (loader, base, _, url) = Self.setUp()
            var configuration = base
            loader.fail(url, statusCode: 503)

            configuration.retryPolicy = ImagePipeline.RetryPolicy(maximumAttempts: 3)

            let pipeline = ImagePipeline(configuration: configuration)
            await #expect(throws: ImagePipeline.Error.self) { try await pipeline.image(for: url) }
            #expect(loader.loadCount == 3)

            // A 404 is not transient: one attempt only.
            let missing = URL(string: "https://example.com/missing.jpg")!
            loader.fail(missing, statusCode: 404)
            await #expect(throws: ImagePipeline.Error.self) { try await pipeline.image(for: missing) }
            #expect(loader.loadCount(for: missing) == 1)
        }

        @Test func withoutCoalescingEveryRequestBuildsItsOwnChain() async throws {
            let (loader, base, _, url) = Self.setUp()
            var configuration = base

            configuration.isTaskCoalescingEnabled = false
            let pipeline = ImagePipeline(configuration: configuration)
            loader.isSuspended = true // all four start before any finishes
            let tasks = (0..<4).map { _ in pipeline.imageTask(with: ImageRequest(url: url)) }
            loader.resume()
            for task in tasks { _ = try await task.response }
            #expect(loader.loadCount == 4)
        }
    }
}

// MARK: - DecodingAndDownsampling.md

extension DocumentationExampleTests {
    @Suite(.timeLimit(.minutes(1)))
    struct DecodingAndDownsampling {
        /// The article's `jpegData`: a 2048 × 1536 photo-like JPEG, made once.
        private static let photoJPEG = Result { try DocFixtures.jpeg(width: 2048, height: 1536) }

        @Test func decodesAtTheRequestedSizeThroughAReducedDCTScale() throws {
            let jpegData = try Self.photoJPEG.get()

            let options = DecodeOptions(size: .maxPixelSize(256))
            let decoded = try ImageDecoder.decode(jpegData, options: options)
            #expect(decoded.bitmap.width == 256 && decoded.bitmap.height == 192)
            // 2048 / 8 = 256 still covers the target, so the rule picks TurboJPEG's 1/8 scale.
            #expect(decoded.statistics.codecScale == 1.0 / 8)
            #expect(decoded.statistics.codecWidth == 256)
        }

        @Test func aspectFillGivesExactlyTheTargetSize() throws {
            let jpegData = try Self.photoJPEG.get()

            let square = try ImageDecoder.decode(jpegData, options: DecodeOptions(
                size: .size(width: 200, height: 200, contentMode: .aspectFill)))
            #expect(square.bitmap.width == 200 && square.bitmap.height == 200)
        }

        @Test func anUpscaledOutputIsHeldToThePixelLimit() throws {
            let small = try DocFixtures.jpeg(width: 100, height: 100)
            let options = DecodeOptions(size: .maxPixelSize(2000), allowsUpscaling: true, maximumPixelCount: 1_000_000)
            #expect(throws: ImagingError.tooLarge(width: 2000, height: 2000)) { try ImageDecoder.decode(small, options: options) }
        }

        @Test func smallImagesAreNeverUpscaled() throws {
            let size = ImageDecoder.outputSize(width: 100, height: 100, options: DecodeOptions(size: .maxPixelSize(256)))
            #expect(size == (100, 100))
            // And a real decode agrees with the computed size.
            let small = try DocFixtures.jpeg(width: 100, height: 100)
            let decoded = try ImageDecoder.decode(small, options: DecodeOptions(size: .maxPixelSize(256)))
            #expect(decoded.bitmap.width == 100 && decoded.bitmap.height == 100)
        }

        @Test func headerOnlyInfo() throws {
            let info = try ImageDecoder.info(for: Self.photoJPEG.get())
            #expect(info.format == .jpeg && info.width == 2048 && info.height == 1536)
        }

        @Test func sharperPreshrinkKeepsMorePixelsForTheResampler() throws {
            let jpegData = try Self.photoJPEG.get()
            let fastest = try ImageDecoder.decode(jpegData, options: DecodeOptions(size: .maxPixelSize(256)))

            var sharper = DecodeOptions(size: .maxPixelSize(256))
            sharper.preshrink = .sharpest // keep at least twice the target for the resampler
            let decoded = try ImageDecoder.decode(jpegData, options: sharper)
            #expect(decoded.statistics.codecScale >= 2 * 256 / 2048.0)
            #expect(decoded.statistics.codecScale > fastest.statistics.codecScale)
            #expect(decoded.statistics.isResampled)
            #expect(decoded.bitmap.width == 256) // the same output size either way
        }

        @Test func twoDecodeSizesShareOneDownload() async throws {
            let loader = MockDataLoader()
            let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
            let url = URL(string: "https://example.com/photo.jpg")!
            loader.serve(try Self.photoJPEG.get(), for: url)
            loader.isSuspended = true

            async let thumbnail = pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(160)))
            async let detail = pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(640)))
            await pipeline.waitForMetrics { $0.decode.started == 2 } // both subscribed: release the download
            loader.resume()
            let (small, large) = try await (thumbnail, detail)

            #expect(small.image.width == 160 && large.image.width == 640)
            #expect(loader.loadCount == 1)
            #expect(pipeline.metrics.decodes == 2)
        }

        @Test func aCustomDecoderTunesThePipelinesDecodes() async throws {
            struct SharperDecoder: ImageDecoding {
                func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
                    var options = context.options // the request's decode size and the pipeline's pixel limit
                    options.preshrink = .sharpest
                    let decoded = try ImageDecoder.decode(data, options: options)
                    if decoded.isPartial { throw ImagingError.truncated } // never a cut image as the result
                    return ImageContainer(image: decoded.bitmap, format: decoded.statistics.format)
                }
            }

            let loader = MockDataLoader()
            let url = URL(string: "https://example.com/photo.jpg")!
            loader.serve(try Self.photoJPEG.get(), for: url)

            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = SharperDecoder()

            let pipeline = ImagePipeline(configuration: configuration)
            let response = try await pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(256)))
            #expect(response.image.width == 256)
            #expect(response.container.format == .jpeg)

            // The pixel limit reaches the decoder through the context: the decoder never sets it.
            configuration.maximumDecodedPixelCount = 1_000_000
            configuration.imageCache = ImageCache() // copies of a configuration share its memory cache
            let limited = ImagePipeline(configuration: configuration)
            let error = await #expect(throws: ImagePipeline.Error.self) {
                try await limited.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(256)))
            }
            #expect(error?.code == .decodingFailed)
            #expect(error?.underlyingError as? ImagingError == .tooLarge(width: 2048, height: 1536))
        }

        @MainActor
        @Test func fetchImageDecodesAtTheBucketedDisplaySize() async throws {
            let loader = MockDataLoader()
            let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
            let url = URL(string: "https://example.com/photo.jpg")!
            loader.serve(try Self.photoJPEG.get(), for: url)

            let model = FetchImage(pipeline: pipeline)
            model.load(ImageRequest(url: url))
            model.displaySize(width: 100, height: 100, scale: 2) // 200 pixels: decoded at the 256 bucket

            while model.phase.image == nil && model.phase.error == nil {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    withObservationTracking { _ = model.phase } onChange: { continuation.resume() }
                }
            }
            let image = try #require(model.phase.image)
            #expect(max(image.width, image.height) == DisplaySize.bucketed(200))
            #expect(DisplaySize.bucketed(200) == 256)
        }

        @Test func processorsRunAfterTheDecode() async throws {
            let loader = MockDataLoader()
            let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
            let url = URL(string: "https://example.com/avatar.jpg")!
            loader.serve(try Self.photoJPEG.get(), for: url)

            let avatar = ImageRequest(
                url: url,
                processors: [ImageProcessors.Circle()],
                thumbnail: .size(width: 128, height: 128, contentMode: .aspectFill))
            let response = try await pipeline.image(for: avatar)
            let png = try response.image.encode(as: .png)

            #expect(response.image.width == 128 && response.image.height == 128)
            #expect(response.image.format == .rgba8)
            #expect(response.image.rgba(x: 0, y: 0).a == 0) // a corner lies outside the circle
            #expect(response.image.rgba(x: 64, y: 64).a == 255)
            #expect(try ImageDecoder.info(for: png).format == .png)
        }

        @Test func thePixelLimitIsCheckedFromTheHeader() throws {
            let jpegData = try Self.photoJPEG.get()
            var refused: (Int, Int)?

            do {
                _ = try ImageDecoder.decode(jpegData, options: DecodeOptions(maximumPixelCount: 1_000_000))
            } catch {
                // `error` is an ImagingError: the decoder's functions use typed throws.
                if case .tooLarge(let width, let height) = error {
                    // refused from the header: no pixels were allocated
                    refused = (width, height)
                }
            }
            #expect(refused.map { $0 == (2048, 1536) } == true)
        }

        @Test func thePipelineWrapsDecoderErrors() async throws {
            let loader = MockDataLoader()
            let url = URL(string: "https://example.com/photo.jpg")!
            loader.serve(try Self.photoJPEG.get(), for: url)
            var refused: (Int, Int)?

            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.maximumDecodedPixelCount = 1_000_000
            let pipeline = ImagePipeline(configuration: configuration)
            do {
                _ = try await pipeline.image(for: url)
            } catch let error as ImagePipeline.Error where error.code == .decodingFailed {
                if case .tooLarge(let width, let height)? = error.underlyingError as? ImagingError {
                    refused = (width, height) // the article prints them
                }
            }
            #expect(refused.map { $0 == (2048, 1536) } == true)
        }

        @Test func aCutJPEGIsNeverTheFinalImage() async throws {
            let photo = DocFixtures.photo(width: 320, height: 240)
            let progressive = try photo.encode(as: .jpeg(quality: 90, progressive: true))
            let baseline = try photo.encode(as: .jpeg(quality: 90, progressive: false))

            // The engine: a progressive JPEG cut short is a complete, coarser frame, marked partial;
            // a baseline one is truncated.
            let partial = try ImageDecoder.decode(progressive.prefix(progressive.count / 2))
            #expect(partial.isPartial && partial.bitmap.width == 320 && partial.bitmap.height == 240)
            #expect(throws: ImagingError.truncated) { try ImageDecoder.decode(baseline.prefix(baseline.count / 2)) }

            // The pipeline: a partial decode is a decoding failure, never the response.
            let loader = MockDataLoader()
            let url = URL(string: "https://example.com/cut.jpg")!
            loader.serve(progressive.prefix(progressive.count / 2), for: url)
            let pipeline = ImagePipeline(configuration: .init(dataLoader: loader))
            let error = await #expect(throws: ImagePipeline.Error.self) { try await pipeline.image(for: url) }
            #expect(error?.code == .decodingFailed)
            #expect(error?.underlyingError as? ImagingError == .truncated)
            #expect(pipeline.cache[ImageRequest(url: url)] == nil)
        }

        @Test func animationsDecodeFrameByFrame() throws {
            let gif = try Data(contentsOf: DocFixtures.corpus.appendingPathComponent("real-world/chi.gif"))
            let first = try ImageDecoder.decode(gif)
            let frames = try ImageDecoder.decodeFrames(gif)
            #expect(frames.count > 1)
            #expect(frames.allSatisfy { $0.bitmap.width == first.bitmap.width && $0.bitmap.height == first.bitmap.height })
            #expect(frames.allSatisfy { $0.duration > 0 })
            #expect(frames[0].bitmap.pixels == first.bitmap.pixels) // `decode` gives the first frame
        }
    }
}

// MARK: - TestingYourCode.md

extension DocumentationExampleTests {
    @Suite(.timeLimit(.minutes(1)))
    struct TestingYourCode {
        private static let avatar = URL(string: "https://example.com/avatar/42.jpg")!

        private static func setUp() -> (MockDataLoader, ImagePipeline) {
            let loader = MockDataLoader()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = TrivialImageDecoder()
            return (loader, ImagePipeline(configuration: configuration))
        }

        @Test func holdWaitReleaseCount() async throws {
            let loader = MockDataLoader()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = TrivialImageDecoder() // no image files needed
            let pipeline = ImagePipeline(configuration: configuration)
            let avatar = URL(string: "https://example.com/avatar/42.jpg")!

            loader.isSuspended = true
            let cells = (0..<3).map { _ in Task { try await pipeline.image(for: avatar) } }
            await pipeline.waitForMetrics { $0.decode.started + $0.decode.joined == 3 } // all three subscribed
            loader.resume()
            for cell in cells { _ = try await cell.value }

            #expect(loader.loadCount(for: avatar) == 1)
            await pipeline.waitForMetrics { $0.liveTasks == 0 && $0.liveRequests == 0 }
        }

        @Test func failuresCarryTheStatus() async throws {
            let (loader, pipeline) = Self.setUp()
            let avatar = Self.avatar

            loader.fail(avatar, statusCode: 404)
            let error = await #expect(throws: ImagePipeline.Error.self) {
                try await pipeline.image(for: avatar)
            }
            #expect(error?.code == .dataLoadingFailed)
            #expect(error?.statusCode == 404)
        }

        @Test func cancellationReachesTheLoader() async throws {
            let (loader, pipeline) = Self.setUp()
            let avatar = Self.avatar

            loader.isSuspended = true
            let cell = Task { try await pipeline.image(for: avatar) }
            await loader.waitForLoads(1)
            cell.cancel() // the cell scrolled away
            await loader.waitForCancellations(1)
            #expect(pipeline.metrics.fetch.cancelled == 1)
        }

        @Test func aVisibleRequestJoinsARunningPrefetch() async throws {
            let avatar = Self.avatar

            let recorder = PipelineEventRecorder()
            let loader = MockDataLoader()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = TrivialImageDecoder()
            configuration.eventHandler = recorder.handler
            let pipeline = ImagePipeline(configuration: configuration)

            loader.isSuspended = true
            let prefetcher = ImagePrefetcher(pipeline: pipeline)
            prefetcher.startPrefetching(with: [avatar])
            await loader.waitForLoads(1)
            let visible = pipeline.imageTask(with: ImageRequest(url: avatar))
            await recorder.wait { $0.joined(.decode) == 1 } // the visible request joined the prefetch's work
            loader.resume()
            _ = try await visible.response

            #expect(loader.loadCount == 1)
            #expect(recorder.counts.started(.fetch) == 1)
            await prefetcher.waitUntilIdle()
            #expect(prefetcher.outcomes.succeeded == 1)
        }

        @Test func countingProcessors() async throws {
            let (loader, pipeline) = Self.setUp()
            let avatar = Self.avatar

            let applications = ProcessorApplications()
            let frame = MockImageProcessor("frame", applications: applications)
            loader.isSuspended = true
            let first = pipeline.imageTask(with: ImageRequest(url: avatar, processors: [frame]))
            let second = pipeline.imageTask(with: ImageRequest(url: avatar, processors: [frame]))
            loader.resume()
            _ = try await (first.response, second.response)
            #expect(applications["mock.frame"] == 1)
        }

        @Test func aFailingMockProcessorIsAProcessingFailure() async throws {
            let (_, pipeline) = Self.setUp()
            let error = await #expect(throws: ImagePipeline.Error.self) {
                try await pipeline.image(for: ImageRequest(url: Self.avatar, processors: [MockImageProcessor("x", fails: true)]))
            }
            #expect(error?.code == .processingFailed)
            #expect(error?.processorIdentifier == MockImageProcessor("x", fails: true).identifier)
        }

        @Test func aRealHTTPServer() async throws {
            let jpegData = try DocFixtures.jpeg(width: 64, height: 48)

            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/avatar.jpg", data: jpegData, contentType: "image/jpeg")
            server.hold("/avatar.jpg")

            let pipeline = ImagePipeline(configuration: .init()) // the real DataLoader, over HTTP
            let url = server.url(for: "/avatar.jpg")
            let tasks = (0..<5).map { _ in pipeline.imageTask(with: ImageRequest(url: url)) }
            try await server.waitForRequests(path: "/avatar.jpg", count: 1)
            server.release("/avatar.jpg")
            for task in tasks { _ = try await task.response }

            #expect(server.requestCount(for: "/avatar.jpg") == 1)
            #expect(server.statistics.peakConnections == 1)

            server.respond(path: "/private.jpg", status: 403)
            var request = URLRequest(url: server.url(for: "/private.jpg"))
            request.setValue("Bearer token-1", forHTTPHeaderField: "Authorization")
            let error = await #expect(throws: ImagePipeline.Error.self) {
                try await pipeline.image(for: ImageRequest(urlRequest: request))
            }
            #expect(error?.statusCode == 403)
            #expect(server.recordedRequests(for: "/private.jpg").first?.header("authorization") == "Bearer token-1")
        }
    }
}

// MARK: - Performance.md

extension DocumentationExampleTests {
    @Suite(.timeLimit(.minutes(1)))
    struct Performance {
        /// The article's code sample, at a size a debug build runs quickly. No timing is
        /// asserted: only the counts the article says the scenario reports.
        @Test func pipelineBenchmarksRunFromCode() async throws {
            let result = try await PipelineBenchmarks.coalesce(count: 200)
            #expect(result.requests == 200)
            #expect(result.networkRequests == 1)
            #expect(result.decodes == 1)
            #expect(result.json.hasPrefix("{\"name\": \"coalesce\", \"requests\": 200, \"networkRequests\": 1,"))
            #expect(result.baselineMicrosPerRequest != nil)

            let overhead = try await PipelineBenchmarks.overhead(count: 100)
            #expect(overhead.networkRequests == 100 && overhead.decodes == 100)
            // The JSON carries the command's keys: the whole cost, the baseline, their difference
            // and ratio.
            for key in ["microsPerRequest", "baselineMicrosPerRequest", "overheadMicrosPerRequest", "pipelineOverBaseline"] {
                #expect(overhead.json.contains("\"\(key)\""))
            }
        }

        /// `lumen bench coalesce overhead cache --json --count 200`: one JSON object per scenario with the
        /// keys the article lists (a debug build: the numbers mean nothing, the keys and counts do).
        @Test func benchJSONHasTheDocumentedKeys() async throws {
            let outcome = try await Executables.run(
                "lumen", ["bench", "coalesce", "overhead", "cache", "--json", "--iterations", "1", "--count", "200"])
            #expect(outcome.status == 0)
            let objects = try outcome.standardOutput.split(separator: "\n").map { line in
                try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            }
            try #require(objects.count == 3)
            let common: Set = [
                "scenario", "requests", "networkRequests", "decodes", "microsPerRequest",
                "baselineMicrosPerRequest", "overheadMicrosPerRequest", "pipelineOverBaseline",
            ]
            #expect(Set(objects[0].keys) == common.union(["bytesPerInFlightRequest", "pipelineMicrosPerSubscriber"]))
            #expect(Set(objects[1].keys) == common)
            // In both scenarios microsPerRequest is the pipeline's whole cost: the baseline
            // plus the overhead, and the ratio is the whole cost over the baseline.
            for object in objects[0...1] {
                let total = try #require(object["microsPerRequest"] as? Double)
                let baseline = try #require(object["baselineMicrosPerRequest"] as? Double)
                let overhead = try #require(object["overheadMicrosPerRequest"] as? Double)
                let ratio = try #require(object["pipelineOverBaseline"] as? Double)
                #expect(abs(total - baseline - overhead) < 1e-6)
                #expect(abs(ratio - total / baseline) < 1e-9)
            }
            #expect(objects[0]["pipelineMicrosPerSubscriber"] as? Double == objects[0]["overheadMicrosPerRequest"] as? Double)
            #expect(objects[0]["scenario"] as? String == "coalesce" && objects[0]["networkRequests"] as? Int == 1)
            #expect(objects[1]["scenario"] as? String == "overhead")
            #expect(objects[0]["requests"] as? Int == 200 && objects[1]["requests"] as? Int == 200) // --count
            #expect(Set(objects[2].keys) == [
                "scenario", "syncHitNanos", "asyncHitNanos", "diskHitMicros", "directReadDecodeMicros",
                "diskHitRatio", "pipelineOverBaseline", "sweepMillis", "sweepEntries", "sweepEvictingMillis", "sweepEvicted",
            ])
            #expect(objects[2]["pipelineOverBaseline"] as? Double == objects[2]["diskHitRatio"] as? Double)
            // Half the directory's size as the limit, swept down to 80% of it: about 60% go.
            let evicted = try #require(objects[2]["sweepEvicted"] as? Int)
            #expect(evicted > 5_000 && evicted < 7_000)
        }

        /// The text output of `coalesce` and `overhead`: the pipeline's line, the baseline's,
        /// then the ratio of the two (`cache`, slower, is left to the JSON test above).
        @Test func benchTextPrintsRatios() async throws {
            let outcome = try await Executables.run(
                "lumen", ["bench", "coalesce", "overhead", "--iterations", "1", "--count", "200"])
            #expect(outcome.status == 0)
            let lines = outcome.standardOutput.split(separator: "\n").map(String.init)
            let ratios = lines.indices.filter { lines[$0].hasPrefix("  ratio pipeline ÷ baseline:") }
            #expect(ratios.count == 2)
            for index in ratios {
                try #require(index >= 2, "a ratio line without the two lines it compares: \(lines)")
                #expect(lines[index - 2].hasPrefix("  pipeline:") && lines[index - 1].hasPrefix("  baseline:"))
            }
        }

        @Test func anUnknownScenarioIsAUsageError() async throws {
            let outcome = try await Executables.run("lumen", ["bench", "nosuch"])
            #expect(outcome.status == 2)
            // The feed's trace options without the feed say so rather than being ignored.
            let misplaced = try await Executables.run("lumen", ["bench", "coalesce", "--seed", "7"])
            #expect(misplaced.status == 2)
            #expect(misplaced.standardError.contains("--seed"))
        }
    }
}

// MARK: - CacheLayers.md

/// The article's clock for tests: a `CacheClock` advanced by hand.
private final class ManualClock: Sendable {
    private let date = Mutex(Date(timeIntervalSince1970: 1_700_000_000))
    var cacheClock: CacheClock { CacheClock { [self] in date.withLock { $0 } } }
    func advance(by seconds: TimeInterval) { date.withLock { $0.addTimeInterval(seconds) } }
}

extension DocumentationExampleTests {
    @Suite(.timeLimit(.minutes(1)))
    struct CacheLayers {
        private static let url = URL(string: "https://example.com/photo.jpg")!

        /// A pipeline on a mock loader and the trivial decoder, with the default caches.
        private static func setUp() -> (MockDataLoader, ImagePipeline.Configuration) {
            let loader = MockDataLoader()
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.decoder = TrivialImageDecoder()
            return (loader, configuration)
        }

        @Test func theSecondRequestIsAnsweredFromMemory() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/photo.jpg", data: try DocFixtures.jpeg(width: 64, height: 48), contentType: "image/jpeg")
            let url = server.url(for: "/photo.jpg")

            let pipeline = ImagePipeline(configuration: .init()) // a memory cache of its own, no disk cache
            let first = try await pipeline.image(for: url)
            #expect(first.cacheType == nil)
            let second = try await pipeline.image(for: url)
            #expect(second.cacheType == .memory)
            #expect(server.requestCount(for: "/photo.jpg") == 1)
            #expect(second.image == first.image)
        }

        @Test func theMemoryCacheOnItsOwn() throws {
            let bitmap = DocFixtures.photo(width: 16, height: 16)

            let cache = ImageCache(costLimit: 64 << 20, countLimit: 500)
            let key = ImageCacheKey(imageID: "https://example.com/a.jpg", decodeSize: .maxPixelSize(256))
            cache[key] = ImageContainer(image: bitmap)
            let hit = cache[key] // O(1), synchronous
            #expect(hit?.image == bitmap)
            #expect(cache.metrics.hits == 1)
            cache.trim(toCount: 0) // evict everything, least recently used first
            #expect(cache[key] == nil && cache.totalCount == 0)

            // The per-entry limit: an image above 10% of the cost limit is refused and counted.
            let small = ImageCache(costLimit: bitmap.byteCount * 5)
            #expect(!small.storeValue(ImageContainer(image: bitmap), forKey: key))
            #expect(small.metrics.rejectedOversizeCount == 1)
        }

        @Test func aMemoryCacheOfYourOwn() async throws {
            let (loader, base) = Self.setUp()
            var configuration = base

            configuration.imageCache = ImageCache(costLimit: 256 << 20, ttl: 600)
            let pipeline = ImagePipeline(configuration: configuration)
            _ = try await pipeline.image(for: Self.url)
            #expect(pipeline.cache[ImageRequest(url: Self.url)] != nil)
            #expect((configuration.imageCache as? ImageCache)?.totalCount == 1)

            configuration.imageCache = nil // the memory layer off
            let uncached = ImagePipeline(configuration: configuration)
            _ = try await uncached.image(for: Self.url)
            let again = try await uncached.image(for: Self.url)
            #expect(again.cacheType == nil)
            #expect(loader.loadCount == 3)
        }

        /// The sample's `DataCache(name: "images")` would create `~/.cache/lumen/images` for real:
        /// here its size and TTL defaults are checked on a cache in a scratch directory, and its
        /// directory through ``DataCache/defaultDirectory(name:)``, which creates nothing.
        @Test func aDiskCacheInTheConfiguration() async throws {
            let scratch = try DocFixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: scratch) }
            var configuration = ImagePipeline.Configuration()
            configuration.dataCache = DataCache(name: "images", directory: scratch) // 150 MB, 7 days

            let cache = try #require(configuration.dataCache as? DataCache)
            #expect(cache.directory == scratch)
            #expect(cache.sizeLimit == 150 * 1024 * 1024 && cache.ttl == 7 * 24 * 3600)
            await cache.flush() // its startup scan is done before the directory goes

            let directory = DataCache.defaultDirectory(name: "images") // ~/.cache/lumen/images
            #expect(directory.path.hasSuffix("/lumen/images"))
            if ProcessInfo.processInfo.environment["XDG_CACHE_HOME"] == nil {
                let home = FileManager.default.homeDirectoryForCurrentUser
                #expect(directory.standardizedFileURL.path == home.appendingPathComponent(".cache/lumen/images").standardizedFileURL.path)
            }
        }

        @Test func aNewPipelineOverTheSameDirectoryStartsWarm() async throws {
            let loader = MockDataLoader()
            let url = Self.url
            loader.serve(try DocFixtures.jpeg(width: 800, height: 600), for: url)
            let cacheDirectory = try DocFixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: cacheDirectory) }

            let dataCache = DataCache(name: "images", directory: cacheDirectory)
            var configuration = ImagePipeline.Configuration(dataLoader: loader)
            configuration.dataCache = dataCache
            let pipeline = ImagePipeline(configuration: configuration)
            _ = try await pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(160)))
            await dataCache.flush()

            // Later, a pipeline with an empty memory cache over the same directory:
            var later = ImagePipeline.Configuration(dataLoader: loader)
            later.dataCache = DataCache(name: "images", directory: cacheDirectory)
            let restarted = ImagePipeline(configuration: later)
            let detail = try await restarted.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(640)))
            #expect(detail.cacheType == .disk)
            #expect(detail.image.width == 640)
            #expect(loader.loadCount == 1)
            #expect(restarted.metrics.networkRequestsStarted == 0)
        }

        @Test func freshnessFromCacheControl() {
            let stored = Date(timeIntervalSince1970: 1_700_000_000)
            let metadata = CacheMetadata(headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60"], now: stored)
            let ttl: TimeInterval = 7 * 24 * 3600
            #expect(metadata.isFresh(now: stored.addingTimeInterval(30), ttl: ttl)) // true: served from disk
            #expect(!metadata.isFresh(now: stored.addingTimeInterval(90), ttl: ttl)) // false: ask the server
            #expect(metadata.conditionalHeaders == ["If-None-Match": "\"v1\""])
            // Without HTTP semantics the TTL alone decides.
            #expect(metadata.isFresh(now: stored.addingTimeInterval(90), ttl: ttl, respectsHTTPCaching: false))
        }

        @Test func aStaleEntryIsRevalidatedAgainstTheServer() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let jpegData = try DocFixtures.jpeg(width: 64, height: 48)
            let cacheDirectory = try DocFixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: cacheDirectory) }

            let clock = ManualClock()
            server.serve(path: "/a.jpg", data: jpegData, etag: "\"v1\"", cacheControl: "max-age=60")
            var configuration = ImagePipeline.Configuration()
            configuration.imageCache = nil // disk only, for the example
            configuration.dataCache = DataCache(name: "test", directory: cacheDirectory, clock: clock.cacheClock)
            let pipeline = ImagePipeline(configuration: configuration)
            let url = server.url(for: "/a.jpg")

            _ = try await pipeline.image(for: url) // downloaded
            clock.advance(by: 90)                  // past max-age
            let revalidated = try await pipeline.image(for: url)
            #expect(revalidated.cacheType == .disk)
            #expect(server.statistics.notModifiedResponses == 1)
            #expect(pipeline.metrics.revalidations == 1 && pipeline.metrics.notModified == 1)
            #expect(server.statistics.bodyBytesSent == jpegData.count) // the bytes went over the wire once
            #expect(server.recordedRequests(for: "/a.jpg").last?.header("If-None-Match") == "\"v1\"")
        }

        @Test func cacheOnlyRequestsNeverTouchTheNetwork() async throws {
            let (loader, configuration) = Self.setUp()
            let pipeline = ImagePipeline(configuration: configuration)
            let url = Self.url
            var caught = false

            let offline = ImageRequest(url: url, options: [.returnCacheDataDontLoad])
            do {
                _ = try await pipeline.image(for: offline)
            } catch ImagePipeline.Error.dataMissingInCache {
                // not cached, and the network was not asked
                caught = true
            }
            #expect(caught)
            #expect(loader.loadCount == 0)

            // Once the image is cached, the same request is answered.
            _ = try await pipeline.image(for: url)
            #expect(try await pipeline.image(for: offline).cacheType == .memory)
            // And a reload goes to the source although the image is cached.
            let reloaded = try await pipeline.image(for: ImageRequest(url: url, options: [.reloadIgnoringCachedData]))
            #expect(reloaded.cacheType == nil)
            #expect(loader.loadCount == 2)
        }

        @Test func signedURLsWithOneImageIDShareEntries() async throws {
            let (loader, configuration) = Self.setUp()
            let pipeline = ImagePipeline(configuration: configuration)

            var monday = ImageRequest(url: URL(string: "https://cdn.example.com/photo.jpg?signature=monday")!)
            monday.imageID = "photo-42"
            var tuesday = ImageRequest(url: URL(string: "https://cdn.example.com/photo.jpg?signature=tuesday")!)
            tuesday.imageID = "photo-42"

            _ = try await pipeline.image(for: monday)
            let response = try await pipeline.image(for: tuesday)
            #expect(response.cacheType == .memory)
            #expect(loader.loadCount == 1)

            // Credentials still separate them.
            var urlRequest = URLRequest(url: URL(string: "https://cdn.example.com/photo.jpg?signature=wednesday")!)
            urlRequest.setValue("Bearer someone-else", forHTTPHeaderField: "Authorization")
            var wednesday = ImageRequest(urlRequest: urlRequest)
            wednesday.imageID = "photo-42"
            #expect(try await pipeline.image(for: wednesday).cacheType == nil)
            #expect(loader.loadCount == 2)
        }

        @Test func managingTheCachesByRequest() async throws {
            let (loader, base) = Self.setUp()
            let cacheDirectory = try DocFixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: cacheDirectory) }
            var configuration = base
            configuration.dataCache = DataCache(name: "images", directory: cacheDirectory)
            let pipeline = ImagePipeline(configuration: configuration)
            let url = Self.url
            let original = Data((0..<100).map { UInt8($0) })
            loader.serve(original, for: url)
            _ = try await pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(256)))

            let request = ImageRequest(url: url, thumbnail: .maxPixelSize(256))
            let image = pipeline.cache[request]        // the final image in memory, synchronously
            #expect(image != nil)
            #expect(pipeline.cache.containsData(for: request))  // whether the original bytes are on disk
            #expect(pipeline.cache.cachedData(for: request) == original)
            pipeline.cache.removeAllFromMemory()       // empty memory, keep the bytes on disk
            #expect(pipeline.cache[request] == nil && pipeline.cache.containsData(for: request))
            pipeline.cache.removeAll(for: request)     // that request's entries, in both layers
            #expect(!pipeline.cache.containsData(for: request))
            pipeline.cache.storeCachedData(Data([1, 2, 3]), for: request)
            #expect(pipeline.cache.cachedData(for: request) == Data([1, 2, 3]))
            pipeline.cache.removeAll()                 // empty both layers
            #expect(!pipeline.cache.containsData(for: request))
        }

        @Test func cacheFailuresAreReportedNotThrown() async throws {
            let (loader, base) = Self.setUp()
            let recorder = PipelineEventRecorder()
            let blocked = try DocFixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: blocked) }
            // A regular file where the cache wants its directory: every write fails.
            let notADirectory = blocked.appendingPathComponent("cache")
            try Data("not a directory".utf8).write(to: notADirectory)

            var configuration = base
            configuration.eventHandler = recorder.handler
            let dataCache = DataCache(name: "images", directory: notADirectory)
            configuration.dataCache = dataCache
            let pipeline = ImagePipeline(configuration: configuration)
            let response = try await pipeline.image(for: Self.url)
            await dataCache.flush()
            await recorder.wait { $0.cacheFailures >= 1 }
            #expect(response.cacheType == nil)
            #expect(loader.loadCount == 1)
            #expect(pipeline.metrics.cacheFailures >= 1)
        }
    }
}

// MARK: - ComingFromNuke.md

extension DocumentationExampleTests {
    @Suite(.timeLimit(.minutes(1)))
    struct ComingFromNuke {
        /// The moved Nuke program, against a loopback server; only the cache's `directory:` added.
        @Test func theMovedNukeProgramRuns() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/avatar.jpg", data: try DocFixtures.jpeg(width: 400, height: 300), contentType: "image/jpeg")
            let avatarText = server.url(for: "/avatar.jpg").absoluteString
            let directory = try DocFixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }

            let pipeline = ImagePipeline {
                $0.dataCache = DataCache(name: "avatars", directory: directory)
                $0.isProgressiveDecodingEnabled = false
            }
            let request = ImageRequest(
                url: URL(string: avatarText),                          // an optional URL, as in Nuke
                processors: [ImageProcessors.Resize(size: CGSize(width: 128, height: 128))],
                priority: .high)
            let response = try await pipeline.image(for: request)
            let avatar = response.image                                // a Bitmap, not a UIImage

            // Aspect fill into 128×128 without crop: the short side is 128.
            #expect(avatar.height == 128 && avatar.width == 171)
            #expect(request.priority == .high)
            #expect(server.statistics.totalRequests == 1)
        }

        /// A token store the sample takes for granted.
        actor Tokens {
            func fresh(for user: String) throws -> String { "token-for-\(user)" }
        }

        /// The request-hook sample: the scope's token reaches the server.
        @Test func theRequestHookSampleAddsTheUsersToken() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/avatar.jpg", data: try DocFixtures.jpeg(width: 40, height: 30), contentType: "image/jpeg")
            let avatarURL = server.url(for: "/avatar.jpg")
            let tokens = Tokens()
            let userID = "u1"

            var configuration = ImagePipeline.Configuration()
            configuration.willLoadData = { request, context in
                var request = request
                if let user = context.credentialScope {
                    request.setValue("Bearer \(try await tokens.fresh(for: user))", forHTTPHeaderField: "Authorization")
                }
                return request
            }
            var request = ImageRequest(url: avatarURL)
            request.credentialScope = userID

            _ = try await ImagePipeline(configuration: configuration).image(for: request)
            #expect(server.recordedRequests(for: "/avatar.jpg").map { $0.header("authorization") } == ["Bearer token-for-u1"])
        }
    }
}
