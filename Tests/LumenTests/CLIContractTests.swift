import Foundation
import Lumen
import LumenTestSupport
import Testing

/// The `lumen` tool checked against its contract — issue 5 (`lumen thumbnail`, grown up;
/// `lumen bench`; `lumen demo`), the README's "The `lumen` tool" section and the tool's own
/// usage text — by running the built executable as a script would: its flags, exit codes,
/// output lines, summary line and `--json` keys. Written from that text, not from the code.
///
/// The nested suites in `CLIContractTests+*.swift` extend this one, so
/// `swift test --filter CLIContractTests` runs them all.
@Suite(.timeLimit(.minutes(1)))
struct CLIContractTests {
    /// The shared corpus, checked out beside the package (`../shared/corpus`).
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("shared/corpus")

    /// The bytes of `real-world/<name>` in the corpus.
    static func corpusData(_ name: String) throws -> Data {
        try Data(contentsOf: corpus.appendingPathComponent("real-world/\(name)"))
    }

    /// A new empty directory under the temporary directory; the caller removes it.
    static func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-cli-contract-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    /// The counts of `lumen thumbnail`'s summary line.
    struct Summary: Equatable, CustomStringConvertible {
        var done: Int
        var failed: Int
        var networkRequests: Int
        var cacheHits: Int

        var description: String { "\(done) done, \(failed) failed, \(networkRequests) network, \(cacheHits) hits" }
    }

    /// The summary line, which must be the last line of standard output and name, in order,
    /// what was done, what failed, the network requests, the cache hits and the time.
    static func summary(_ output: String) throws -> Summary {
        let last = try #require(output.split(separator: "\n").last.map(String.init), "no output at all")
        let pattern = #/^thumbnail: (\d+) done, (\d+) failed, (\d+) network requests, (\d+) cache hits, (\d+(?:\.\d+)?) s$/#
        let match = try #require(try pattern.wholeMatch(in: last), "the last line is not the summary: \(last.debugDescription)")
        return Summary(done: Int(match.1)!, failed: Int(match.2)!, networkRequests: Int(match.3)!, cacheHits: Int(match.4)!)
    }

    /// Runs `lumen` with `arguments` in `directory` (the test's own when nil), with
    /// `environment` added to this process's, standard input empty and both outputs read back
    /// from files (never pipes a child could fill).
    /// `standardError`, when given, receives standard error instead (the outcome's is then
    /// empty).
    static func run(
        _ arguments: [String], environment: [String: String] = [:], directory: URL? = nil, standardError: FileHandle? = nil
    ) async throws -> Executables.Outcome {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let outURL = dir.appendingPathComponent("stdout"), errURL = dir.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
        let process = Process()
        process.executableURL = try Executables.url("lumen")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        if let directory { process.currentDirectoryURL = directory }
        process.standardOutput = out
        process.standardError = standardError ?? err
        process.standardInput = FileHandle.nullDevice
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
        }
        try out.close()
        try err.close()
        return Executables.Outcome(
            status: status,
            standardOutput: String(decoding: try Data(contentsOf: outURL), as: UTF8.self),
            standardError: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }

    /// The stderr lines that start with `input: ` (how a failed input is reported).
    static func failureLines(for input: String, in standardError: String) -> [Substring] {
        standardError.split(separator: "\n").filter { $0.hasPrefix(input + ": ") }
    }

    // MARK: Usage and exit code 2

    /// Every flag the README and the usage text document is named by `lumen thumbnail -h`,
    /// which prints to standard output and exits 0.
    @Test(arguments: ["-h", "--help"])
    func thumbnailHelpNamesEveryDocumentedFlag(flag: String) async throws {
        let outcome = try await Self.run(["thumbnail", flag])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        for option in ["--size", "--fill", "--output", "--format", "png", "jpeg", "webp", "--quality", "--concurrency", "--cache", "--no-cache"] {
            #expect(outcome.standardOutput.contains(option), "\(option) missing from \(outcome.standardOutput)")
        }
    }

