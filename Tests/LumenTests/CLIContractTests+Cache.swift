import Foundation
import Lumen
import LumenTestSupport
import Testing

// Nested in `CLIContractTests`, so `swift test --filter CLIContractTests` runs it.
extension CLIContractTests {
    /// `lumen thumbnail`'s disk cache: `--cache DIR`, the standard location by default,
    /// `--no-cache`, repeated runs, failures never cached, and a cache directory that cannot
    /// be used.
    @Suite(.timeLimit(.minutes(1)))
    struct ThumbnailCache {
        /// Regular files anywhere under `root`.
        static func files(under root: URL) -> [String] {
            let enumerator = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isRegularFileKey])
            return (enumerator?.allObjects as? [URL] ?? []).filter {
                (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true
            }.map(\.path)
        }

        /// A server with two images that may be cached for an hour.
        static func server() throws -> LoopbackServer {
            let server = try LoopbackServer()
            server.serve(path: "/one.jpg", data: try CLIContractTests.corpusData("hopper.jpg"), contentType: "image/jpeg", cacheControl: "max-age=3600")
            server.serve(path: "/two.png", data: try CLIContractTests.corpusData("transparent.png"), contentType: "image/png", cacheControl: "max-age=3600")
            return server
        }

        /// A second run with the same `--cache DIR` loads from the disk, not the network,
        /// whatever size, fit and format it asks for (the cache holds the downloaded bytes).
        @Test func aSecondRunIsServedFromTheCacheAtAnySizeAndFormat() async throws {
            let server = try Self.server()
            defer { server.stop() }
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let cache = root.appendingPathComponent("cache/nested").path  // made when missing
            let urls = ["/one.jpg", "/two.png"].map { server.url(for: $0).absoluteString }
            let first = try await CLIContractTests.run(["thumbnail"] + urls + urls + ["--size", "32", "--output", root.appendingPathComponent("a").path, "--cache", cache])
            #expect(first.status == 0, "\(first.standardError)")
            #expect(try CLIContractTests.summary(first.standardOutput) == Summary(done: 4, failed: 0, networkRequests: 2, cacheHits: 0))
            let second = try await CLIContractTests.run(
                ["thumbnail"] + urls + ["--size", "100", "--fill", "--format", "webp", "--output", root.appendingPathComponent("b").path, "--cache", cache])
            #expect(second.status == 0, "\(second.standardError)")
            #expect(try CLIContractTests.summary(second.standardOutput) == Summary(done: 2, failed: 0, networkRequests: 0, cacheHits: 2))
            #expect(server.statistics.totalRequests == 2)
            let info = try ImageDecoder.info(for: Data(contentsOf: root.appendingPathComponent("b/one.webp")))
            #expect(info.format == .webp && info.width == 100 && info.height == 100)
        }

        /// `--no-cache` neither reads a cache another run filled nor writes one; the next
        /// `--cache DIR` run still finds its entries.
        @Test func noCacheNeitherReadsNorWrites() async throws {
            let server = try Self.server()
            defer { server.stop() }
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let cache = root.appendingPathComponent("cache")
            let url = server.url(for: "/one.jpg").absoluteString
            let output = root.appendingPathComponent("out").path
            let filled = try await CLIContractTests.run(["thumbnail", url, "--size", "32", "--output", output, "--cache", cache.path])
            #expect(try CLIContractTests.summary(filled.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0))
            let entries = Self.files(under: cache)
            #expect(!entries.isEmpty)

            // With HOME and XDG_CACHE_HOME pointing into the test's directory: nothing is written there.
            let home = root.appendingPathComponent("home")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            let environment = ["HOME": home.path, "XDG_CACHE_HOME": home.appendingPathComponent(".cache").path]
            for _ in 0..<2 {
                let uncached = try await CLIContractTests.run(["thumbnail", url, "--size", "32", "--output", output, "--no-cache"], environment: environment)
                #expect(uncached.status == 0, "\(uncached.standardError)")
                #expect(try CLIContractTests.summary(uncached.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0))
            }
            #expect(server.requestCount(for: "/one.jpg") == 3)
            #expect(Self.files(under: home).isEmpty, "\(Self.files(under: home))")
            #expect(Set(Self.files(under: cache)) == Set(entries))

            let again = try await CLIContractTests.run(["thumbnail", url, "--size", "32", "--output", output, "--cache", cache.path])
            #expect(try CLIContractTests.summary(again.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 0, cacheHits: 1))
            #expect(server.requestCount(for: "/one.jpg") == 3)
        }

