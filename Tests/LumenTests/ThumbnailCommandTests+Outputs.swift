import Foundation
import Lumen
import LumenTestSupport
import Testing

// Nested in `ThumbnailCommandTests`, so `swift test --filter ThumbnailCommandTests` runs it.
extension ThumbnailCommandTests {
    /// Where `lumen thumbnail` writes, and how it reports what it could not write or read.
    @Suite(.timeLimit(.minutes(1)))
    struct Outputs {
        func hopper() throws -> Data {
            try Data(contentsOf: ThumbnailCommandTests.corpus.appendingPathComponent("real-world/hopper.jpg"))
        }

        /// A URL's last path component is percent-decoded: `..%2F..%2Fx.jpg` must not name a
        /// file two directories up. A name is also at most 200 bytes, and `/` names `image`.
        @Test func everyOutputStaysInTheOutputDirectory() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let long = String(repeating: "%C3%A9", count: 150)  // é, 2 bytes each
            let paths = ["/..%2F..%2Fescaped.jpg", "/sub%2Fname.jpg", "/%2E%2E%2F%2E%2E%2Fdots.jpg", "/\(long).jpg", "/"]
            for path in paths { server.serve(path: path, data: try hopper(), contentType: "image/jpeg") }
            let root = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let output = root.appendingPathComponent("a/b")
            let run = try await Executables.run(
                "lumen", ["thumbnail"] + paths.map { server.url(for: $0).absoluteString } + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(run.status == 0, "\(run.standardError)")
            let written = try FileManager.default.contentsOfDirectory(atPath: output.path).sorted()
            let cut = String(repeating: "é", count: 100) + ".jpeg"
            #expect(written == [".._.._dots.jpeg", ".._.._escaped.jpeg", "image.jpeg", "sub_name.jpeg", cut].sorted(), "\(written)")
            // Nothing anywhere else under the root: only a/ and a/b/.
            let everything = FileManager.default.enumerator(atPath: root.path)?.allObjects as? [String] ?? []
            #expect(Set(everything) == Set(["a", "a/b"] + written.map { "a/b/\($0)" }), "\(everything)")
        }

        @Test func aThumbnailThatCannotBeWrittenFailsWithItsReason() async throws {
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            // A directory where the output file should go.
            try FileManager.default.createDirectory(at: output.appendingPathComponent("hopper.jpeg"), withIntermediateDirectories: true)
            let input = ThumbnailCommandTests.corpus.appendingPathComponent("real-world/hopper.jpg").path
            let run = try await Executables.run("lumen", ["thumbnail", input, "--size", "32", "--output", output.path])
            #expect(run.status == 1)
            #expect(run.standardError.contains("writeFailed(\(output.path)/hopper.jpeg: Is a directory)"), "\(run.standardError)")
            #expect(!run.standardError.contains("Error Domain="), "\(run.standardError)")
        }

        @Test func anOutputDirectoryThatCannotBeMadeSaysWhy() async throws {
            let root = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let file = root.appendingPathComponent("file")
            try Data("x".utf8).write(to: file)
            let run = try await Executables.run("lumen", ["thumbnail", "x.jpg", "--size", "32", "--output", file.path, "--no-cache"])
            #expect(run.status == 1)
            #expect(run.standardError.contains("cannot create the output directory \(file.path): Not a directory"), "\(run.standardError)")
        }

        /// A cache directory that cannot be made is not fatal (the run goes on without the
        /// cache), and its line gives the real reason.
        @Test func aCacheDirectoryThatIsAFileSaysWhyAndTheRunGoesOn() async throws {
            let root = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let file = root.appendingPathComponent("file")
            try Data("x".utf8).write(to: file)
            let input = ThumbnailCommandTests.corpus.appendingPathComponent("real-world/hopper.jpg").path
            let run = try await Executables.run(
                "lumen", ["thumbnail", input, "--size", "32", "--output", root.appendingPathComponent("out").path, "--cache", file.path])
            #expect(run.status == 0, "\(run.standardError)")
            #expect(run.standardError.contains("File exists"), "\(run.standardError)")
            #expect(!run.standardError.contains("Input/output error"), "\(run.standardError)")
        }

        @Test func anEmptyInputFailsAloneAndLongInputsAreShortenedInLines() async throws {
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let long = "data:image/png;base64," + String(repeating: "A", count: 4000)
            let run = try await Executables.run("lumen", ["thumbnail", "", long, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(run.status == 1)
            let lines = run.standardError.split(separator: "\n")
            #expect(lines.count == 2, "\(run.standardError)")
            #expect(lines.contains { $0.hasPrefix("\"\": ") && $0.contains("empty input") }, "\(run.standardError)")
            #expect(lines.contains { $0.hasPrefix("data:image/png;base64,AAA") && $0.contains("(4022 characters)") }, "\(run.standardError)")
            #expect(!run.standardError.contains(String(repeating: "A", count: 100)))
        }

        @Test func dashHPrintsTheUsage() async throws {
            for arguments in [["thumbnail", "-h"], ["bench", "--help"], ["bench", "-h"]] {
                let run = try await Executables.run("lumen", arguments)
                #expect(run.status == 0, "\(arguments): \(run.standardError)")
                #expect(run.standardOutput.contains("usage"), "\(arguments): \(run.standardOutput)")
            }
        }
    }
}
