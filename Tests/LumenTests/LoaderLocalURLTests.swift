import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
@testable import Lumen
import LumenTestSupport

/// `DataLoader` with `file:` and `data:` URLs: read locally, never through the network.
@Suite(.timeLimit(.minutes(1)))
struct LoaderLocalURLTests {
    let loader = DataLoader()
    /// Watches that nothing reaches the network (the loopback server is the only host here).
    let server: LoopbackServer
    let directory: URL

    init() throws {
        server = try LoopbackServer()
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("lumen-loader-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    private func cleanUp() {
        try? FileManager.default.removeItem(at: directory)
        #expect(server.statistics.totalConnections == 0)
    }

    @Test(arguments: [0, 1, 128 * 1024, 128 * 1024 + 1, 700_001])
    func fileIsReadInChunks(size: Int) async throws {
        defer { cleanUp() }
        let body = LoaderTests.bytes(count: size, seed: UInt64(size))
        let url = directory.appendingPathComponent("photo.jpg")
        try body.write(to: url)
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: url), didReceive: sink.append)

        #expect(sink.data == body)
        // One call per started chunk of `fileChunkSize` bytes: progress is reported as it is read.
        #expect(sink.chunks == (size + DataLoader.fileChunkSize - 1) / DataLoader.fileChunkSize)
        #expect(response.expectedContentLength == Int64(size))
        #expect(response.mimeType == "image/jpeg")
        #expect(response.url == url)
        #expect(!(response is HTTPURLResponse))
    }

    @Test func localFilesCanBeTurnedOffForServersLoadingClientURLs() async throws {
        defer { cleanUp() }
        let url = directory.appendingPathComponent("secret.txt")
        try Data("private".utf8).write(to: url)
        let strict = DataLoader(allowsLocalFiles: false)
        let received = Chunks()
        let error = await #expect(throws: DataLoader.Error.self) {
            try await strict.loadData(for: URLRequest(url: url)) { chunk, _ in received.append(chunk) }
        }
        guard case .localFileAccessDenied(let denied)? = error else {
            Issue.record("expected .localFileAccessDenied, got \(String(describing: error))")
            return
        }
        #expect(denied == url)
        #expect(received.total == 0)
        // data: URLs carry their own bytes and still work.
        let response = try await strict.loadData(for: URLRequest(url: URL(string: "data:text/plain;base64,aGk=")!)) { chunk, _ in received.append(chunk) }
        #expect(received.total == 2 && response.expectedContentLength == 2)
    }

    @Test func missingFileIsTypedError() async throws {
        defer { cleanUp() }
        let url = directory.appendingPathComponent("nothing-here.png")
        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        guard case .fileNotFound(let missing)? = error else {
            Issue.record("expected .fileNotFound, got \(String(describing: error))")
            return
        }
        #expect(missing == url)
    }

    /// `file://host/path` names a file on another machine: refused, never read as the local
    /// file of the same path; `file://localhost/path` and `file:///path` are this machine's.
    @Test func aFileURLWithAnotherHostIsRefused() async throws {
        defer { cleanUp() }
        let file = directory.appendingPathComponent("here.png")
        try Data([1, 2, 3]).write(to: file)
        let remote = try #require(URL(string: "file://otherhost" + file.path))
        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: remote)) { _, _ in }
        }
        guard case .fileUnreadable(_, let reason)? = error else {
            Issue.record("expected .fileUnreadable, got \(String(describing: error))")
            return
        }
        #expect(reason.contains("otherhost"))
        for local in ["file://localhost" + file.path, "file://" + file.path] {
            let url = try #require(URL(string: local))
            let received = Mutex(Data())
            _ = try await loader.loadData(for: URLRequest(url: url)) { chunk, _ in received.withLock { $0.append(chunk) } }
            #expect(received.withLock { $0 } == Data([1, 2, 3]), "\(local)")
        }
    }

    @Test func directoryIsUnreadable() async throws {
        defer { cleanUp() }
        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: directory)) { _, _ in }
        }
        guard case .fileUnreadable? = error else {
            Issue.record("expected .fileUnreadable, got \(String(describing: error))")
            return
        }
    }

    /// A FIFO, a character device: no file to read an image from. Refused at once — opening
    /// a FIFO nobody writes to would otherwise wait for ever, and `/dev/zero` never ends.
    @Test(arguments: ["fifo", "/dev/zero"])
    func aFIFOOrADeviceIsUnreadable(path: String) async throws {
        defer { cleanUp() }
        var url = URL(fileURLWithPath: path)
        if path == "fifo" {
            url = directory.appendingPathComponent("photo.jpg")
            #expect(mkfifo(url.path, 0o600) == 0)
        }
        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        guard case .fileUnreadable(_, let reason)? = error else {
            Issue.record("expected .fileUnreadable, got \(String(describing: error))")
            return
        }
        #expect(reason == "not a regular file (a FIFO, socket or device)")
    }

    @Test func throwingFromDidReceiveStopsAFileRead() async throws {
        defer { cleanUp() }
        struct Stop: Error {}
        let url = directory.appendingPathComponent("big.bin")
        try Data(count: 1_000_000).write(to: url)
        let sink = ChunkSink()
        await #expect(throws: Stop.self) {
            try await loader.loadData(for: URLRequest(url: url)) { chunk, response in
                sink.append(chunk, response)
                throw Stop()
            }
        }
        #expect(sink.chunks == 1)
    }

    @Test func cancelledFileReadThrowsCancellation() async throws {
        defer { cleanUp() }
        let url = directory.appendingPathComponent("c.bin")
        try Data(count: 1_000_000).write(to: url)
        let sink = ChunkSink()
        let load = Task { [loader] in
            try await loader.loadData(for: URLRequest(url: url)) { chunk, response in
                sink.append(chunk, response)
                // Cancel from inside the first chunk: the next chunk is never read.
                withUnsafeCurrentTask { $0?.cancel() }
            }
        }
        await #expect(throws: CancellationError.self) { try await load.value }
        #expect(sink.chunks == 1)
    }

    @Test(arguments: [0, 1, 2, 3, 1000, 4099])
    func base64DataURL(size: Int) async throws {
        defer { cleanUp() }
        let body = LoaderTests.bytes(count: size, seed: 9)
        let url = try #require(URL(string: "data:image/png;base64," + body.base64EncodedString()))
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: url), didReceive: sink.append)
        #expect(sink.data == body)
        #expect(sink.chunks == (size == 0 ? 0 : 1))
        #expect(response.mimeType == "image/png")
        #expect(response.expectedContentLength == Int64(size))
    }

    @Test func percentEncodedDataURLCarriesAnyByte() async throws {
        defer { cleanUp() }
        let body = Data(0...255)
        let encoded = body.map { String(format: "%%%02X", $0) }.joined()
        let url = try #require(URL(string: "data:application/octet-stream," + encoded))
        let sink = ChunkSink()
        let response = try await loader.loadData(for: URLRequest(url: url), didReceive: sink.append)
        #expect(sink.data == body)
        #expect(response.mimeType == "application/octet-stream")
    }

    @Test func dataURLDefaultsAndParameters() throws {
        defer { cleanUp() }
        let plain = try DataLoader.decodeDataURL("data:,Hello%2C%20World%21")
        #expect(plain == .init(data: Data("Hello, World!".utf8), mimeType: "text/plain", charset: "US-ASCII"))

        let withCharset = try DataLoader.decodeDataURL("data:Text/HTML;charset=utf-8,%3Cb%3E")
        #expect(withCharset == .init(data: Data("<b>".utf8), mimeType: "text/html", charset: "utf-8"))

        // Base64 without padding, with whitespace, and with percent-escaped characters.
        let original = Data("any carnal pleas".utf8)
        var base64 = original.base64EncodedString()
        #expect(try DataLoader.decodeDataURL("data:;base64," + base64).data == original)
        base64 = base64.replacingOccurrences(of: "=", with: "")
        #expect(try DataLoader.decodeDataURL("data:;base64," + base64).data == original)
        let spaced = base64.enumerated().map { $0.offset % 4 == 3 ? "\($0.element)%20" : "\($0.element)" }.joined()
        #expect(try DataLoader.decodeDataURL("data:;base64," + spaced).data == original)

        // `URL(string:)` re-escapes a stray "%", so a bad escape only reaches the parser directly.
        #expect(throws: DataLoader.Error.self) { try DataLoader.decodeDataURL("data:,%G1") }
        #expect(throws: DataLoader.Error.self) { try DataLoader.decodeDataURL("data:,abc%4") }
    }

    @Test(arguments: [
        "data:image/png;base64",          // no comma
        "data:image/png;base64,!!!!",     // not base64
        "data:image/png;base64,QUJD%",    // truncated escape
        "data:notamimetype,abc",          // type without a slash
    ])
    func malformedDataURLIsTypedError(string: String) async throws {
        defer { cleanUp() }
        let url = try #require(URL(string: string))
        let error = await #expect(throws: DataLoader.Error.self) {
            try await loader.loadData(for: URLRequest(url: url)) { _, _ in }
        }
        guard case .invalidDataURL? = error else {
            Issue.record("expected .invalidDataURL, got \(String(describing: error))")
            return
        }
    }
}

/// Collects chunk sizes from a loader callback.
private final class Chunks: Sendable {
    private let bytes = Mutex<Int>(0)
    func append(_ data: Data) { bytes.withLock { $0 += data.count } }
    var total: Int { bytes.withLock { $0 } }
}