        /// Without `--cache` or `--no-cache` the cache is on, in the standard location (under
        /// `XDG_CACHE_HOME`, or `HOME`'s `.cache`): a second run is a cache hit.
        @Test func theCacheIsOnByDefaultInTheStandardLocation() async throws {
            let server = try Self.server()
            defer { server.stop() }
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let home = root.appendingPathComponent("home")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            let environment = ["HOME": home.path, "XDG_CACHE_HOME": home.appendingPathComponent(".cache").path]
            let arguments = ["thumbnail", server.url(for: "/one.jpg").absoluteString, "--size", "32", "--output", root.appendingPathComponent("out").path]
            let first = try await CLIContractTests.run(arguments, environment: environment)
            #expect(first.status == 0, "\(first.standardError)")
            #expect(try CLIContractTests.summary(first.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 1, cacheHits: 0))
            #expect(!Self.files(under: home.appendingPathComponent(".cache")).isEmpty)
            let second = try await CLIContractTests.run(arguments, environment: environment)
            #expect(try CLIContractTests.summary(second.standardOutput) == Summary(done: 1, failed: 0, networkRequests: 0, cacheHits: 1))
            #expect(server.requestCount(for: "/one.jpg") == 1)
        }

        /// A 404 and bytes that do not decode are never answered from the cache: every run
        /// asks the server again and fails again.
        @Test func failuresAreNeverCacheHits() async throws {
            let server = try Self.server()
            defer { server.stop() }
            server.serve(path: "/broken.png", data: try CLIContractTests.corpusData("broken.png"), contentType: "image/png", cacheControl: "max-age=3600")
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let inputs = ["/one.jpg", "/broken.png", "/missing.jpg"].map { server.url(for: $0).absoluteString }
            let arguments = ["thumbnail"] + inputs + ["--size", "32", "--output", root.appendingPathComponent("out").path, "--cache", root.appendingPathComponent("cache").path]
            let first = try await CLIContractTests.run(arguments)
            #expect(first.status == 1)
            #expect(try CLIContractTests.summary(first.standardOutput) == Summary(done: 1, failed: 2, networkRequests: 3, cacheHits: 0))
            let second = try await CLIContractTests.run(arguments)
            #expect(second.status == 1)
            #expect(try CLIContractTests.summary(second.standardOutput) == Summary(done: 1, failed: 2, networkRequests: 2, cacheHits: 1))
            #expect(server.requestCount(for: "/broken.png") == 2 && server.requestCount(for: "/missing.jpg") == 2 && server.requestCount(for: "/one.jpg") == 1)
            #expect(CLIContractTests.failureLines(for: inputs[1], in: second.standardError).count == 1, "\(second.standardError)")
        }

        /// A cache directory that cannot be used — a regular file, a path below one, a place
        /// nobody may create directories in — never stops the run or fails an input: exit 0,
        /// every thumbnail written, and the next run goes to the network (no false hit).
        @Test(arguments: ["file", "file/below", "/proc/lumen-contract-cache"])
        func anUnusableCacheDirectoryNeverFailsTheRun(cachePath: String) async throws {
            let server = try Self.server()
            defer { server.stop() }
            let root = try CLIContractTests.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            try Data("not a directory".utf8).write(to: root.appendingPathComponent("file"))
            let cache = cachePath.hasPrefix("/") ? cachePath : root.appendingPathComponent(cachePath).path
            let inputs = ["/one.jpg", "/two.png"].map { server.url(for: $0).absoluteString } + [CLIContractTests.corpus.appendingPathComponent("real-world/flower.jpg").path]
            let output = root.appendingPathComponent("out")
            for round in 1...2 {
                let outcome = try await CLIContractTests.run(["thumbnail"] + inputs + ["--size", "32", "--output", output.path, "--cache", cache])
                #expect(outcome.status == 0, "round \(round): \(outcome.standardError)")
                #expect(try CLIContractTests.summary(outcome.standardOutput) == Summary(done: 3, failed: 0, networkRequests: 2, cacheHits: 0), "round \(round)")
                for input in inputs { #expect(CLIContractTests.failureLines(for: input, in: outcome.standardError).isEmpty) }
                // Said once, not per input: the directory is refused before anything loads
                // (`cache: cannot create …`, `cannot use …`).
                let lines = outcome.standardError.split(separator: "\n").filter { $0.hasPrefix("lumen thumbnail: cache: ") }
                #expect(lines.count == 1, "round \(round): \(outcome.standardError)")
            }
            #expect(Set(try FileManager.default.contentsOfDirectory(atPath: output.path)) == ["one.jpeg", "two.jpeg", "flower.jpeg"])
            #expect(try Data(contentsOf: root.appendingPathComponent("file")) == Data("not a directory".utf8))
        }
    }
}
