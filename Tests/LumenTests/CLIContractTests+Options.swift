import Foundation
import Lumen
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// The option rules every command shares (issue 23, "The CLI"): short forms, unknown
    /// short options, `--`, repeated options, `--format jpg`, `--quality` with PNG, a
    /// `--cache DIR` that is someone else's directory, and the help texts.
    @Suite(.timeLimit(.minutes(1)))
    struct Options {
        static let input = CLIContractTests.corpus.appendingPathComponent("real-world/hopper.jpg").path

        /// The files in `directory`, sorted; empty when it does not exist.
        static func names(in directory: URL) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
        }

        /// An unknown short option, before or after the inputs, is a usage error: exit 2, the
        /// usage on stderr, nothing written, and never an input (no `-q: …` failure line).
        @Test(arguments: [["-x"], ["-Q", "50"], ["-z"], ["-S", "32"], ["-F"], ["-n", "3"]])
        func unknownShortOptionsAreUsageErrors(flags: [String]) async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let output = root.appendingPathComponent("out")
            for arguments in [[Self.input] + flags + ["--size", "32"], flags + [Self.input, "--size", "32"]] {
                let outcome = try await CLIContractTests.run(["thumbnail"] + arguments + ["--output", output.path, "--no-cache"])
                #expect(outcome.status == 2, "\(arguments): \(outcome.standardOutput) \(outcome.standardError)")
                #expect(outcome.standardError.contains("unknown option -\(flags[0].dropFirst().first!)"), "\(arguments): \(outcome.standardError)")
                #expect(outcome.standardError.contains("usage: lumen thumbnail"), "\(arguments)")
                #expect(CLIContractTests.failureLines(for: flags[0], in: outcome.standardError).isEmpty, "\(outcome.standardError)")
                #expect(Self.names(in: output).isEmpty)
            }
        }

        /// `-s`, `-o`, `-f`, `-q`, `-j` are `--size`, `--output`, `--format`, `--quality`,
        /// `--concurrency`, with the value as the next argument or attached (`-s32`).
        @Test func shortFormsAreTheLongOptions() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail", Self.input, "-s", "40", "-o", output.path, "-f", "webp", "-q", "50", "-j", "2", "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let info = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("hopper.webp")))
            #expect(info.format == .webp && max(info.width, info.height) == 40)

            let attached = root.appendingPathComponent("attached")
            let again = try await CLIContractTests.run(["thumbnail", Self.input, "-s24", "-o\(attached.path)", "-fpng", "--no-cache"])
            #expect(again.status == 0, "\(again.standardError)")
            let small = try ImageDecoder.info(for: Data(contentsOf: attached.appendingPathComponent("hopper.png")))
            #expect(small.format == .png && max(small.width, small.height) == 24)
        }

        /// A file literally named `-x` is an input after `--` (and `-x` before it is not).
        @Test func aFileNamedLikeAnOptionGoesAfterTheSeparator() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let named = root.appendingPathComponent("-x")
            try FileManager.default.copyItem(atPath: Self.input, toPath: named.path)
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(
                ["thumbnail", "-s", "32", "-o", output.path, "--no-cache", "--", "-x"], directory: root)
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(Self.names(in: output) == ["-x.jpeg"])
        }

        /// `--format jpg` is `jpeg`, in any case, and the thumbnail is named `.jpeg`.
        @Test(arguments: ["jpg", "JPG", "Jpeg", "JPEG"])
        func jpgIsJPEGInAnyCase(format: String) async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail", Self.input, "--size", "32", "--output", output.path, "--format", format, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(Self.names(in: output) == ["hopper.jpeg"])
            #expect(try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("hopper.jpeg"))).format == .jpeg)
        }

        /// An option given twice — long, short, or one of each, flags too — is a usage error,
        /// and so is `--quality` with PNG (lossless: a quality would mean nothing).
        @Test(arguments: [
            ["--size", "64"], ["-s", "64"], ["--output", "OUT2"], ["-o", "OUT2"], ["--format", "png"],
            ["--quality", "80", "--quality", "90"], ["-q", "80", "--quality", "90"], ["--fill", "--fill"],
            ["--no-cache"], ["-j", "2", "--concurrency", "3"], ["--timeout", "5", "--timeout", "6"],
            ["--format", "png", "--quality", "90"], ["-f", "PNG", "-q", "90"],
        ])
        func repeatedOptionsAndQualityWithPNGAreUsageErrors(flags: [String]) async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let output = root.appendingPathComponent("out")
            let flags = flags.map { $0 == "OUT2" ? root.appendingPathComponent("out2").path : $0 }
            // --size, --output and --no-cache are given once already: the flags above repeat them.
            var arguments = ["thumbnail", Self.input, "--size", "32", "--output", output.path, "--no-cache"] + flags
            if flags.first == "--format" && flags.count == 2 { arguments += ["--format", "jpeg"] }
            let outcome = try await CLIContractTests.run(arguments)
            #expect(outcome.status == 2, "\(flags): \(outcome.standardOutput) \(outcome.standardError)")
            #expect(outcome.standardError.contains("given twice") || outcome.standardError.contains("--quality"), "\(flags): \(outcome.standardError)")
            #expect(Self.names(in: output).isEmpty && Self.names(in: root.appendingPathComponent("out2")).isEmpty)
        }

        /// The other commands refuse unknown short options and repeated options too.
        @Test(arguments: [
            ["demo", "-x"], ["demo", "--seed", "1", "--seed", "2"], ["demo", "-o", "a", "--output", "b"],
            ["bench", "coalesce", "-x"], ["bench", "coalesce", "--count", "4", "--count", "5"],
            ["sign", "--key", "00", "--salt", "00", "-x", "_", "http://a.example/x.jpg"],
            ["sign", "--key", "00", "--key", "01", "--salt", "00", "_", "http://a.example/x.jpg"],
            ["serve", "-x"], ["serve", "--max-queue", "1", "--max-queue", "2"],
        ])
        func otherCommandsRefuseUnknownAndRepeatedOptions(arguments: [String]) async throws {
            let outcome = try await CLIContractTests.run(arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome.standardOutput) \(outcome.standardError)")
            #expect(outcome.standardError.contains("unknown option") || outcome.standardError.contains("given twice")
                    || outcome.standardError.contains("unexpected argument"), "\(arguments): \(outcome.standardError)")
        }

        /// `--cache DIR` on a directory that holds a user's files (one named like an entry,
        /// 64 hex characters, another like the cache's temporary files) touches none of them:
        /// the run goes on without a disk cache and says why. A new directory is created and
        /// marked as lumen's own, and used again by the next run.
        @Test func aCacheDirectoryWithAUsersFilesKeepsThem() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let cache = root.appendingPathComponent("mine")
            try FileManager.default.createDirectory(at: cache, withIntermediateDirectories: true)
            let hexName = String(repeating: "ab", count: 32)
            try Data("my notes".utf8).write(to: cache.appendingPathComponent(hexName))
            try Data("an old file".utf8).write(to: cache.appendingPathComponent(DataCache.filename(for: "http://example.com/a.jpg")))
            let before = Self.names(in: cache)
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail", Self.input, "--size", "32", "--output", output.path, "--cache", cache.path])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(outcome.standardError.contains("not a lumen cache"), "\(outcome.standardError)")
            #expect(Self.names(in: cache) == before)
            #expect(try Data(contentsOf: cache.appendingPathComponent(hexName)) == Data("my notes".utf8))
            #expect(Self.names(in: output) == ["hopper.jpeg"])

            let fresh = root.appendingPathComponent("new/cache")
            for _ in 0..<2 {
                let run = try await CLIContractTests.run(["thumbnail", Self.input, "--size", "32", "--output", output.path, "--cache", fresh.path])
                #expect(run.status == 0, "\(run.standardError)")
                #expect(!run.standardError.contains("cache"), "\(run.standardError)")
            }
            #expect(Self.names(in: fresh) == [".lumen-cache"])
            // The directory it made and its marker are the owner's only (entries hold URLs).
            let mode = { (url: URL) in ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.posixPermissions] as? Int) ?? -1 }
            #expect(mode(fresh) == 0o700, "\(String(mode(fresh), radix: 8))")
            #expect(mode(fresh.appendingPathComponent(".lumen-cache")) == 0o600)
        }

        /// `lumen demo --quick` never prints a goal as MISSED and then "every claim checked
        /// out": the goals a quick trace cannot measure (times, memory, decoded pixels) read
        /// "not checked (quick run)", and the last line says so.
        @Test func aQuickDemoSaysWhichGoalsItDidNotCheck() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let outcome = try await CLIContractTests.run(["demo", "--quick", "--rounds", "1", "-o", root.path])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let lines = outcome.standardOutput.split(separator: "\n")
            #expect(!lines.contains { $0.contains("MISSED") }, "\(outcome.standardOutput)")
            for goal in ["naive / lumen wall time", "naive / lumen decoded MP", "naive / lumen peak memory", "noCoalescing / lumen wall time"] {
                let line = lines.first { $0.hasPrefix(goal) } ?? ""
                #expect(line.contains("not checked (quick run)"), "\(goal): \(line)")
            }
            let last = try #require(lines.last)
            #expect(last.contains("every claim checked out") && last.contains("not checked in a quick run"), "\(last)")
        }

        /// The help texts: `thumbnail` says that `--fill` enlarges, gives the idle-download
        /// limit and the short forms; `demo` and `bench` give a line for each scenario and
        /// option.
        @Test func helpTextsDescribeEveryScenarioAndOption() async throws {
            let thumbnail = try await CLIContractTests.run(["thumbnail", "--help"])
            #expect(thumbnail.status == 0)
            let fillLine = thumbnail.standardOutput.split(separator: "\n").drop { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("--fill") }.prefix(2).joined(separator: " ")
            #expect(fillLine.contains("enlarged"), "\(fillLine)")
            #expect(thumbnail.standardOutput.contains("no bytes for 60 seconds"), "\(thumbnail.standardOutput)")
            for short in ["-s, --size", "-o, --output", "-f, --format", "-q, --quality", "-j, --concurrency", "-h, --help"] {
                #expect(thumbnail.standardOutput.contains(short), "\(short)")
            }

            let demo = try await CLIContractTests.run(["demo", "--help"])
            #expect(demo.status == 0)
            for option in ["--quick", "--seed N", "--rounds N", "--json", "-o, --output DIR", "--fleet", "-h, --help",
                           "duplicate sharing", "bounded prefetch", "failure eviction and retry", "cancellation under sharing"] {
                #expect(demo.standardOutput.contains(option), "\(option) missing from \(demo.standardOutput)")
            }

            let bench = try await CLIContractTests.run(["bench", "--help"])
            #expect(bench.status == 0)
            let lines = bench.standardOutput.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            for scenario in ["decode", "coalesce", "overhead", "cache", "feed", "serve"] {
                #expect(lines.contains { $0.hasPrefix(scenario + " ") }, "no line for \(scenario) in \(bench.standardOutput)")
            }
            for option in ["--json", "--iterations N", "--count N", "--quick", "--seed N"] {
                #expect(lines.contains { $0.hasPrefix(option + " ") }, "no line for \(option) in \(bench.standardOutput)")
            }
        }
    }
}