    /// `lumen -h` lists the three commands; `lumen` alone or an unknown command is a usage error.
    @Test func theToolsUsageListsItsCommandsAndRefusesUnknownOnes() async throws {
        for flag in ["-h", "--help", "help"] {
            let outcome = try await Self.run([flag])
            #expect(outcome.status == 0, "\(flag): \(outcome.standardError)")
            for command in ["demo", "thumbnail", "bench"] {
                #expect(outcome.standardOutput.contains("  \(command) "), "\(flag): \(command) missing")
            }
        }
        for arguments in [[], ["thumbnails"], ["--bogus"]] {
            let outcome = try await Self.run(arguments)
            #expect(outcome.status == 2, "\(arguments)")
            #expect(outcome.standardError.contains("usage"), "\(arguments): \(outcome.standardError)")
            #expect(outcome.standardOutput.isEmpty, "\(arguments): \(outcome.standardOutput)")
        }
    }

    /// `lumen bench -h` names the five scenarios and `--json`.
    @Test func benchHelpNamesItsScenarios() async throws {
        let outcome = try await Self.run(["bench", "-h"])
        #expect(outcome.status == 0)
        for word in ["decode", "coalesce", "overhead", "cache", "feed", "--json"] {
            #expect(outcome.standardOutput.contains(word), "\(word) missing from \(outcome.standardOutput)")
        }
    }

    /// `-h` prints the usage (the tool's own `lumen -h` lists `demo`'s options): for `demo`
    /// too, as for `thumbnail` and `bench`, with exit status 0.
    @Test func demoHelpPrintsTheUsage() async throws {
        let outcome = try await Self.run(["demo", "-h"])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(outcome.standardOutput.contains("usage: lumen demo"), "\(outcome.standardOutput)")
    }

