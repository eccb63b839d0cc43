import Foundation
import Lumen
import LumenTestSupport
import Testing

// Nested in `ThumbnailCommandTests`, so `swift test --filter ThumbnailCommandTests` runs it.
extension ThumbnailCommandTests {
    /// `lumen thumbnail`'s accounting of its inputs, run as users run it: every input given is
    /// counted, distinct inputs never share an output file, URL schemes and fragments are read
    /// as URLs are, and on a terminal failure lines never land on the progress bar.
    @Suite(.timeLimit(.minutes(1)))
    struct InputHandling {
        /// The counts of the summary line.
        struct Summary: Equatable {
            var done: Int
            var failed: Int
            var networkRequests: Int
            var cacheHits: Int
        }

        func summary(_ output: String) throws -> Summary {
            let pattern = #/thumbnail: (\d+) done, (\d+) failed, (\d+) network requests, (\d+) cache hits/#
            let match = try #require(try pattern.firstMatch(in: output), "no summary in \(output)")
            return Summary(done: Int(match.1)!, failed: Int(match.2)!, networkRequests: Int(match.3)!, cacheHits: Int(match.4)!)
        }

        func corpusData(_ name: String) throws -> Data {
            try Data(contentsOf: ThumbnailCommandTests.corpus.appendingPathComponent("real-world/\(name)"))
        }

        @Test func aRepeatedInputCountsOnceForEachTimeItIsGiven() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/a.jpg", data: try corpusData("hopper.jpg"), contentType: "image/jpeg")
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let a = server.url(for: "/a.jpg").absoluteString, missing = server.url(for: "/missing.jpg").absoluteString

            let twice = try await Executables.run("lumen", ["thumbnail", missing, missing, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(twice.status == 1)
            #expect(try summary(twice.standardOutput) == Summary(done: 0, failed: 2, networkRequests: 1, cacheHits: 0), "\(twice.standardOutput)")
            #expect(twice.standardError.split(separator: "\n").count == 1, "\(twice.standardError)")

            server.resetStatistics()
            let inputs = [a, missing, a, missing, a]
            let mixed = try await Executables.run("lumen", ["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(mixed.status == 1)
            let counts = try summary(mixed.standardOutput)
            #expect(counts.done == inputs.filter { $0 == a }.count && counts.failed == inputs.filter { $0 == missing }.count, "\(mixed.standardOutput)")
            #expect(counts.done + counts.failed == inputs.count)
            #expect(server.requestCount(for: "/a.jpg") == 1 && server.requestCount(for: "/missing.jpg") == 1)
            // Plain lines only: no terminal escapes when the output is a file.
            #expect(!mixed.standardOutput.contains("\u{1B}") && !mixed.standardOutput.contains("\r"))
        }

        @Test func distinctInputsWithOneNameGetNumberedFilesInInputOrder() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let square = try corpusData("hopper.jpg"), landscape = try corpusData("flower.jpg")
            server.serve(path: "/sub/a.jpg", data: landscape, contentType: "image/jpeg")
            server.serve(path: "/a.jpg", data: square, contentType: "image/jpeg")
            server.serve(path: "/x.php", data: square, contentType: "image/jpeg")
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let subA = server.url(for: "/sub/a.jpg").absoluteString, a = server.url(for: "/a.jpg").absoluteString
            let x1 = server.url(for: "/x.php").absoluteString + "?id=1", x2 = server.url(for: "/x.php").absoluteString + "?id=2"
            let inputs = [subA, a, x1, x2, a, x1]
            let outcome = try await Executables.run("lumen", ["thumbnail"] + inputs + ["--size", "64", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try summary(outcome.standardOutput) == Summary(done: inputs.count, failed: 0, networkRequests: 4, cacheHits: 0))
            #expect(server.requestCount(for: "/x.php") == 2 && server.requestCount(for: "/a.jpg") == 1)

            let expected = [subA: "a.jpeg", a: "a-2.jpeg", x1: "x.jpeg", x2: "x-2.jpeg"]
            let written = try FileManager.default.contentsOfDirectory(atPath: output.path)
            #expect(Set(written) == Set(expected.values))
            // Each plain line names the file its input went to.
            for (input, name) in expected {
                #expect(outcome.standardOutput.contains(": \(input) -> \(output.appendingPathComponent(name).path)\n"), "\(input) -> \(name)")
            }
            // The files hold their own input's image: the first `a` is the landscape one.
            let first = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("a.jpeg")))
            let second = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("a-2.jpeg")))
            let source = try ImageDecoder.info(for: landscape)
            #expect((first.width > first.height) == (source.width > source.height) && first.width != first.height)
            #expect(second.width == second.height)
        }

