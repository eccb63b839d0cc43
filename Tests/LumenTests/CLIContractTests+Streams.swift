import Foundation
import Lumen
import LumenTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import lumen

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen thumbnail` against what surrounds it rather than what it loads: standard streams
    /// that fail or lag, inputs that are no files, credentials in URLs, the summary's cache
    /// hits when a cached entry had to be downloaded again. (Found by an independent
    /// acceptance probe.)
    @Suite(.timeLimit(.minutes(1)))
    struct ThumbnailStreams {
        /// Standard error that cannot be written (a full device): the failure line is lost, the
        /// run is not — exit 1 and the summary, no crash.
        #if os(Linux)
        @Test func aStandardErrorThatFailsNeverStopsTheRun() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let empty = root.appendingPathComponent("empty.png")
            _ = FileManager.default.createFile(atPath: empty.path, contents: Data())
            let full = try #require(FileHandle(forWritingAtPath: "/dev/full"))
            let outcome = try await CLIContractTests.run(
                ["thumbnail", empty.path, "--size", "10", "--output", root.appendingPathComponent("out").path, "--no-cache"],
                standardError: full)
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 0, failed: 1, networkRequests: 0, cacheHits: 0))
        }
        #endif

        /// A FIFO among the inputs is no file to read: it fails at once with a clear reason
        /// (opening it would wait for a writer for ever), and the other input is done.
        @Test func aFIFOInputFailsAtOnce() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let fifo = root.appendingPathComponent("fifo.jpg")
            #expect(mkfifo(fifo.path, 0o600) == 0)
            let image = root.appendingPathComponent("hopper.jpg")
            try CLIContractTests.corpusData("hopper.jpg").write(to: image)
            let outcome = try await CLIContractTests.run(
                ["thumbnail", fifo.path, image.path, "--size", "16", "--output", root.appendingPathComponent("out").path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 1, failed: 1, networkRequests: 0, cacheHits: 0))
            let lines = CLIContractTests.failureLines(for: fifo.path, in: outcome.standardError)
            #expect(lines.count == 1 && lines[0].contains("not a regular file"), "\(outcome.standardError)")
        }

        /// Progress lines reach standard output when it is a pipe as each input ends, not when
        /// the run exits: the first input's line is read while the second is still held by the
        /// server.
        @Test func progressLinesReachAPipeAsTheyArePrinted() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/held.jpg", data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            server.hold("/held.jpg")
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let image = root.appendingPathComponent("local.jpg")
            try CLIContractTests.corpusData("hopper.jpg").write(to: image)
            let process = Process()
            process.executableURL = try Executables.url("lumen")
            process.arguments = ["thumbnail", image.path, server.url(for: "/held.jpg").absoluteString,
                                 "--size", "16", "--output", root.appendingPathComponent("out").path, "--no-cache"]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            process.standardInput = FileHandle.nullDevice
            let exited = AsyncStream<Int32>.makeStream()
            process.terminationHandler = { exited.continuation.yield($0.terminationStatus) }
            try process.run()
            // Blocks until the line comes: without it the run never ends (the server holds).
            let first = await Task.detached { () -> String in
                var text = ""
                while !text.contains("\n") {
                    let chunk = pipe.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    text += String(decoding: chunk, as: UTF8.self)
                }
                return text
            }.value
            #expect(first.hasPrefix("done 1/2: \(image.path) -> "), "\(first.debugDescription)")
            server.release("/held.jpg")
            _ = pipe.fileHandleForReading.readDataToEndOfFile()
            var statuses = exited.stream.makeAsyncIterator()
            #expect(await statuses.next() == 0)
        }

        /// Inputs a URL reads without a host, though libcurl would find one (and credentials)
        /// in the path, fail as invalid before anything is sent; their passwords are never
        /// printed, nor those of inputs too malformed to be URLs (a `/` or `?` in the password)
        /// or taken as file paths (a leading space, a directory before the URL).
        @Test func lenientAndMalformedURLsFailWithoutShowingTheirPasswords() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/a.png", data: try CLIContractTests.corpusData("transparent.png"), contentType: "image/png")
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let port = server.baseURL.port!
            let inputs = ["http:/u:SECRET1@127.0.0.1:\(port)/a.png", "http:///u:SECRET2@127.0.0.1:\(port)/a.png",
                          "HTTPS:/u:SECRET3@127.0.0.1:\(port)/a.png", "http:u:SECRET4@127.0.0.1:\(port)/a.png",
                          "http://user:pa/SECRET5@127.0.0.1:\(port)/a.png", "http://user:pa?SECRET6@127.0.0.1:\(port)/a.png",
                          " http://user:SECRET7@127.0.0.1:\(port)/a.png", "dir/http://user:SECRET8@127.0.0.1:\(port)/a.png"]
            let outcome = try await CLIContractTests.run(["thumbnail"] + inputs + ["--size", "16", "--output", root.appendingPathComponent("out").path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 0, failed: 8, networkRequests: 0, cacheHits: 0))
            #expect(!(outcome.standardOutput + outcome.standardError).contains("SECRET"), "\(outcome.standardOutput)\n\(outcome.standardError)")
            #expect(outcome.standardError.contains("http:/u:***@127.0.0.1:\(port)/a.png: invalid URL: no host"), "\(outcome.standardError)")
            #expect(outcome.standardError.contains("http://user:***@127.0.0.1:\(port)/a.png: invalid URL"), "\(outcome.standardError)")
            #expect(server.statistics.totalConnections == 0)
        }

        /// A relative `file:` URL names the file its path names from the working directory:
        /// one input with that path, loaded once.
        @Test func aRelativeFileURLIsTheFileItsPathNames() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            try FileManager.default.createDirectory(at: root.appendingPathComponent("img"), withIntermediateDirectories: true)
            try CLIContractTests.corpusData("hopper.jpg").write(to: root.appendingPathComponent("img/red.jpg"))
            let outcome = try await CLIContractTests.run(
                ["thumbnail", "img/red.jpg", "file:img/red.jpg", "--size", "16", "--output", "out", "--no-cache", "--concurrency", "1"],
                directory: root)
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 2, failed: 0, networkRequests: 0, cacheHits: 0))
            #expect(try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("out").path) == ["red.jpeg"])
        }

        /// Credentials in an input URL are never printed: the failure line names the URL with
        /// `***` for the password — or for the whole user part when it has no password (a
        /// token) — also when the URL needs percent-encoding.
        @Test(arguments: [("alice:s3cret", "alice:***", "s3cret"), ("alice:s3|cr{et", "alice:***", "cr"), ("T0KEN9", "***", "T0KEN9")])
        func credentialsInAURLAreNotPrinted(userInfo: String, shownUserInfo: String, secret: String) async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let port = server.baseURL.port!
            let input = "http://\(userInfo)@127.0.0.1:\(port)/missing.jpg"
            let outcome = try await CLIContractTests.run(
                ["thumbnail", input, "--size", "16", "--output", root.appendingPathComponent("out").path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(!outcome.standardOutput.contains(secret) && !outcome.standardError.contains(secret), "\(outcome.standardOutput)\n\(outcome.standardError)")
            let shown = "http://\(shownUserInfo)@127.0.0.1:\(port)/missing.jpg"
            #expect(CLIContractTests.failureLines(for: shown, in: outcome.standardError).count == 1, "\(outcome.standardError)")
            #expect(outcome.standardOutput.contains("failed 1/1: \(shown)"))
        }

        /// A cached entry the server must be asked about: a `304` is a cache hit (no body came
        /// again), a new `200` is not — the summary's hits are what the cache saved.
        @Test func aRevalidationCountsAsACacheHitOnlyWhenNotModified() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let jpeg = try CLIContractTests.corpusData("hopper.jpg")
            server.serve(path: "/validated.jpg", data: jpeg, contentType: "image/jpeg", etag: "\"v1\"", cacheControl: "max-age=0")
            server.serve(path: "/unvalidated.jpg", data: jpeg, contentType: "image/jpeg", cacheControl: "no-cache")
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let cache = root.appendingPathComponent("cache").path
            func run(_ path: String) async throws -> Summary {
                let outcome = try await CLIContractTests.run(
                    ["thumbnail", server.url(for: path).absoluteString, "--size", "16", "--output", root.appendingPathComponent("out").path, "--cache", cache])
                #expect(outcome.status == 0, "\(outcome.standardError)")
                return try CLIContractTests.summary(outcome.standardOutput)
            }
            #expect(try await run("/validated.jpg") == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0))
            #expect(try await run("/validated.jpg") == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 1)) // 304
            #expect(try await run("/unvalidated.jpg") == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0))
            #expect(try await run("/unvalidated.jpg") == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0)) // a new 200
        }

        /// The progress bar fits the terminal: a line that wrapped could not be redrawn in place.
        @Test(arguments: [nil, 80, 40, 20, 12, 8])
        func theProgressBarFitsTheTerminal(columns: Int?) {
            let bar = progressBar(7, of: 120, columns: columns)
            if let columns { #expect(bar.count < columns, "\(bar)") } else { #expect(bar.count == 32 + " 7/120".count) }
            #expect(bar.hasSuffix("7/120"))
        }
            /// A JPEG thumbnail of an image with transparency shows white where the image is
        /// transparent (JPEG has no alpha), not the colour the transparent pixels store.
        @Test func aJPEGThumbnailShowsWhereTheImageIsTransparentAsWhite() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            // Left half opaque red, right half transparent black.
            let (w, h) = (32, 16)
            var pixels = [UInt8](repeating: 0, count: w * h * 4)
            for y in 0..<h {
                for x in 0..<(w / 2) { pixels.replaceSubrange((y * w + x) * 4..<(y * w + x) * 4 + 4, with: [255, 0, 0, 255]) }
            }
            let input = root.appendingPathComponent("half.png")
            try Bitmap(width: w, height: h, format: .rgba8, pixels: pixels).encode(as: .png).write(to: input)
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail", input.path, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let thumbnail = try ImageDecoder.decode(Data(contentsOf: output.appendingPathComponent("half.jpeg"))).bitmap
            #expect(thumbnail.width == w && thumbnail.height == h)
            let c = thumbnail.format.channels
            func pixel(_ x: Int, _ y: Int) -> [Int] { (0..<3).map { Int(thumbnail.pixels[(y * w + x) * c + $0]) } }
            #expect(pixel(28, 8).allSatisfy { $0 >= 245 }, "\(pixel(28, 8))") // transparent: white
            #expect(pixel(4, 8)[0] >= 230 && pixel(4, 8)[1] <= 30, "\(pixel(4, 8))") // opaque: red
        }
            /// `--timeout SECONDS` bounds each download from start to end: a server that stalls
        /// mid-body fails that input (timed out), and the others are done.
        @Test func aTimeoutEndsADownloadThatStalls() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let jpeg = try CLIContractTests.corpusData("hopper.jpg")
            server.serve(path: "/stalls.jpg", data: jpeg, contentType: "image/jpeg")
            server.serve(path: "/fine.jpg", data: jpeg, contentType: "image/jpeg")
            server.holdBody("/stalls.jpg", after: 1000)
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let stalling = server.url(for: "/stalls.jpg").absoluteString
            let outcome = try await CLIContractTests.run(
                ["thumbnail", stalling, server.url(for: "/fine.jpg").absoluteString,
                 "--size", "16", "--timeout", "0.5", "--output", root.appendingPathComponent("out").path, "--no-cache"])
            server.releaseAll()
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 1, failed: 1, networkRequests: 2, cacheHits: 0))
            let lines = CLIContractTests.failureLines(for: stalling, in: outcome.standardError)
            #expect(lines.count == 1 && lines[0].contains("timed out"), "\(outcome.standardError)")
        }

        @Test(arguments: ["0", "-1", "abc", "inf", "nan", "86401"])
        func aTimeoutMustBeAPositiveNumberOfSeconds(value: String) async throws {
            let outcome = try await CLIContractTests.run(["thumbnail", "a.jpg", "--size", "16", "--output", "out", "--timeout", value])
            #expect(outcome.status == 2)
            #expect(outcome.standardError.contains("--timeout must be a number of seconds"), "\(outcome.standardError)")
        }
    }
}
