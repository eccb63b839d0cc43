import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import Lumen
import LumenTestSupport

/// The HTTP loaders and redirects: followed within HTTP, refused to any other scheme (each
/// scenario runs against every ``LoaderKind``).
@Suite(.timeLimit(.minutes(1)))
struct LoaderRedirectTests {
    let server: LoopbackServer
    let loader = DataLoader()
    let image = LoaderTests.bytes(count: 5_000, seed: 11)

    init() throws {
        server = try LoopbackServer()
        server.serve(path: "/img.png", data: image, contentType: "image/png")
        // What a redirect to a local file would reach if it were taken as a path on this server.
        server.serve(path: "/etc/passwd", data: Data("root:x:0:0".utf8))
        server.serve(path: "/a:b.png", data: image, contentType: "image/png")
    }

    /// FoundationNetworking follows `Location: file:///etc/passwd` as `GET /etc/passwd` on the
    /// same server; the loader refuses it before any second request, with a typed error.
    @Test(arguments: LoaderKind.available, ["file:///etc/passwd", "FILE:///etc/passwd", "data:text/plain,root",
                                            "ftp://127.0.0.1/etc/passwd", "gopher://127.0.0.1/etc/passwd"])
    func aRedirectToAnotherSchemeIsRefused(kind: LoaderKind, location: String) async throws {
        let loader = kind.make()
        server.redirect(path: "/r", to: location)
        let sink = ChunkSink()

        let error = await #expect(throws: URLError.self) {
            _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/r")), didReceive: sink.append)
        }

        #expect(error?.code == .unsupportedURL)
        #expect(sink.data.isEmpty)
        #expect(server.statistics.totalRequests == 1)
        #expect(server.requestCount(for: "/etc/passwd") == 0)
    }

    /// Relative, scheme-relative and absolute HTTP locations are followed (a colon later in a
    /// path does not make it a scheme).
    @Test(arguments: LoaderKind.available, ["/img.png", "img.png", "/a:b.png", "http://127.0.0.1:PORT/img.png",
                                            "HTTP://127.0.0.1:PORT/img.png", "//127.0.0.1:PORT/img.png"])
    func aRedirectWithinHTTPIsFollowed(kind: LoaderKind, location: String) async throws {
        let loader = kind.make()
        let port = server.url(for: "/").port ?? 0
        server.redirect(path: "/r", to: location.replacingOccurrences(of: "PORT", with: String(port)), status: 301)
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/r")), didReceive: sink.append)

        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(sink.data == image)
        #expect(server.statistics.totalRequests == 2)
    }

    /// A relative `Location` is resolved against the URL that answered, as RFC 3986 says: in
    /// its directory, with dot segments removed (FoundationNetworking alone resolves it against
    /// the server's root: `img.png` from `/dir/sub/r` was `GET /img.png`, and `../img.png` was
    /// sent as `GET /../img.png`).
    @Test(arguments: LoaderKind.available, [
        ("img.png", "/dir/sub/img.png"), ("./img.png", "/dir/sub/img.png"), ("x/../img.png", "/dir/sub/img.png"),
        ("../img.png", "/dir/img.png"), ("../../dir/img.png", "/dir/img.png"), ("../../img.png", "/img.png"),
    ])
    func aRelativeRedirectIsResolvedAgainstTheRedirectingURL(kind: LoaderKind, redirect: (location: String, expectedPath: String)) async throws {
        let loader = kind.make()
        let (location, expectedPath) = redirect
        let images = ["/img.png": image, "/dir/img.png": LoaderTests.bytes(count: 4_000, seed: 12),
                      "/dir/sub/img.png": LoaderTests.bytes(count: 3_000, seed: 13)]
        for (path, data) in images { server.serve(path: path, data: data, contentType: "image/png") }
        server.redirect(path: "/dir/sub/r", to: location)
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/dir/sub/r")), didReceive: sink.append)

        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(response.url?.path == expectedPath)
        #expect(sink.data == images[expectedPath])
        #expect(server.requestCount(for: expectedPath) == 1)
        #expect(server.statistics.totalRequests == 2)
    }

    /// Each hop of a chain is resolved against the hop before it, not the first URL.
    @Test(arguments: LoaderKind.available)
    func eachHopOfARelativeChainIsResolvedAgainstThePreviousOne(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/a/img.png", data: image, contentType: "image/png")
        server.redirect(path: "/a/r1", to: "b/r2")
        server.redirect(path: "/a/b/r2", to: "../img.png", status: 307)
        let sink = ChunkSink()

        let response = try await loader.loadData(for: URLRequest(url: server.url(for: "/a/r1")), didReceive: sink.append)

        #expect(response.url?.path == "/a/img.png")
        #expect(sink.data == image)
        #expect(server.requestCount(for: "/a/b/r2") == 1)
        #expect(server.statistics.totalRequests == 3)
    }

    /// FoundationNetworking traps when a task is cancelled between asking its delegate about
    /// a redirect and handling the answer. Loads through a chain of redirects, cancelled after
    /// varying numbers of scheduler turns, hit that window; each ends as cancelled (or with
    /// the image, when it won), and the process lives.
    @Test(arguments: LoaderKind.available)
    func cancellingDuringRedirectsIsSafe(kind: LoaderKind) async throws {
        let loader = kind.make()
        server.serve(path: "/big.png", data: Data(count: 200_000), contentType: "image/png")
        for hop in 0..<8 { server.redirect(path: "/hop\(hop)", to: hop == 7 ? "/big.png" : "/hop\(hop + 1)") }
        var cancelled = 0
        for round in 0..<400 {
            let load = Task { [loader, server] in
                try await loader.loadData(for: URLRequest(url: server.url(for: "/hop0")), didReceive: { _, _ in })
            }
            for _ in 0..<(round % 40) { await Task.yield() }
            load.cancel()
            switch await load.result {
            case .success(let response): #expect((response as? HTTPURLResponse)?.statusCode == 200)
            case .failure(let error):
                #expect(error is CancellationError || (error as? URLError)?.code == .cancelled, "round \(round): \(error)")
                cancelled += 1
            }
        }
        #expect(cancelled > 0)
        // The loader still works.
        _ = try await loader.loadData(for: URLRequest(url: server.url(for: "/hop0"))) { _, _ in }
    }
}
