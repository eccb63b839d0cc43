import Foundation
import Testing
@testable import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite(.timeLimit(.minutes(1)))
struct PipelineRequestTests {
    @Test func requestsAreValuesDespiteTheirSharedStorage() {
        let original = ImageRequest(url: PipelineURLs.a, processors: [MockImageProcessor("a")], priority: .low)
        var copy = original
        copy.priority = .high
        copy.processors.append(MockImageProcessor("b"))
        copy.thumbnail = .maxPixelSize(10)
        copy.options.insert(.disableDiskCacheReads)
        copy.userInfo["k"] = 1
        copy.imageID = "custom"
        #expect(original.priority == .low)
        #expect(original.processors.count == 1)
        #expect(original.thumbnail == nil)
        #expect(original.options.isEmpty)
        #expect(original.userInfo.isEmpty)
        #expect(original.imageID == PipelineURLs.a.absoluteString)
        #expect(copy.imageID == "custom")
        #expect(copy.processors.map(\.identifier) == ["mock.a", "mock.b"])
    }

    @Test func credentialHeadersChangeTheFetchKeyOfACopyOnly() {
        var urlRequest = URLRequest(url: PipelineURLs.a)
        urlRequest.setValue("secret", forHTTPHeaderField: "X-Token")
        let plain = ImageRequest(urlRequest: urlRequest)
        var marked = plain
        marked.credentialHeaders = ["X-TOKEN"]
        #expect(FetchKey(plain) != FetchKey(marked))
        #expect(FetchKey(plain) == FetchKey(ImageRequest(url: PipelineURLs.a)))
        #expect(FetchKey(marked).credentialFingerprint == ImageCacheKey.credentialFingerprint(for: ["x-token": "secret"], markedHeaders: ["x-token"]))
        #expect(FetchKey(marked).credentialFingerprint != nil)
    }

    @Test func closureRequestsAreIdentifiedByTheirID() {
        let a = ImageRequest(id: "one", data: { Data([1]) })
        let b = ImageRequest(id: "one", data: { Data([2]) })
        let c = ImageRequest(id: "two", data: { Data([1]) })
        #expect(FetchKey(a) == FetchKey(b))
        #expect(FetchKey(a) != FetchKey(c))
        #expect(a.url == nil && a.imageID == "one")
        // A closure id never collides with a URL spelled the same.
        #expect(FetchKey(ImageRequest(id: "https://example.com/a.jpg", data: { Data() })) != FetchKey(ImageRequest(url: PipelineURLs.a)))
    }
}

@Suite(.timeLimit(.minutes(1)))
struct PipelineConfigurationTests {
    @Test func defaultsMatchTheDocumentation() {
        let configuration = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        let cores = max(1, ProcessInfo.processInfo.activeProcessorCount)
        #expect(configuration.isTaskCoalescingEnabled)
        #expect(configuration.dataLoadingQueue.maxConcurrentCount == 6)
        #expect(configuration.decodingQueue.maxConcurrentCount == cores)
        #expect(configuration.processingQueue.maxConcurrentCount == cores)
        #expect(configuration.encodingQueue.maxConcurrentCount == 1)
        #expect(configuration.decodingQueue.execution == .threads)
        #expect(configuration.dataLoadingQueue.execution == .tasks)
        #expect(configuration.maximumDecodedPixelCount == 100_000_000)
        #expect(configuration.retryPolicy.maximumAttempts == 1)
        #expect(configuration.eventHandler == nil && configuration.logger == nil)
        #expect(configuration.decoder is ImageDecoders.Default)
    }

    @Test func separateConfigurationsGetSeparateQueues() {
        let a = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        let b = ImagePipeline.Configuration(dataLoader: MockDataLoader())
        #expect(a.dataLoadingQueue !== b.dataLoadingQueue)
    }
}
