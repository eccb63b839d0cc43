import Foundation
import Lumen
import LumenTestSupport
import Testing

/// The README's "A taste of the API", run as written (against a loopback server instead of
/// the internet), so the README cannot drift from the code.
@Suite(.timeLimit(.minutes(1)))
struct ReadmeExampleTests {
    @Test func theReadmeExampleRunsAsWritten() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let photo = Bitmap(width: 800, height: 600, format: .rgb8) { pixels in
            for i in pixels.indices { pixels[i] = UInt8(truncatingIfNeeded: i / 7) }
        }
        server.serve(path: "/avatar.jpg", data: try photo.encode(as: .jpeg(quality: 90)), contentType: "image/jpeg")
        let avatarURL = server.url(for: "/avatar.jpg")
        let cacheDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-readme-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: cacheDirectory) }

        // --- README example begins (only `directory:` added, to keep the test hermetic) ---
        var configuration = ImagePipeline.Configuration()
        configuration.dataCache = DataCache(name: "avatars", directory: cacheDirectory)  // original bytes on disk
        let pipeline = ImagePipeline(configuration: configuration)

        // Decoded at the size it is shown, never bigger; equivalent requests share the work.
        let request = ImageRequest(url: avatarURL, processors: [ImageProcessors.Circle()], thumbnail: .maxPixelSize(128))
        async let first = pipeline.image(for: request)
        async let second = pipeline.image(for: request)
        let (a, b) = try await (first, second)  // one download, one decode, one circle
        let again = try await pipeline.image(for: request)
        let png = try again.image.encode(as: .png)
        // --- README example ends ---

        // An 800×600 photo decoded at 128×96; the circle crops the centre square.
        #expect(a.image.width == 96 && a.image.height == 96 && a.image.format == .rgba8)
        #expect(b.image.width == 96)
        #expect(again.cacheType == .memory)
        #expect(try ImageDecoder.info(for: png).format == .png)
        #expect(pipeline.metrics.networkRequestsStarted == 1)
        #expect(pipeline.metrics.decode.started == 1)
        #expect(pipeline.metrics.process.started == 1)
        #expect(server.statistics.totalRequests == 1)
    }

    /// The README's encoding lines, as written: each format encodes and reads back; AVIF
    /// without libheif is `unsupportedFormat(.avif)`, as the README says.
    @Test func theReadmeEncodingLinesRunAsWritten() throws {
        let bitmap = Bitmap(width: 64, height: 48, format: .rgba8) { p in
            for i in p.indices { p[i] = UInt8(truncatingIfNeeded: i &* 13) }
        }
        // --- README encoding lines begin ---
        let jpeg = try bitmap.encode(as: .jpeg(quality: 85))
        let png = try bitmap.encode(as: .png)
        let webp = try bitmap.encode(as: .webp(quality: 80))
        // --- README encoding lines end (AVIF below, by build) ---
        for (data, format) in [(jpeg, ImageFormat.jpeg), (png, .png), (webp, .webp)] {
            let info = try ImageDecoder.info(for: data)
            #expect(info.format == format && info.width == 64 && info.height == 48)
        }
        #if LUMEN_HEIF
        _ = try bitmap.encode(as: .avif(quality: 60))
        #else
        #expect(throws: ImagingError.unsupportedFormat(.avif)) { try bitmap.encode(as: .avif(quality: 60)) }
        #endif
        #expect(throws: ImagingError.self) { try bitmap.encode(as: .jpeg(quality: 101)) }
    }

    /// The README's `Package.swift` snippet, written into a new package beside a link named
    /// `lumen` to this checkout: SwiftPM loads the graph (it checks every product name against
    /// the package it names) without an error.
    @Test func theReadmePackageManifestResolvesAgainstThisCheckout() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let manifest = try #require(Self.manifest(in: readme))
        #expect(manifest.contains(".package(path: \"../lumen\")"))
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-readme-package-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let consumer = dir.appendingPathComponent("Thumbnails")
        try FileManager.default.createDirectory(at: consumer.appendingPathComponent("Sources/Thumbnails"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: dir.appendingPathComponent("lumen"), withDestinationURL: root)
        try manifest.write(to: consumer.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        try "import Lumen\n".write(to: consumer.appendingPathComponent("Sources/Thumbnails/main.swift"), atomically: true, encoding: .utf8)

        let (status, output) = try await Self.swiftPackage(["show-dependencies"], in: consumer)
        #expect(status == 0, "\(output)")
        #expect(output.contains("lumen"), "\(output)")

        // The check can fail: a product the package does not have is an error.
        try manifest.replacingOccurrences(of: "\"LumenServer\"", with: "\"LumenServers\"")
            .write(to: consumer.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        let (badStatus, badOutput) = try await Self.swiftPackage(["show-dependencies"], in: consumer)
        #expect(badStatus != 0 && badOutput.contains("LumenServers"), "\(badOutput)")
    }

    /// The first ```swift block after "## Adding Lumen to a package".
    static func manifest(in readme: String) -> String? {
        guard let section = readme.range(of: "## Adding Lumen to a package"),
              let start = readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex),
              let end = readme.range(of: "```", range: start.upperBound..<readme.endIndex)
        else { return nil }
        return String(readme[start.upperBound..<end.lowerBound])
    }

    /// Runs `swift package ARGUMENTS` in `directory`; its status and combined output.
    static func swiftPackage(_ arguments: [String], in directory: URL) async throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swift", "package"] + arguments
        process.currentDirectoryURL = directory
        let log = directory.appendingPathComponent("swift-package.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
        }
        try handle.close()
        return (status, String(decoding: try Data(contentsOf: log), as: UTF8.self))
    }
}
