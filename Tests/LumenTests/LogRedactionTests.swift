import Foundation
import Testing
@testable import Lumen
import LumenTestSupport

/// Secrets in URLs never reach a log line (found by a stranger's run of `lumen serve`: the
/// pipeline's "fetch failed for GET http://user:password@…" lines).
@Suite(.timeLimit(.minutes(1)))
struct LogRedactionTests {
    @Test(arguments: [
        ("fetch failed for GET http://user:s3cret@127.0.0.1:8/a.jpg: 404", "fetch failed for GET http://127.0.0.1:8/a.jpg: 404"),
        ("GET https://h.example/p.jpg?token=abc&x=1 size=original", "GET https://h.example/p.jpg?… size=original"),
        ("x http://[::1]:80/a?b#c y", "x http://[::1]:80/a?… y"),
        ("two: http://a:b@x/1 and ftp://c@y/2?q", "two: http://x/1 and ftp://y/2?…"),
        ("no url here: a:b@c", "no url here: a:b@c"),
        ("data(id: lumen:missing-url)", "data(id: lumen:missing-url)"),
    ])
    func urlsLoseTheirUserPartAndQuery(input: String, expected: String) {
        #expect(LogRedaction.scrub(input) == expected)
    }

    /// Through the pipeline: a failing load of a URL with a password and a token logs one
    /// line, for the stage where it failed, with neither.
    @Test func aFailedLoadIsLoggedOnceWithoutItsSecrets() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let lines = LogLines()
        let pipeline = ImagePipeline {
            $0.logger = { lines.append($0) }
            $0.imageCache = nil
        }
        let port = server.baseURL.port!
        let url = URL(string: "http://alice:pa55word@127.0.0.1:\(port)/missing.jpg?token=t0k3n")!
        _ = await errorThrown { try await pipeline.image(for: ImageRequest(url: url, thumbnail: .maxPixelSize(10))) }
        let logged = lines.all
        #expect(logged.count == 1, "\(logged)")
        #expect(logged.allSatisfy { $0.hasPrefix("fetch failed") && $0.contains("127.0.0.1") })
        #expect(!logged.joined().contains("pa55word") && !logged.joined().contains("t0k3n") && !logged.joined().contains("alice"))
    }
}