    /// A malformed value of any documented flag, or a missing one, is a usage error (exit 2,
    /// the usage on standard error) and makes no thumbnail.
    @Test(arguments: [
        ["--concurrency", "0"], ["--concurrency", "-1"], ["--concurrency", "abc"], ["--concurrency", "1.5"], ["--concurrency", ""],
        ["--concurrency"],
        ["--size", "abc"], ["--size", "-5"], ["--size", ""],
        ["--quality", "abc"], ["--quality"],
        ["--format", "tiff"], ["--format"],
        ["--cache"],
        ["--cache", "DIR", "--no-cache"], ["--no-cache", "--cache", "DIR"],  // [--cache DIR | --no-cache]
    ])
    func malformedFlagsAreUsageErrors(flags: [String]) async throws {
        let root = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: root) }
        let output = root.appendingPathComponent("out")
        let input = Self.corpus.appendingPathComponent("real-world/hopper.jpg").path
        let flags = flags.map { $0 == "DIR" ? root.appendingPathComponent("cache").path : $0 }
        let outcome = try await Self.run(["thumbnail", input, "--size", "32", "--output", output.path] + flags)
        #expect(outcome.status == 2, "\(flags): \(outcome.standardOutput) \(outcome.standardError)")
        #expect(outcome.standardError.contains("usage: lumen thumbnail"), "\(flags): \(outcome.standardError)")
        let written = (try? FileManager.default.contentsOfDirectory(atPath: output.path)) ?? []
        #expect(written.isEmpty, "\(flags): \(written)")
    }

    /// Edge values that are valid: one at a time, and more workers than inputs.
    @Test(arguments: ["1", "64"])
    func validConcurrencyValuesWork(value: String) async throws {
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let inputs = ["hopper.jpg", "flower.webp", "transparent.png"].map { Self.corpus.appendingPathComponent("real-world/\($0)").path }
        let outcome = try await Self.run(["thumbnail"] + inputs + ["--size", "40", "--output", output.path, "--no-cache", "--concurrency", value])
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(try Self.summary(outcome.standardOutput) == Summary(done: 3, failed: 0, networkRequests: 0, cacheHits: 0))
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: output.path)) == ["hopper.jpeg", "flower.jpeg", "transparent.jpeg"])
    }

    // MARK: Exit code 1 for the output directory

    /// An output directory that cannot be made exits 1 with a line that says why (the
    /// system's reason: here ENOTDIR, "Not a directory"), never a Foundation error code.
    @Test(arguments: ["file", "file/below", "file/below/deeper"])
    func anOutputDirectoryThatCannotBeMadeSaysWhy(path: String) async throws {
        let root = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: root) }
        try Data("x".utf8).write(to: root.appendingPathComponent("file"))
        let output = root.appendingPathComponent(path).path
        let input = Self.corpus.appendingPathComponent("real-world/hopper.jpg").path
        let outcome = try await Self.run(["thumbnail", input, "--size", "32", "--output", output, "--no-cache"])
        #expect(outcome.status == 1, "\(outcome.standardError)")
        #expect(outcome.standardError.contains("cannot create the output directory \(output)"), "\(outcome.standardError)")
        #expect(outcome.standardError.contains("Not a directory"), "\(outcome.standardError)")
        #expect(!outcome.standardError.contains("ErrorDomain"), "\(outcome.standardError)")
    }

    /// An output directory that exists but takes no files fails every input, one typed line
    /// each (a repeated input once), exit 1.
    @Test func anOutputDirectoryThatTakesNoFilesFailsEveryInput() async throws {
        let inputs = ["hopper.jpg", "flower.webp"].map { Self.corpus.appendingPathComponent("real-world/\($0)").path }
        let outcome = try await Self.run(["thumbnail"] + inputs + [inputs[0], "--size", "32", "--output", "/proc/self", "--no-cache"])
        #expect(outcome.status == 1)
        #expect(try Self.summary(outcome.standardOutput) == Summary(done: 0, failed: 3, networkRequests: 0, cacheHits: 0))
        for input in inputs {
            let lines = Self.failureLines(for: input, in: outcome.standardError)
            #expect(lines.count == 1 && lines[0].contains("writeFailed"), "\(input): \(outcome.standardError)")
        }
    }

    // MARK: Formats, sizes, quality

    /// Each `--format` writes that format under its own extension, at most `--size` on the
    /// longest side (exactly N×N with `--fill`); without `--format` a thumbnail is a JPEG
    /// (`a.jpg` → `a.jpeg`).
    @Test(arguments: [(["--format", "png"], "png", ImageFormat.png), (["--format", "jpeg"], "jpeg", .jpeg),
                      (["--format", "webp"], "webp", .webp), ([], "jpeg", .jpeg)])
    func eachFormatHasItsExtensionAndSize(flags: [String], fileExtension: String, format: ImageFormat) async throws {
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let input = Self.corpus.appendingPathComponent("real-world/flower.jpg").path
        let fit = try await Self.run(["thumbnail", input, "--size", "90", "--output", output.appendingPathComponent("fit").path, "--no-cache"] + flags)
        #expect(fit.status == 0, "\(fit.standardError)")
        let fitted = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("fit/flower.\(fileExtension)")))
        #expect(fitted.format == format && max(fitted.width, fitted.height) == 90 && fitted.width != fitted.height, "\(fitted)")
        let fill = try await Self.run(["thumbnail", input, "--size", "90", "--fill", "--output", output.appendingPathComponent("fill").path, "--no-cache"] + flags)
        #expect(fill.status == 0, "\(fill.standardError)")
        let filled = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("fill/flower.\(fileExtension)")))
        #expect(filled.format == format && filled.width == 90 && filled.height == 90, "\(filled)")
    }

    /// `--quality` reaches the lossy encoders: a lower quality makes a smaller file.
    @Test(arguments: ["jpeg", "webp"])
    func qualityChangesTheLossyEncoding(format: String) async throws {
        let output = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let input = Self.corpus.appendingPathComponent("real-world/flower.jpg").path
        var sizes: [Int] = []
        for quality in ["5", "95"] {
            let dir = output.appendingPathComponent(quality)
            let outcome = try await Self.run(["thumbnail", input, "--size", "200", "--format", format, "--quality", quality, "--output", dir.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            sizes.append(try Data(contentsOf: dir.appendingPathComponent("flower.\(format)")).count)
        }
        #expect(sizes[0] < sizes[1], "quality 5: \(sizes[0]) bytes, quality 95: \(sizes[1]) bytes")
    }
}