        @Test func schemesAreCaseInsensitiveFragmentsIgnoredAndOtherSchemesRefused() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/a.jpg", data: try corpusData("hopper.jpg"), contentType: "image/jpeg")
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let a = server.url(for: "/a.jpg").absoluteString
            let upper = "HTTP" + a.dropFirst("http".count)
            let ftp = "ftp" + a.dropFirst("http".count)
            let file = ThumbnailCommandTests.corpus.appendingPathComponent("real-world/hopper.png").absoluteString
            let data = "data:image/webp;base64," + (try corpusData("flower.webp")).base64EncodedString()
            let inputs = [upper, a + "#one", ftp, a + "#two", file, data]
            let outcome = try await Executables.run("lumen", ["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(try summary(outcome.standardOutput) == Summary(done: inputs.count - 1, failed: 1, networkRequests: 1, cacheHits: 0), "\(outcome.standardOutput)")
            #expect(server.requestCount(for: "/a.jpg") == 1)
            let lines = outcome.standardError.split(separator: "\n")
            #expect(lines.count == 1 && lines[0].hasPrefix(ftp + ": ") && lines[0].contains("unsupported URL scheme"), "\(outcome.standardError)")
            let written = try FileManager.default.contentsOfDirectory(atPath: output.path)
            #expect(Set(written) == ["a.jpeg", "hopper.jpeg", "image.jpeg"])

            let alone = try await Executables.run("lumen", ["thumbnail", ftp, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(alone.status == 1)
            #expect(try summary(alone.standardOutput) == Summary(done: 0, failed: 1, networkRequests: 0, cacheHits: 0))
            #expect(!alone.standardError.contains("No file"), "\(alone.standardError)")
        }

        @Test func hostNamesAreCaseInsensitive() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/a.jpg", data: try corpusData("hopper.jpg"), contentType: "image/jpeg")
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let port = try #require(server.baseURL.port)
            let inputs = ["http://localhost:\(port)/a.jpg", "http://LocalHost:\(port)/a.jpg", "HTTP://LOCALHOST:\(port)/a.jpg#x"]
            let cache = output.appendingPathComponent("cache").path
            let first = try await Executables.run("lumen", ["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--cache", cache])
            #expect(first.status == 0, "\(first.standardError)")
            #expect(try summary(first.standardOutput) == Summary(done: 3, failed: 0, networkRequests: 1, cacheHits: 0))
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).filter { $0.hasSuffix(".jpeg") } == ["a.jpeg"])
            // The disk cache entry the first spelling stored answers another one.
            let second = try await Executables.run("lumen", ["thumbnail", inputs[1], "--size", "32", "--output", output.path, "--cache", cache])
            #expect(try summary(second.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 0, cacheHits: 1))
            #expect(server.requestCount(for: "/a.jpg") == 1)
        }

        @Test func emptyDirectoriesAreUsageErrorsAndNetworkFailuresReadAsSentences() async throws {
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            for flags in [["--cache", ""], ["--output", ""]] {
                var arguments = ["thumbnail", "x.jpg", "--size", "32", "--output", output.path] + flags
                if flags[0] == "--output" { arguments.removeSubrange(4...5) }
                let outcome = try await Executables.run("lumen", arguments)
                #expect(outcome.status == 2, "\(flags): \(outcome.standardError)")
                #expect(outcome.standardError.contains("needs a directory"), "\(outcome.standardError)")
            }
            // Nothing listens on port 1: the failure says so, without an NSError dump.
            let refused = try await Executables.run("lumen", ["thumbnail", "http://127.0.0.1:1/a.jpg", "--size", "32", "--output", output.path, "--no-cache"])
            #expect(refused.status == 1)
            #expect(refused.standardError.contains("cannot connect to host"), "\(refused.standardError)")
            #expect(!refused.standardError.contains("Error Domain="), "\(refused.standardError)")
        }

