import Foundation
import Lumen
import LumenTestSupport
import Testing

/// `lumen thumbnail`, run as users run it: exit codes, one stderr line per failure, outputs
/// of the right size and upright, duplicate URLs fetched once.
@Suite(.timeLimit(.minutes(2)))
struct ThumbnailCommandTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("shared/corpus")

    static func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-thumb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    func info(_ url: URL) throws -> ImageInfo {
        try ImageDecoder.info(for: Data(contentsOf: url))
    }

    @Test(arguments: [
        [] as [String],
        ["x.jpg", "--output", "/tmp/x"],  // no --size
        ["x.jpg", "--size", "64"],  // no --output
        ["x.jpg", "--size", "0", "--output", "/tmp/x"],
        ["x.jpg", "--size", "64", "--output", "/tmp/x", "--format", "bmp"],
        ["x.jpg", "--size", "64", "--output", "/tmp/x", "--bogus"],
        ["--size", "64", "--output", "/tmp/x"],  // no inputs
    ])
    func usageErrorsExitWithTwo(arguments: [String]) async throws {
        let outcome = try await Executables.run("lumen", ["thumbnail"] + arguments)
        #expect(outcome.status == 2)
        #expect(outcome.standardError.contains("usage: lumen thumbnail"))
    }

    @Test func allInputsSucceedingExitsZeroWithUprightFitThumbnails() async throws {
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let inputs = (0...8).map { Self.corpus.appendingPathComponent("exif-orientation/Landscape_\($0).jpg").path }
        let outcome = try await Executables.run("lumen", ["thumbnail"] + inputs + ["--size", "100", "--output", output.path, "--format", "png"])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(outcome.standardError.isEmpty)
        let reference = try info(Self.corpus.appendingPathComponent("exif-orientation/Landscape_0.jpg"))
        for i in 0...8 {
            let thumb = try info(output.appendingPathComponent("Landscape_\(i).png"))
            #expect(thumb.format == .png)
            #expect(max(thumb.width, thumb.height) == 100)
            // Upright: every thumbnail has the landscape shape of the untagged original.
            #expect((thumb.width > thumb.height) == (reference.width > reference.height), "Landscape_\(i)")
        }
    }

    @Test func fillMakesExactSquaresAndFailuresExitOneWithOneLineEach() async throws {
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let good = ["hopper.jpg", "flower.webp", "transparent.png", "hopper.gif"].map { Self.corpus.appendingPathComponent("real-world/\($0)").path }
        let bad = ["broken.png", "truncated_image.png", "decompression_bomb.gif"].map { Self.corpus.appendingPathComponent("real-world/\($0)").path }
        let missing = output.appendingPathComponent("missing.jpg").path
        let outcome = try await Executables.run(
            "lumen", ["thumbnail"] + good + bad + [missing, "--size", "48", "--fill", "--output", output.path, "--format", "jpeg", "--concurrency", "2"])
        #expect(outcome.status == 1)
        let lines = outcome.standardError.split(separator: "\n")
        #expect(lines.count == bad.count + 1, "\(outcome.standardError)")
        for path in bad + [missing] {
            #expect(lines.filter { $0.hasPrefix(path + ": ") }.count == 1, "no single line for \(path)")
        }
        #expect(lines.contains { $0.hasPrefix(bad[2]) && $0.contains("tooLarge") })
        #expect(lines.contains { $0.hasPrefix(bad[1]) && $0.contains("truncated") })
        for name in ["hopper", "flower", "transparent"] {
            let thumb = try info(output.appendingPathComponent("\(name).jpeg"))
            #expect(thumb.width == 48 && thumb.height == 48, "\(name): \(thumb.width)x\(thumb.height)")
        }
        #expect(outcome.standardOutput.contains("4 done, 4 failed"))
    }

    @Test func duplicateURLsAreFetchedOnce() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let jpeg = try Data(contentsOf: Self.corpus.appendingPathComponent("real-world/hopper.jpg"))
        server.serve(path: "/a.jpg", data: jpeg, contentType: "image/jpeg")
        server.serve(path: "/b.jpg", data: jpeg, contentType: "image/jpeg")
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let a = server.url(for: "/a.jpg").absoluteString, b = server.url(for: "/b.jpg").absoluteString
        let outcome = try await Executables.run("lumen", ["thumbnail", a, b, a, a, "--size", "32", "--output", output.path, "--no-cache"])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(server.statistics.totalRequests == 2)
        #expect(outcome.standardOutput.contains("4 done, 0 failed"))
        #expect(FileManager.default.fileExists(atPath: output.appendingPathComponent("a.jpeg").path))
        #expect(FileManager.default.fileExists(atPath: output.appendingPathComponent("b.jpeg").path))
    }

    @Test func aSecondRunIsServedFromTheDiskCacheWithoutTheNetwork() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let jpeg = try Data(contentsOf: Self.corpus.appendingPathComponent("real-world/flower.jpg"))
        server.serve(path: "/flower.jpg", data: jpeg, contentType: "image/jpeg", cacheControl: "max-age=3600")
        let output = try Self.temporaryDirectory(), cache = try Self.temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(at: output)
            try? FileManager.default.removeItem(at: cache)
        }
        let arguments = ["thumbnail", server.url(for: "/flower.jpg").absoluteString, "--size", "64", "--output", output.path, "--cache", cache.path]
        let first = try await Executables.run("lumen", arguments)
        #expect(first.status == 0, "\(first.standardError)")
        #expect(first.standardOutput.contains("1 network requests, 0 cache hits"), "\(first.standardOutput)")
        let second = try await Executables.run("lumen", arguments)
        #expect(second.status == 0, "\(second.standardError)")
        #expect(second.standardOutput.contains("0 network requests, 1 cache hits"), "\(second.standardOutput)")
        #expect(server.statistics.totalRequests == 1)
    }

    @Test func localFilesAreNotNetworkRequests() async throws {
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let input = Self.corpus.appendingPathComponent("real-world/hopper.jpg").path
        let outcome = try await Executables.run("lumen", ["thumbnail", input, "--size", "64", "--output", output.path, "--no-cache"])
        #expect(outcome.status == 0)
        #expect(outcome.standardOutput.contains("1 done, 0 failed, 0 network requests"), "\(outcome.standardOutput)")
    }
}
