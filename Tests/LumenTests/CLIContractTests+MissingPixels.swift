import Foundation
import Lumen
import LumenTestSupport
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen thumbnail` on well-formed JPEGs whose scan lacks pixels (issue 23): a failure,
    /// never a thumbnail with a grey lower half.
    @Suite(.timeLimit(.minutes(1)))
    struct MissingPixels {
        /// Half a baseline JPEG closed by `FF D9`, and a small JPEG whose frame header claims
        /// 9000×9000, as a file and over HTTP with a disk cache: exit status 1, a `truncated`
        /// line for each, no thumbnail written; a second run with the same cache fails too.
        @Test func aJPEGMissingPixelsExitsNonZeroAndWritesNoThumbnail() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let half = root.appendingPathComponent("half.jpg"), tall = root.appendingPathComponent("tall.jpg")
            try PipelineDecodingTests.halfBaselineClosed().write(to: half)
            try PipelineDecodingTests.claimsNineThousand().write(to: tall)
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/half.jpg", data: try Data(contentsOf: half), contentType: "image/jpeg")
            let inputs = [half.path, tall.path, server.url(for: "/half.jpg").absoluteString]
            let output = root.appendingPathComponent("out"), cache = root.appendingPathComponent("cache").path
            for run in 1...2 {
                let outcome = try await CLIContractTests.run(
                    ["thumbnail"] + inputs + ["--size", "64", "--output", output.path, "--cache", cache])
                #expect(outcome.status == 1, "run \(run): \(outcome.standardOutput)")
                for input in inputs {
                    let lines = CLIContractTests.failureLines(for: input, in: outcome.standardError)
                    #expect(lines.count == 1 && lines.first?.contains("truncated") == true, "run \(run), \(input): \(outcome.standardError)")
                }
                let written = (try? FileManager.default.contentsOfDirectory(atPath: output.path)) ?? []
                #expect(written.isEmpty, "run \(run): \(written)")
            }
        }
    }
}
