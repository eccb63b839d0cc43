import Foundation
import Lumen
import LumenTestSupport
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen thumbnail`'s inputs: files with odd names, URLs and files mixed, repeated
    /// inputs, inputs that fail (unreachable, 404, corrupt, missing), and `--concurrency`.
    @Suite(.timeLimit(.minutes(1)))
    struct ThumbnailInputs {
        /// File names a user may well have. Each is read as a file (not as a URL, a fragment
        /// or a query), given as an absolute path or relative to the working directory, and
        /// its thumbnail is `<name without extension>.jpeg`.
        static let oddNames: [(file: String, thumbnail: String)] = [
            ("my photo.jpg", "my photo.jpeg"), ("a#1.jpg", "a#1.jpeg"), ("q?x=1.jpg", "q?x=1.jpeg"),
            ("shot 1:2.jpg", "shot 1:2.jpeg"), ("img:1.jpg", "img:1.jpeg"), ("a.b.c.jpg", "a.b.c.jpeg"),
            ("noext", "noext.jpeg"), (".hidden.jpg", ".hidden.jpeg"), ("100%25.jpg", "100%25.jpeg"),
            ("été.jpg", "été.jpeg"), ("-dash.jpg", "-dash.jpeg"), ("wrong-extension.gif", "wrong-extension.jpeg"),
        ]

        @Test(arguments: [false, true])
        func oddFileNamesAreFilesNamedAfterThemselves(relative: Bool) async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let photos = root.appendingPathComponent("photos")
            try FileManager.default.createDirectory(at: photos, withIntermediateDirectories: true)
            let jpeg = try CLIContractTests.corpusData("hopper.jpg")
            for (file, _) in Self.oddNames { try jpeg.write(to: photos.appendingPathComponent(file)) }
            // A relative name starting with "-" would read as an option: "./" keeps it a file.
            let inputs = Self.oddNames.map { relative ? ($0.file.hasPrefix("-") ? "./" + $0.file : $0.file) : photos.appendingPathComponent($0.file).path }
            let output = root.appendingPathComponent("thumbs")
            let outcome = try await CLIContractTests.run(
                ["thumbnail"] + inputs + ["--size", "48", "--output", output.path, "--no-cache"], directory: relative ? photos : nil)
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: inputs.count, failed: 0, networkRequests: 0, cacheHits: 0))
            let written = Set(try FileManager.default.contentsOfDirectory(atPath: output.path))
            #expect(written == Set(Self.oddNames.map(\.thumbnail)), "\(written.sorted())")
            for name in written {
                let info = try ImageDecoder.info(for: Data(contentsOf: output.appendingPathComponent(name)))
                #expect(info.format == .jpeg && max(info.width, info.height) == 48, "\(name): \(info)")
            }
        }

        /// Files, `file:` URLs, `http:` URLs and `data:` URLs in one run, each repeated: every
        /// input given is counted, each repeated one is loaded once, and only `http:` loads are
        /// network requests (one per distinct URL, as the server counts them).
        @Test func urlsAndFilesMixedWithRepeatsAreLoadedOnceAndCountedEachTime() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/one.jpg", data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            server.serve(path: "/two.webp", data: try CLIContractTests.corpusData("flower.webp"), contentType: "image/webp")
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let one = server.url(for: "/one.jpg").absoluteString, two = server.url(for: "/two.webp").absoluteString
            let file = CLIContractTests.corpus.appendingPathComponent("real-world/transparent.png")
            let data = "data:image/png;base64," + (try CLIContractTests.corpusData("hopper.png")).base64EncodedString()
            let inputs = [one, file.path, two, data, one + "#again", file.path, data, two, file.absoluteString]
            let outcome = try await CLIContractTests.run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: inputs.count, failed: 0, networkRequests: 2, cacheHits: 0))
            #expect(server.requestCount(for: "/one.jpg") == 1 && server.requestCount(for: "/two.webp") == 1)
            let written = Set(try FileManager.default.contentsOfDirectory(atPath: output.path))
            // "image" names a data: URL. The file as a path and as a file: URL is one file (or
            // two distinct inputs of one name); never more than one thumbnail otherwise.
            #expect(written == ["one.jpeg", "two.jpeg", "transparent.jpeg", "image.jpeg"]
                    || written == ["one.jpeg", "two.jpeg", "transparent.jpeg", "transparent-2.jpeg", "image.jpeg"], "\(written.sorted())")
        }

        /// Distinct inputs never write the same file, even when a numbered name (`a-2`) is
        /// also some input's own name, and two distinct `data:` URLs both want `image`.
        @Test func distinctInputsNeverShareAnOutputFile() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let first = root.appendingPathComponent("first"), second = root.appendingPathComponent("second")
            for dir in [first, second] { try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true) }
            try CLIContractTests.corpusData("hopper.jpg").write(to: first.appendingPathComponent("a.jpg"))
            try CLIContractTests.corpusData("flower.jpg").write(to: second.appendingPathComponent("a.jpg"))
            try CLIContractTests.corpusData("hopper.png").write(to: first.appendingPathComponent("a-2.jpg"))
            try CLIContractTests.corpusData("flower.webp").write(to: second.appendingPathComponent("a-2.jpg"))
            let dataA = "data:image/png;base64," + (try CLIContractTests.corpusData("hopper.png")).base64EncodedString()
            let dataB = "data:image/png;base64," + (try CLIContractTests.corpusData("transparent.png")).base64EncodedString()
            let inputs = [first.appendingPathComponent("a-2.jpg").path, first.appendingPathComponent("a.jpg").path,
                          second.appendingPathComponent("a.jpg").path, second.appendingPathComponent("a-2.jpg").path, dataA, dataB]
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try CLIContractTests.summary(outcome.standardOutput).done == inputs.count)
            let written = try FileManager.default.contentsOfDirectory(atPath: output.path)
            #expect(written.count == inputs.count, "\(written.sorted())")
            #expect(written.contains("a-2.jpeg") && written.contains("a.jpeg") && written.contains("image.jpeg") && written.contains("image-2.jpeg"), "\(written.sorted())")
        }

        /// An input that sits in the output directory under its thumbnail's name (`a.jpeg`
        /// with `--output` its own directory) is not replaced by its thumbnail. The contract
        /// names outputs after inputs and keeps distinct inputs apart; it never says an input
        /// may be destroyed.
        @Test func anInputIsNeverOverwrittenByItsOwnThumbnail() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let original = try CLIContractTests.corpusData("hopper.jpg")
            let input = root.appendingPathComponent("a.jpeg")
            try original.write(to: input)
            let outcome = try await CLIContractTests.run(["thumbnail", input.path, "--size", "32", "--output", root.path, "--no-cache"])
            #expect(outcome.status == 0 || outcome.status == 1, "\(outcome.standardError)")
            let after = try Data(contentsOf: input)
            #expect(after == original, "\(original.count) bytes became \(after.count)")
        }

        /// Names are cut to 200 bytes, never inside a character, and two long names that only
        /// differ past the cut still get two files.
        @Test func longNamesAreCutToTwoHundredBytesOnACharacterBoundary() async throws {
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let accented = "a" + String(repeating: "é", count: 120)  // 241 bytes: a cut at 200 falls inside an é
            let long = String(repeating: "x", count: 210)
            let names = [accented + ".jpg", long + "1.jpg", long + "2.jpg"]
            for name in names { try CLIContractTests.corpusData("hopper.jpg").write(to: root.appendingPathComponent(name)) }
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(
                ["thumbnail"] + names.map { root.appendingPathComponent($0).path } + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let written = try FileManager.default.contentsOfDirectory(atPath: output.path)
            #expect(written.count == names.count, "\(written)")
            for name in written {
                // The name cut, then perhaps a number ("-2") to keep two inputs apart.
                let base = try #require(try #/^(.*?)(?:-\d+)?\.jpeg$/#.wholeMatch(in: name), "\(name)").1
                #expect(base.utf8.count <= 200 && (accented.hasPrefix(base) || long.hasPrefix(base)), "\(base.utf8.count) bytes: \(name)")
            }
            // The longest cut that ends on a character boundary: "a" and 99 é, 199 bytes.
            #expect(written.contains("a" + String(repeating: "é", count: 99) + ".jpeg"), "\(written)")
        }

        /// Every way an input can fail gives exit status 1, exactly one stderr line per
        /// distinct failed input (repeats included, no stack of `Error Domain=` dumps), and the
        /// rest of the run still succeeds.
        @Test func eachFailedInputGetsOneTypedLine() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.serve(path: "/good.jpg", data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            server.serve(path: "/broken.png", data: try CLIContractTests.corpusData("broken.png"), contentType: "image/png")
            server.serve(path: "/page.jpg", data: Data("<html><body>not here</body></html>".utf8), contentType: "text/html")
            server.serve(path: "/empty.jpg", data: Data(), contentType: "image/jpeg")
            server.serve(path: "/cut.jpg", data: try CLIContractTests.corpusData("flower.jpg"), contentType: "image/jpeg")
            server.truncate(path: "/cut.jpg", after: 2000)  // the connection closes mid-body
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            try Data().write(to: root.appendingPathComponent("empty.jpg"))
            let missing = root.appendingPathComponent("missing.jpg").path
            let notFound = server.url(for: "/missing.jpg").absoluteString
            let failing: [String: String] = [  // input → what its line must say
                notFound: "404",
                "http://127.0.0.1:1/refused.jpg": "connect",
                server.url(for: "/broken.png").absoluteString: "corrupted",
                server.url(for: "/page.jpg").absoluteString: "unsupportedFormat",
                server.url(for: "/empty.jpg").absoluteString: "",
                server.url(for: "/cut.jpg").absoluteString: "",
                CLIContractTests.corpus.appendingPathComponent("real-world/truncated_image.png").path: "truncated",
                CLIContractTests.corpus.appendingPathComponent("real-world/decompression_bomb.gif").path: "tooLarge",
                root.appendingPathComponent("empty.jpg").path: "",
                missing: "",
                root.path: "",  // a directory
            ]
            let good = [server.url(for: "/good.jpg").absoluteString, CLIContractTests.corpus.appendingPathComponent("real-world/flower.jpg").path]
            let inputs = good + failing.keys.sorted() + [notFound, missing]
            let output = root.appendingPathComponent("out")
            let outcome = try await CLIContractTests.run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            let counts = try CLIContractTests.summary(outcome.standardOutput)
            #expect(counts.done == good.count && counts.failed == inputs.count - good.count, "\(counts)")
            #expect(outcome.standardError.split(separator: "\n").count == failing.count, "\(outcome.standardError)")
            for (input, words) in failing {
                let lines = CLIContractTests.failureLines(for: input, in: outcome.standardError)
                #expect(lines.count == 1, "\(input): \(lines)")
                #expect(words.isEmpty || lines.first?.contains(words) == true, "\(input) should say \(words): \(lines)")
                #expect(lines.first.map { $0.count > input.count + 2 } == true, "\(input): no reason given")
            }
            #expect(!outcome.standardError.contains("Error Domain="), "\(outcome.standardError)")
            #expect(Set(try FileManager.default.contentsOfDirectory(atPath: output.path)) == ["good.jpeg", "flower.jpeg"])
        }

        /// An IPv6 literal is a URL like any other: with nothing listening, its failure is a
        /// failed connection (or an unreachable network), not a malformed URL. (Through
        /// FoundationNetworking's `URLSession` it failed as `bad URL` before any connection was
        /// tried; on Linux the tool loads through `CurlDataLoader`.)
        @Test func anIPv6LiteralURLIsTriedNotRefused() async throws {
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let url = "http://[::1]:1/a.jpg"
            let outcome = try await CLIContractTests.run(["thumbnail", url, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            let lines = CLIContractTests.failureLines(for: url, in: outcome.standardError)
            #expect(lines.count == 1, "\(outcome.standardError)")
            #expect(!outcome.standardError.contains("bad URL") && !outcome.standardError.contains("ErrorDomain"), "\(outcome.standardError)")
        }

        /// A server that sends a status line and a header field, then closes cleanly (the
        /// head never ends): FoundationNetworking's `URLSession` trapped on it and killed the
        /// process. The tool fails that input with a typed error and finishes the others.
        @Test func aResponseHeadCutShortFailsThatInputAndNothingElse() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.respondRaw(path: "/cut.jpg", bytes: Data("HTTP/1.1 200 OK\r\nX-A: 1\r\n".utf8))
            server.serve(path: "/good.jpg", data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg")
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let cut = server.url(for: "/cut.jpg").absoluteString
            let outcome = try await CLIContractTests.run(
                ["thumbnail", cut, server.url(for: "/good.jpg").absoluteString, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            #expect(try CLIContractTests.summary(outcome.standardOutput).done == 1)
            let lines = CLIContractTests.failureLines(for: cut, in: outcome.standardError)
            #expect(lines.count == 1 && lines.first?.contains("URL error") == true, "\(outcome.standardError)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["good.jpeg"])
        }

        /// A server error: one line naming the status, exit 1 (however often it was retried).
        @Test func aServerErrorFailsWithItsStatus() async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            server.respond(path: "/down.jpg", status: 503)
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let url = server.url(for: "/down.jpg").absoluteString
            let outcome = try await CLIContractTests.run(["thumbnail", url, url, "--size", "32", "--output", output.path, "--no-cache"])
            #expect(outcome.status == 1)
            let lines = CLIContractTests.failureLines(for: url, in: outcome.standardError)
            #expect(lines.count == 1 && lines[0].contains("503"), "\(outcome.standardError)")
            let counts = try CLIContractTests.summary(outcome.standardOutput)
            #expect(counts.done == 0 && counts.failed == 2 && counts.cacheHits == 0, "\(counts)")
        }

        /// `--concurrency N` bounds downloads: with every response held by the server, N
        /// requests arrive; each one released lets one more in, and no more than that, also
        /// when the URLs name two hosts.
        @Test(arguments: [1, 2, 3])
        func concurrencyBoundsTheDownloadsInFlight(limit: Int) async throws {
            let server = try LoopbackServer()
            defer { server.stop() }
            let jpeg = try CLIContractTests.corpusData("hopper.jpg")
            let paths = (0..<5).map { "/c\($0).jpg" }
            for path in paths {
                server.serve(path: path, data: jpeg, contentType: "image/jpeg")
                server.hold(path)
            }
            let output = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            // Two host names for one server: the bound is on all downloads, not per host.
            let port = try #require(server.baseURL.port)
            let urls = paths.enumerated().map { $0.offset % 2 == 0 ? server.url(for: $0.element).absoluteString : "http://localhost:\(port)\($0.element)" }
            let arguments = ["thumbnail"] + urls + ["--size", "16", "--output", output.path, "--no-cache", "--concurrency", String(limit)]
            let run = Task { try await CLIContractTests.run(arguments) }
            var released: Set<String> = []
            while released.count < paths.count {
                // A download starts only when another has ended: arrivals ≤ N + responses released.
                let expected = min(limit + released.count, paths.count)
                try await server.waitUntil { $0.totalRequests >= expected }
                let statistics = server.statistics
                #expect(statistics.totalRequests <= limit + released.count, "\(statistics.totalRequests) arrived, \(released.count) released, limit \(limit)")
                #expect(statistics.heldRequests <= limit, "\(statistics.heldRequests) held, limit \(limit)")
                let next = try #require(paths.first { statistics.requests(for: $0) > 0 && !released.contains($0) })
                released.insert(next)
                server.release(next)
            }
            let outcome = try await run.value
            #expect(outcome.status == 0, "\(outcome.standardError)")
            #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 5, failed: 0, networkRequests: 5, cacheHits: 0))
        }
    }
}