        /// Above the session's default 6 connections per host: every download of an 8-wide
        /// run is in flight at once (the server holds each until all 8 have arrived).
        @Test func concurrencyAboveSixReachesTheServer() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let jpeg = try corpusData("hopper.jpg")
            let paths = (0..<8).map { "/p\($0).jpg" }
            for path in paths {
                server.serve(path: path, data: jpeg, contentType: "image/jpeg")
                server.hold(path)
            }
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let run = Task {
                try await Executables.run("lumen", ["thumbnail"] + paths.map { server.url(for: $0).absoluteString }
                                          + ["--size", "16", "--output", output.path, "--no-cache", "--concurrency", "8"])
            }
            try await server.waitUntil { $0.heldRequests == paths.count }
            server.releaseAll()
            let outcome = try await run.value
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try summary(outcome.standardOutput) == Summary(done: 8, failed: 0, networkRequests: 8, cacheHits: 0))
        }

        /// `--fill` is exactly N×N even when the image is smaller than N on a side (the decode
        /// never enlarges; the command scales up and crops what falls short).
        @Test func fillIsExactlyNByNForSmallImages() async throws {
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let strip = Bitmap(width: 300, height: 40, format: .rgb8) { out in
                for i in 0..<(300 * 40) { out[i * 3] = UInt8(i % 300 * 255 / 299); out[i * 3 + 1] = 90; out[i * 3 + 2] = 30 }
            }
            let stripFile = output.appendingPathComponent("strip.png")
            try strip.encode(as: .png).write(to: stripFile)
            let small = ThumbnailCommandTests.corpus.appendingPathComponent("real-world/hopper.jpg").path
            let thumbs = output.appendingPathComponent("thumbs")
            let outcome = try await Executables.run("lumen", ["thumbnail", stripFile.path, small, "--size", "256", "--fill",
                                                              "--format", "png", "--output", thumbs.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            for name in ["strip.png", "hopper.png"] {
                let info = try ImageDecoder.info(for: Data(contentsOf: thumbs.appendingPathComponent(name)))
                #expect(info.width == 256 && info.height == 256, "\(name): \(info.width)x\(info.height)")
            }
            // Without --fill the longest side stays at most N and nothing is enlarged.
            let fit = try await Executables.run("lumen", ["thumbnail", stripFile.path, "--size", "256", "--format", "png",
                                                          "--output", output.appendingPathComponent("fit").path, "--no-cache"])
            #expect(fit.status == 0)
            let fitted = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent("fit/strip.png")))
            #expect(fitted.width == 256 && fitted.height == 34, "\(fitted.width)x\(fitted.height)")
        }

        @Test func onATerminalEveryOutputOfASharedNameIsListed() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/a.jpg", data: try corpusData("hopper.jpg"), contentType: "image/jpeg")
            server.serve(path: "/b.jpg", data: try corpusData("hopper.jpg"), contentType: "image/jpeg")
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let a = server.url(for: "/a.jpg").absoluteString, b = server.url(for: "/b.jpg").absoluteString
            let inputs = [a + "?q=1", b, a + "?q=2"]
            let (status, text) = try await runOnTerminal(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache", "--concurrency", "1"])
            #expect(status == 0)
            #expect(text.contains("\(inputs[0]) -> \(output.appendingPathComponent("a.jpeg").path)\n"), "\(text.debugDescription)")
            #expect(text.contains("\(inputs[2]) -> \(output.appendingPathComponent("a-2.jpeg").path)\n"), "\(text.debugDescription)")
            // An output whose name nobody else wanted stays off the screen: the bar says it.
            #expect(!text.contains("\(b) ->"), "\(text.debugDescription)")
        }

        @Test func onATerminalFailuresClearTheBarWhichShowsFromTheStart() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let jpeg = try corpusData("hopper.jpg")
            server.serve(path: "/a.jpg", data: jpeg, contentType: "image/jpeg")
            server.serve(path: "/b.jpg", data: jpeg, contentType: "image/jpeg")
            let output = try ThumbnailCommandTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let missing = server.url(for: "/missing.jpg").absoluteString
            let inputs = [server.url(for: "/a.jpg").absoluteString, missing, server.url(for: "/b.jpg").absoluteString]
            let (status, text) = try await runOnTerminal(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache", "--concurrency", "1"])
            #expect(status == 1)
            let total = inputs.count
            let empty = try #require(text.range(of: "] 0/\(total)"), "\(text.debugDescription)")
            let firstDone = try #require(text.range(of: "] 1/\(total)"))
            #expect(empty.upperBound <= firstDone.lowerBound)
            // The failure starts on a cleared line, ends its own line, and the bar comes back.
            let failure = try #require(text.range(of: "\(missing): "), "\(text.debugDescription)")
            #expect(text[..<failure.lowerBound].hasSuffix("\r\u{1B}[K"), "\(text.debugDescription)")
            let rest = text[failure.upperBound...]
            let lineEnd = try #require(rest.firstIndex(of: "\n"))
            #expect(rest[rest.index(after: lineEnd)...].hasPrefix("\r["), "\(text.debugDescription)")
            #expect(text.contains("] \(total)/\(total)"))
        }

        @Test func theToolsUsageSaysThumbnailTakesFilesOrURLs() async throws {
            let outcome = try await Executables.run("lumen", ["help"])
            let line = try #require(outcome.standardOutput.split(separator: "\n").first { $0.hasPrefix("  thumbnail ") })
            #expect(line.contains("files or URLs"), "\(line)")
        }

        /// Runs `lumen` with standard output and error on a pseudo-terminal, as in an interactive
        /// shell, and returns its status and all it wrote there, byte for byte (raw mode).
        func runOnTerminal(_ arguments: [String]) async throws -> (status: Int32, output: String) {
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
            let terminal = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
            // The output is a few hundred bytes, far below what the terminal buffers, so the child
            // never blocks on it; the terminal keeps it for reading after the child exits.
            let status = try await Executables.exitStatus(of: "lumen", arguments, output: terminal, error: terminal) {
                close(slave)
            }
            var output = Data()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(master, &buffer, buffer.count)
                if count <= 0 { break }  // EIO once the child's side is closed and drained
                output.append(contentsOf: buffer[..<count])
            }
            return (status, String(decoding: output, as: UTF8.self))
        }
    }
}
