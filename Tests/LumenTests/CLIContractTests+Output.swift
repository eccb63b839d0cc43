import Foundation
import Lumen
import LumenTestSupport
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// What `lumen thumbnail` prints where: a progress bar only on a terminal, plain lines
    /// otherwise, the summary line last on standard output, failures on standard error.
    @Suite(.timeLimit(.minutes(1)))
    struct ThumbnailOutput {
        /// Where the child's standard output and error go.
        enum Wiring {
            /// Standard output on a terminal, standard error to a file.
            case outputOnTerminal
            /// Standard output to a file, standard error on a terminal.
            case errorOnTerminal
        }

        /// Runs `lumen` with one of its outputs on a pseudo-terminal (raw mode) and the other
        /// to a file; returns its status, what reached the terminal and what reached the file.
        func run(_ arguments: [String], wiring: Wiring) async throws -> (status: Int32, terminal: String, file: String) {
            // `openpty` is in glibc (2.34 on) but not in the Swift module that imports it.
            typealias OpenPTY = @convention(c) (
                UnsafeMutablePointer<CInt>, UnsafeMutablePointer<CInt>, UnsafeMutablePointer<CChar>?,
                UnsafePointer<termios>?, UnsafeRawPointer?) -> CInt
            let address = try #require(dlsym(dlopen(nil, RTLD_NOW), "openpty"), "no openpty")
            var master: CInt = -1, slave: CInt = -1
            var attributes = termios()
            cfmakeraw(&attributes)
            try #require(unsafeBitCast(address, to: OpenPTY.self)(&master, &slave, nil, &attributes, nil) == 0)
            defer { close(master) }
            let dir = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: dir) }
            let fileURL = dir.appendingPathComponent("captured")
            _ = FileManager.default.createFile(atPath: fileURL.path, contents: nil)
            let file = try FileHandle(forWritingTo: fileURL)
            let terminal = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
            // The output is a few hundred bytes, far below what the terminal buffers.
            let status = try await Executables.exitStatus(
                of: "lumen", arguments,
                output: wiring == .outputOnTerminal ? terminal : file,
                error: wiring == .errorOnTerminal ? terminal : file
            ) { close(slave) }
            try file.close()
            var captured = Data()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(master, &buffer, buffer.count)
                if count <= 0 { break }  // EIO once the child's side is closed and drained
                captured.append(contentsOf: buffer[..<count])
            }
            return (status, String(decoding: captured, as: UTF8.self), String(decoding: try Data(contentsOf: fileURL), as: UTF8.self))
        }

        /// A server with one good image; `/missing.jpg` is a 404.
        func server() throws -> LoopbackServer {
            let server = try LoopbackServer()
            server.serve(path: "/good.jpg", data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            return server
        }

        /// Whether `text` is plain lines: no carriage returns, escapes or other control
        /// characters besides the newlines that end each line.
        func isPlainLines(_ text: String) -> Bool {
            text.isEmpty || (text.hasSuffix("\n") && !text.unicodeScalars.contains { $0.properties.generalCategory == .control && $0 != "\n" })
        }

        /// Output to files (as in a script or a CI log): plain lines on both, the summary last.
        @Test func outputToFilesIsPlainLines() async throws {
            let server = try server()
            defer { server.stop() }
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let missing = server.url(for: "/missing.jpg").absoluteString
            let inputs = [server.url(for: "/good.jpg").absoluteString, missing, CLIContractTests.corpus.appendingPathComponent("real-world/flower.jpg").path]
            let outcome = try await CLIContractTests.run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(isPlainLines(outcome.standardOutput), "\(outcome.standardOutput.debugDescription)")
            #expect(isPlainLines(outcome.standardError), "\(outcome.standardError.debugDescription)")
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 2, failed: 1, networkRequests: 2, cacheHits: 0))
            #expect(outcome.standardError.split(separator: "\n").count == 1 && CLIContractTests.failureLines(for: missing, in: outcome.standardError).count == 1)
            #expect(!outcome.standardError.contains("thumbnail: "), "the summary belongs on standard output")
        }

        /// A URL's path may hold percent-encoded control characters (a line feed, a carriage
        /// return, an escape sequence). Output to a file is still plain lines: none of them
        /// reaches the output raw, and one input's line never spans two lines.
        @Test func controlCharactersInAURLNeverBreakPlainLines() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let path = "/red%1B%5B31mtext%0D%0Aevil.jpg"
            server.serve(path: path, data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let outcome = try await CLIContractTests.run(["thumbnail", server.url(for: path).absoluteString, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0))
            let written = try FileManager.default.contentsOfDirectory(atPath: output.path)
            #expect(written.count == 1, "\(written)")
            #expect(isPlainLines(outcome.standardOutput), "\(outcome.standardOutput.debugDescription)")
            #expect(!outcome.standardOutput.unicodeScalars.split(separator: "\n").contains { String($0).hasPrefix("evil") }, "\(outcome.standardOutput.debugDescription)")
            #expect(!written.contains { $0.unicodeScalars.contains { $0.properties.generalCategory == .control } }, "\(written)")
        }

        /// Unicode format characters reorder or hide text: after a right-to-left override
        /// (U+202E) `a\u{202E}gnp.jpg` reads as `agpj.png`. Decoded from a URL or raw in a file
        /// name, each one becomes `_` in the output's name and is printed as an escape; no
        /// output name and no line holds one raw.
        @Test func formatCharactersBecomeUnderscoresInNamesAndEscapesInLines() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let path = "/%E2%80%AEgpj%E2%80%8Bx%E2%81%A6y%EF%BB%BF.jpg"  // U+202E, U+200B, U+2066, U+FEFF
            server.serve(path: path, data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let good = root.appendingPathComponent("a\u{202E}gnp\u{200F}.jpg"), bad = root.appendingPathComponent("bad\u{2067}.png")
            // The zero-width joiner of an emoji sequence moves nothing: kept.
            let joined = root.appendingPathComponent("\u{1F469}\u{200D}\u{1F4BB}.jpg")
            try CLIContractTests.corpusData("hopper.jpg").write(to: good)
            try CLIContractTests.corpusData("hopper.jpg").write(to: joined)
            try CLIContractTests.corpusData("broken.png").write(to: bad)
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(
                ["thumbnail", server.url(for: path).absoluteString, good.path, joined.path, bad.path, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 3, failed: 1, networkRequests: 1, cacheHits: 0))
            #expect(Set(try FileManager.default.contentsOfDirectory(atPath: output.path))
                == ["_gpj_x_y_.jpeg", "a_gnp_.jpeg", "\u{1F469}\u{200D}\u{1F4BB}.jpeg"])
            for text in [outcome.standardOutput, outcome.standardError] {
                #expect(!text.unicodeScalars.contains { $0.properties.generalCategory == .format && $0 != "\u{200D}" }, "\(text.debugDescription)")
            }
            #expect(outcome.standardOutput.contains("\u{1F469}\u{200D}\u{1F4BB}.jpg -> "), "\(outcome.standardOutput.debugDescription)")
            #expect(outcome.standardOutput.contains(#"a\u{202E}gnp\u{200F}.jpg -> "#), "\(outcome.standardOutput.debugDescription)")
            #expect(outcome.standardError.contains(#"bad\u{2067}.png: "#), "\(outcome.standardError.debugDescription)")
        }

        /// A file name may hold a line feed (`lumen thumbnail *` in a directory that has one).
        /// Its failure is still one line on standard error, and standard output plain lines.
        @Test func aFileNameWithALineFeedIsStillOneLine() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let bad = root.appendingPathComponent("bad\nname.png"), good = root.appendingPathComponent("good\nname.jpg")
            try CLIContractTests.corpusData("broken.png").write(to: bad)
            try CLIContractTests.corpusData("hopper.jpg").write(to: good)
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail", bad.path, good.path, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 1, failed: 1, networkRequests: 0, cacheHits: 0))
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).count == 1)
            #expect(outcome.standardError.unicodeScalars.split(separator: "\n").count == 1, "\(outcome.standardError.debugDescription)")
            #expect(!outcome.standardOutput.unicodeScalars.split(separator: "\n").contains { String($0).hasPrefix("name") },
                    "\(outcome.standardOutput.debugDescription)")
        }

        /// `lumen thumbnail … > log` run from a terminal: standard output is a file, so it gets
        /// plain lines even though standard error is a terminal; the failure line reaches the
        /// terminal whole.
        @Test func outputToAFileIsPlainWhileErrorsGoToTheTerminal() async throws {
            let server = try server()
            defer { server.stop() }
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let missing = server.url(for: "/missing.jpg").absoluteString
            let inputs = [server.url(for: "/good.jpg").absoluteString, missing]
            let run = try await run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"], wiring: .errorOnTerminal)
            #expect(run.status == 1)
            #expect(isPlainLines(run.file), "\(run.file.debugDescription)")
            #expect(try CLIContractTests.summary(run.file) == Summary(done: 1, failed: 1, networkRequests: 2, cacheHits: 0))
            #expect(run.terminal.contains("\(missing): "), "\(run.terminal.debugDescription)")
            #expect(run.terminal.contains("404"), "\(run.terminal.debugDescription)")
        }

        /// Standard output on a terminal shows the bar and then the summary line; the failure
        /// lines that go to a file stay plain, one per failed input.
        @Test func aTerminalGetsTheBarWhileErrorsToAFileStayPlain() async throws {
            let server = try server()
            defer { server.stop() }
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let missing = server.url(for: "/missing.jpg").absoluteString
            let inputs = [server.url(for: "/good.jpg").absoluteString, missing, missing]
            let run = try await run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"], wiring: .outputOnTerminal)
            #expect(run.status == 1)
            #expect(run.terminal.contains("\r"), "no progress bar: \(run.terminal.debugDescription)")
            let summaryLine = try #require(run.terminal.split(separator: "\n").last.map(String.init))
            #expect(summaryLine.hasPrefix("thumbnail: 1 done, 2 failed, 2 network requests, 0 cache hits, "), "\(run.terminal.debugDescription)")
            #expect(isPlainLines(run.file), "\(run.file.debugDescription)")
            #expect(run.file.split(separator: "\n").count == 1 && run.file.hasPrefix(missing + ": "), "\(run.file.debugDescription)")
        }
    }
}
