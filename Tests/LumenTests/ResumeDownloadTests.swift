import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import Lumen
import LumenTestSupport

/// Resumable downloads (issue 23): a transfer cut after some bytes, retried, asks for the rest
/// with `Range` + `If-Range` (the validator it saw); a `206` continues the body, a `200` starts
/// over, a `206` that does not continue the bytes is abandoned, and the bytes handed on are
/// exactly the server's — against servers that honour, ignore and misplace ranges.
@Suite(.timeLimit(.minutes(1)))
struct ResumeDownloadTests {
    /// 40 000 deterministic bytes that are not an image: `data(for:)` hands them on as they are.
    static let original = Data((0..<40_000).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) })
    static let path = "/big.bin"

    enum Loader: String, CaseIterable, CustomTestStringConvertible {
        case curl, urlSession
        var testDescription: String { rawValue }
        func make() -> any DataLoading {
            switch self {
            case .curl: CurlDataLoader()
            case .urlSession: DataLoader()
            }
        }
    }

    static func pipeline(
        _ loader: Loader = .curl, attempts: Int = 3, cache: URL? = nil,
        hook: (@Sendable (URLRequest, ImagePipeline.LoadContext) async throws -> URLRequest)? = nil
    ) -> ImagePipeline {
        ImagePipeline {
            $0.dataLoader = loader.make()
            $0.retryPolicy = .init(maximumAttempts: attempts)
            $0.dataCache = cache.map { DataCache(name: "resume", directory: $0) }
            $0.willLoadData = hook
        }
    }

    static func server(etag: String? = "\"v1\"", lastModified: String? = nil, range: LoopbackServer.RangeSupport) throws -> LoopbackServer {
        let server = try LoopbackServer()
        server.serve(path: path, data: original, etag: etag, lastModified: lastModified)
        server.setRangeSupport(range, for: path)
        return server
    }

    @Test(arguments: Loader.allCases)
    func aCutTransferContinuesWithTheRestFromAServerThatHonoursRanges(loader: Loader) async throws {
        let server = try Self.server(range: .honoured)
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let pipeline = Self.pipeline(loader)
        let (data, response) = try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == Self.original)
        #expect((response as? HTTPURLResponse)?.statusCode == 200) // the whole representation's
        let sent = server.recordedRequests(for: Self.path)
        #expect(sent.count == 2)
        #expect(sent.first?.header("range") == nil)
        #expect(sent.last?.header("range") == "bytes=15000-" && sent.last?.header("if-range") == "\"v1\"")
        #expect(server.statistics.bodyBytesSent == Self.original.count) // nothing sent twice
        #expect(pipeline.metrics.resumedDownloads == 1 && pipeline.metrics.resumedBytes == 15_000)
        #expect(pipeline.metrics.retries == 1 && pipeline.metrics.resumesAbandoned == 0)
    }

    @Test func aServerThatIgnoresRangesSendsTheWholeBodyAgain() async throws {
        let server = try Self.server(range: .ignored)
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let pipeline = Self.pipeline()
        let (data, _) = try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == Self.original)
        #expect(server.recordedRequests(for: Self.path).last?.header("range") == "bytes=15000-") // asked; answered 200
        #expect(pipeline.metrics.resumedDownloads == 0 && pipeline.metrics.resumesAbandoned == 0)
    }

    /// A `206` for bytes 15 007- when 15 000- was asked: appending it would lose 7 bytes. The
    /// answer is abandoned and the next attempt loads everything, without a range.
    @Test func aRangeAnsweredFromTheWrongPlaceIsAbandoned() async throws {
        let server = try Self.server(range: .misplaced(offset: 7))
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let pipeline = Self.pipeline()
        let (data, _) = try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == Self.original)
        let sent = server.recordedRequests(for: Self.path)
        #expect(sent.map { $0.header("range") } == [nil, "bytes=15000-", nil])
        #expect(pipeline.metrics.resumesAbandoned == 1 && pipeline.metrics.resumedDownloads == 0)
    }

    /// Without attempts left, an abandoned resume fails the load; it never hands on a mix.
    @Test func anAbandonedResumeWithoutAttemptsLeftFails() async throws {
        let server = try Self.server(range: .misplaced(offset: 7))
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let pipeline = Self.pipeline(attempts: 2)
        let error = try #require(await errorThrown { try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path))) } as? ImagePipeline.Error)
        #expect(error.code == .dataLoadingFailed && error.underlyingError is ResumeMismatch)
        #expect("\(error.underlyingError!)".contains("bytes 15007-39999/40000"))
    }

    /// The representation changed between the attempts: `If-Range` no longer matches, the
    /// server answers `200` with the new body, and that is what is handed on, whole.
    @Test func aChangedRepresentationStartsOver() async throws {
        let server = try Self.server(range: .honoured)
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let changed = Data(Self.original.reversed())
        let pipeline = Self.pipeline(hook: { request, context in
            if context.attempt == 2 {
                server.serve(path: Self.path, data: changed, etag: "\"v2\"")
                server.setRangeSupport(.honoured, for: Self.path)
            }
            return request
        })
        let (data, response) = try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == changed)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "ETag") == "\"v2\"")
        #expect(server.recordedRequests(for: Self.path).last?.header("if-range") == "\"v1\"")
        #expect(pipeline.metrics.resumedDownloads == 0)
    }

    /// `Last-Modified` serves as the validator when there is no strong ETag; cut twice, the
    /// download continues twice, each range from where the bytes stopped.
    @Test func aLastModifiedValidatorAndTwoCuts() async throws {
        let date = LoopbackServer.httpDate(Date(timeIntervalSince1970: 1_700_000_000))
        let server = try Self.server(etag: "W/\"weak\"", lastModified: date, range: .honoured)
        defer { server.stop() }
        server.truncate(path: Self.path, after: 12_000, times: 2)
        let pipeline = Self.pipeline(attempts: 3)
        let (data, _) = try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == Self.original)
        let sent = server.recordedRequests(for: Self.path)
        #expect(sent.map { $0.header("range") } == [nil, "bytes=12000-", "bytes=24000-"])
        #expect(sent.dropFirst().allSatisfy { $0.header("if-range") == date })
        #expect(pipeline.metrics.resumedDownloads == 1 && pipeline.metrics.resumedBytes == 24_000)
    }

    /// No validator, no range: the retry loads the whole body.
    @Test func withoutAValidatorTheRetryLoadsEverything() async throws {
        let server = try Self.server(etag: nil, range: .honoured)
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let pipeline = Self.pipeline()
        let (data, _) = try await pipeline.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == Self.original)
        #expect(server.recordedRequests(for: Self.path).map { $0.header("range") } == [nil, nil])
    }

    /// A resumed body is cached whole, under the first response's headers: a new pipeline on
    /// the same directory reads it from disk, byte for byte.
    @Test func aResumedBodyIsCachedWhole() async throws {
        let server = try Self.server(range: .honoured)
        defer { server.stop() }
        server.truncate(path: Self.path, after: 15_000, times: 1)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-resume-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = Self.pipeline(cache: directory)
        _ = try await first.data(for: ImageRequest(url: server.url(for: Self.path)))
        await (first.configuration.dataCache as? DataCache)?.flush()
        let second = Self.pipeline(cache: directory)
        server.resetStatistics()
        let (data, _) = try await second.data(for: ImageRequest(url: server.url(for: Self.path)))
        #expect(data == Self.original)
        #expect(server.statistics.totalRequests == 0)
    }

    @Test func onlyPlainTransfersWithAValidatorResume() throws {
        let url = URL(string: "https://example.com/a")!
        func response(_ headers: [String: String], status: Int = 200) -> HTTPURLResponse {
            HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!
        }
        let get = URLRequest(url: url)
        let bytes = Data(repeating: 1, count: 10)
        #expect(PartialBody(data: bytes, response: response(["ETag": "\"a\"", "Content-Length": "100"]), request: get)?.validator == "\"a\"")
        #expect(PartialBody(data: bytes, response: response(["ETag": "\"a\"", "Content-Encoding": "gzip"]), request: get) == nil)
        #expect(PartialBody(data: bytes, response: response(["ETag": "\"a\"", "Accept-Ranges": "none"]), request: get) == nil)
        #expect(PartialBody(data: bytes, response: response(["ETag": "W/\"a\""]), request: get) == nil)
        #expect(PartialBody(data: bytes, response: response(["ETag": "\"a\""], status: 206), request: get) == nil)
        #expect(PartialBody(data: Data(), response: response(["ETag": "\"a\""]), request: get) == nil)
        var post = get
        post.httpMethod = "POST"
        #expect(PartialBody(data: bytes, response: response(["ETag": "\"a\""]), request: post) == nil)

        let partial = try #require(PartialBody(data: bytes, response: response(["ETag": "\"a\"", "Content-Length": "100"]), request: get))
        #expect(partial.answer(to: response(["Content-Range": "bytes 10-99/100"], status: 206)) == .continues)
        #expect(partial.answer(to: response([:])) == .startsOver)
        #expect(partial.answer(to: response(["Content-Range": "bytes 11-99/100"], status: 206)) == .mismatched)
        #expect(partial.answer(to: response(["Content-Range": "bytes 10-98/100"], status: 206)) == .mismatched)
        #expect(partial.answer(to: response(["Content-Range": "bytes 10-99/101"], status: 206)) == .mismatched)
        #expect(partial.answer(to: response(["Content-Range": "bytes 10-99/*"], status: 206)) == .mismatched)
        #expect(partial.answer(to: response([:], status: 206)) == .mismatched)
        #expect(ContentRange("bytes 0-0/1") == ContentRange("bytes  0-0/1"))
        #expect(ContentRange("bytes 5-4/10") == nil && ContentRange("bytes 0-9/9") == nil && ContentRange("items 0-1/2") == nil)
    }
}
