import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Testing

/// The server's HTTP contract, end to end: a loopback origin, `ImageServer` on an ephemeral
/// port, and a raw HTTP client.
@Suite(.timeLimit(.minutes(2)))
struct ServeContractTests {
    @Test func aThumbnailIsServedWithItsHeaders() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/p.jpg", width: 640, height: 480)
        let response = try await f.get(f.path("w:200,h:200", "/p.jpg"))
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "image/jpeg")
        #expect(response.header("Content-Length") == "\(response.body.count)")
        #expect(response.header("Cache-Control") == "public, max-age=86400")
        let etag = try #require(response.header("ETag"))
        #expect(etag.hasPrefix("\"") && !etag.hasPrefix("W/"))
        let image = try TestImages.decode(response.body)
        #expect(image.width == 200 && image.height == 150) // contain: fits inside the box

        // Again: from memory, nothing decoded or encoded.
        let before = f.server.metrics
        let again = try await f.get(f.path("w:200,h:200", "/p.jpg"))
        #expect(again.body == response.body)
        let after = f.server.metrics
        #expect(after.decodes == before.decodes && after.encodes == before.encodes)
        #expect(after.resultMemoryHits == before.resultMemoryHits + 1)

        // 304 for a matching If-None-Match; HEAD has the headers and no body.
        let notModified = try await f.get(f.path("w:200,h:200", "/p.jpg"), headers: ["If-None-Match": etag])
        #expect(notModified.status == 304)
        #expect(notModified.body.isEmpty)
        #expect(notModified.header("ETag") == etag)
        let head = try await f.get(f.path("w:200,h:200", "/p.jpg"), method: "HEAD")
        #expect(head.status == 200)
        #expect(head.body.isEmpty)
        #expect(head.header("Content-Length") == "\(response.body.count)")
        #expect(f.origin.requestCount(for: "/p.jpg") == 1)
    }

    @Test func coverFillsTheBoxAndFormatsFollowOptions() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/p.jpg", width: 640, height: 480)
        let cover = try await f.get(f.path("w:100,h:100,fit:cover", "/p.jpg"))
        let coverImage = try TestImages.decode(cover.body)
        #expect(coverImage.width == 100 && coverImage.height == 100)
        let png = try await f.get(f.path("w:64,f:png", "/p.jpg"))
        #expect(png.header("Content-Type") == "image/png")
        #expect(ImageFormat(sniffing: png.body) == .png)
        let webp = try await f.get(f.path("w:64,f:webp,q:50", "/p.jpg"))
        #expect(ImageFormat(sniffing: webp.body) == .webp)
        // Never larger than the source unless upscale:1.
        let big = try TestImages.decode(try await f.get(f.path("w:1000", "/p.jpg")).body)
        #expect(big.width == 640)
        let upscaled = try TestImages.decode(try await f.get(f.path("w:1000,upscale:1", "/p.jpg")).body)
        #expect(upscaled.width == 1000)
        // A circle has alpha: served as PNG without f.
        let circle = try await f.get(f.path("w:64,h:64,fit:cover,circle:1", "/p.jpg"))
        #expect(circle.header("Content-Type") == "image/png")
        let circleImage = try TestImages.decode(circle.body)
        #expect(circleImage.format.hasAlpha && circleImage.rgba(x: 0, y: 0).a == 0)
        // A PNG source stays PNG; b64 sources work too.
        f.origin.serve(path: "/a.png", data: try TestImages.png(width: 90, height: 60, alpha: true), contentType: "image/png")
        let fromPNG = try await f.get(f.path("w:45", source: f.origin.url(for: "/a.png").absoluteString, base64: true))
        #expect(fromPNG.status == 200)
        #expect(fromPNG.header("Content-Type") == "image/png")
        #expect(try TestImages.decode(fromPNG.body).width == 45)
    }

    /// An animated GIF asked for as WebP is served as an animated WebP of its frames at the
    /// asked size; as JPEG or PNG, its first frame; a still GIF as WebP stays a still WebP.
    @Test func anAnimatedGIFServedAsWebPStaysAnimated() async throws {
        let f = try ServerFixture()
        let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/corpus/real-world")
        let gif = try Data(contentsOf: corpus.appendingPathComponent("chi.gif")) // 320×240, 31 frames of 0.1 s
        f.origin.serve(path: "/chi.gif", data: gif, contentType: "image/gif")
        let webp = try await f.get(f.path("w:80,f:webp", "/chi.gif"))
        #expect(webp.status == 200 && webp.header("Content-Type") == "image/webp")
        let info = try ImageDecoder.info(for: webp.body)
        #expect(info.format == .webp && info.frameCount > 1 && info.width == 80 && info.height == 60)
        let frames = try ImageDecoder.decodeFrames(webp.body)
        #expect(abs(frames.reduce(0) { $0 + $1.duration } - 3.1) < 0.01) // the GIF's whole timeline
        #expect(f.server.metrics.animatedResults == 1)
        let jpeg = try await f.get(f.path("w:80,f:jpeg", "/chi.gif"))
        let jpegInfo = try ImageDecoder.info(for: jpeg.body)
        #expect(jpeg.header("Content-Type") == "image/jpeg" && jpegInfo.frameCount == 1)
        let png = try await f.get(f.path("w:80", "/chi.gif")) // no f: a GIF has no encoder, so PNG or JPEG
        let pngInfo = try ImageDecoder.info(for: png.body)
        #expect(pngInfo.frameCount == 1)
        #expect(f.server.metrics.animatedResults == 1)
        // A still GIF as WebP is one frame.
        f.origin.serve(path: "/still.gif", data: try Data(contentsOf: corpus.appendingPathComponent("hopper.gif")), contentType: "image/gif")
        let still = try await f.get(f.path("w:64,f:webp", "/still.gif"))
        let stillInfo = try ImageDecoder.info(for: still.body)
        #expect(still.status == 200 && stillInfo.frameCount == 1)
        #expect(f.server.metrics.animatedResults == 1)
    }

    /// A source's password and query never reach a log line, and with `--log-format json`
    /// every line is a JSON object: the access log and the diagnostics alike (a stranger found
    /// "fetch failed for GET http://user:password@…" lines in both formats).
    @Test(arguments: [ImageServer.Configuration.LogFormat.text, .json])
    func logLinesCarryNoSecretsAndJSONStaysJSON(format: ImageServer.Configuration.LogFormat) async throws {
        let lines = LogLines()
        let f = try ServerFixture {
            $0.logFormat = format
            $0.logger = { lines.append($0) }
            $0.accessLog = { lines.append($0) }
        }
        var source = URLComponents(url: f.origin.url(for: "/missing.jpg"), resolvingAgainstBaseURL: false)!
        source.user = "alice"
        source.password = "pa55word"
        source.query = "token=t0k3n"
        let response = try await f.get(f.signer.path(options: "w:50", source: source.string!))
        #expect(response.status == 404)
        let logged = lines.all
        #expect(logged.count >= 2, "\(logged)") // the access line and the failed fetch
        #expect(logged.contains { $0.contains("fetch failed") }, "\(logged)")
        #expect(!logged.contains { $0.contains("decode failed") }, "\(logged)") // logged once, where it failed
        for line in logged {
            #expect(!line.contains("pa55word") && !line.contains("t0k3n") && !line.contains("alice"), "\(line)")
            if format == .json {
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object != nil, "not one JSON object: \(line)")
            }
        }
    }

    /// `--allow-host` holds for redirects too: an allowed host that redirects to another host
    /// is refused (403) before anything is asked of that host; a redirect within allowed hosts
    /// is followed (a stranger's run found the first served).
    @Test func aRedirectToAHostNotAllowedIsRefused() async throws {
        let f = try ServerFixture { $0.allowedHosts = ["localhost"] }
        f.serveJPEG("/p.jpg", width: 64, height: 48)
        let port = f.origin.baseURL.port!
        f.origin.redirect(path: "/away", to: "http://127.0.0.1:\(port)/p.jpg")
        f.origin.redirect(path: "/within", to: "http://localhost:\(port)/p.jpg")
        let direct = try await f.get(f.signer.path(options: "w:32", source: "http://127.0.0.1:\(port)/p.jpg"))
        #expect(direct.status == 403)
        let away = try await f.get(f.signer.path(options: "w:32", source: "http://localhost:\(port)/away"))
        #expect(away.status == 403, "\(String(decoding: away.body, as: UTF8.self))")
        #expect(f.origin.requestCount(for: "/p.jpg") == 0)
        let within = try await f.get(f.signer.path(options: "w:32", source: "http://localhost:\(port)/within"))
        #expect(within.status == 200)
        #expect(f.origin.requestCount(for: "/p.jpg") == 1)
    }

    @Test func autoFormatFollowsAcceptAndVaries() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/p.jpg")
        let webp = try await f.get(f.path("w:64,f:auto", "/p.jpg"), headers: ["Accept": "image/webp,image/*"])
        #expect(webp.header("Content-Type") == "image/webp")
        #expect(webp.header("Vary") == "Accept")
        let jpeg = try await f.get(f.path("w:64,f:auto", "/p.jpg"), headers: ["Accept": "image/*"])
        #expect(jpeg.header("Content-Type") == "image/jpeg")
        #expect(jpeg.header("Vary") == "Accept")
        let plain = try await f.get(f.path("w:64", "/p.jpg"))
        #expect(plain.header("Vary") == nil)
    }

    @Test func optionsInAnyOrderAreOneFetchAndOneEntry() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/p.jpg")
        let a = try await f.get(f.path("w:120,h:90,q:70", "/p.jpg"))
        let b = try await f.get(f.path("q:70,h:90,w:120", "/p.jpg"))
        let c = try await f.get(f.path("h:45,w:60,dpr:2,q:70", "/p.jpg"))
        #expect(a.status == 200 && a.body == b.body && b.body == c.body)
        #expect(f.origin.requestCount(for: "/p.jpg") == 1)
        let metrics = f.server.metrics
        #expect(metrics.encodes == 1)
        #expect(metrics.resultMemoryHits == 2)
    }

    @Test func signatures() async throws {
        let f = try ServerFixture { c in
            c.signers.append(try! URLSigner(keyHex: "0badc0de", saltHex: "00"))
        }
        f.serveJPEG("/p.jpg")
        let good = f.path("w:32", "/p.jpg")
        #expect(try await f.get(good).status == 200)
        // The other pair of a rotation is accepted too.
        let other = try URLSigner(keyHex: "0badc0de", saltHex: "00").path(options: "w:32", source: f.origin.url(for: "/p.jpg").absoluteString)
        #expect(try await f.get(other).status == 200)
        // Tampered options, a tampered signature, a foreign key, and unsigned: 403.
        #expect(try await f.get(good.replacingOccurrences(of: "/w:32/", with: "/w:33/")).status == 403)
        var tampered = Array(good)
        tampered[3] = tampered[3] == "A" ? "B" : "A"
        #expect(try await f.get(String(tampered)).status == 403)
        let foreign = try URLSigner(keyHex: "abcd", saltHex: "").path(options: "w:32", source: f.origin.url(for: "/p.jpg").absoluteString)
        #expect(try await f.get(foreign).status == 403)
        #expect(try await f.get(URLSigner.unsignedPath(options: "w:32", source: f.origin.url(for: "/p.jpg").absoluteString)).status == 403)
    }

    @Test func unsignedNeedsAllowUnsigned() async throws {
        var configuration = ImageServer.Configuration()
        configuration.port = 0
        #expect(throws: ServerError.self) { try ImageServer(configuration: configuration) }
        let f = try ServerFixture(signed: false)
        f.serveJPEG("/p.jpg")
        #expect(try await f.get(URLSigner.unsignedPath(options: "w:32", source: f.origin.url(for: "/p.jpg").absoluteString)).status == 200)
        #expect(try await f.get(f.path("w:32", "/p.jpg")).status == 403) // a signature where _ is expected
    }

    @Test func eachErrorStatusHasItsReason() async throws {
        let f = try ServerFixture { c in
            c.maximumSourceBytes = 100_000
            c.maximumSourcePixels = 1_000_000
            c.allowedHosts = ["127.0.0.1"]
            c.sourceTimeout = 1
        }
        f.serveJPEG("/p.jpg")
        f.origin.serve(path: "/big.bin", data: Data(repeating: 7, count: 200_000), contentType: "image/jpeg")
        f.serveJPEG("/huge.jpg", width: 1200, height: 1000)
        f.origin.serve(path: "/text.txt", data: Data("hello, not an image".utf8), contentType: "text/plain")
        // A JPEG cut short in its header: recognisably JPEG, not decodable.
        let corrupt = try TestImages.jpeg(width: 64, height: 64).prefix(120)
        f.origin.serve(path: "/corrupt.jpg", data: corrupt, contentType: "image/jpeg")
        f.origin.serve(path: "/fail.jpg", data: Data())
        f.origin.respond(path: "/fail.jpg", status: 500)
        f.serveJPEG("/slow.jpg")
        f.origin.hold("/slow.jpg")
        defer { f.origin.releaseAll() }

        let cases: [(String, String, Int)] = [
            ("bad options", f.path("w:abc", "/p.jpg"), 400),
            ("bad path", "/only-one-segment", 400),
            ("bad signature", "/AAAA/w:32/plain/" + "x", 403),
            ("host not allowed", f.path("w:32", source: "http://localhost:\(f.origin.port)/p.jpg"), 403),
            ("scheme not allowed", f.path("w:32", source: "file:///etc/passwd"), 403),
            ("local without root", f.path("w:32", source: "local:///p.jpg"), 403),
            ("not found", f.path("w:32", "/missing.jpg"), 404),
            ("over max-source-bytes", f.path("w:32", "/big.bin"), 413),
            ("over max-source-pixels", f.path("w:32", "/huge.jpg"), 413),
            ("path over 8 KB", "/" + String(repeating: "a", count: 8300), 414),
            ("not an image", f.path("w:32", "/text.txt"), 415),
            ("corrupt", f.path("w:32", "/corrupt.jpg"), 422),
            ("origin 500", f.path("w:32", "/fail.jpg"), 502),
            ("origin slower than the timeout", f.path("w:32", "/slow.jpg"), 504),
        ]
        for (name, path, status) in cases {
            let response = try await f.get(path)
            #expect(response.status == status, "\(name): \(response.status) \(String(decoding: response.body, as: UTF8.self))")
            if response.status >= 400 {
                #expect(response.header("Content-Type")?.hasPrefix("text/plain") == true, "\(name)")
                let reason = String(decoding: response.body, as: UTF8.self)
                #expect(reason.hasSuffix("\n") && reason.split(separator: "\n").count == 1 && reason.count > 5, "\(name): \(reason)")
            }
        }
        let post = try RawHTTP.exchange(port: f.port, raw: "POST \(f.path("w:32", "/p.jpg")) HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        #expect(post.status == 405)
        #expect(post.header("Allow") == "GET, HEAD")
        // Failures are not cached: the origin fixed, the same path is served.
        f.serveJPEG("/fail.jpg")
        #expect(try await f.get(f.path("w:32", "/fail.jpg")).status == 200)
        #expect(f.server.metrics.responses[422] == 1)
    }

    @Test func healthAndMetrics() async throws {
        let f = try ServerFixture()
        f.serveJPEG("/p.jpg")
        let health = try await f.get("/health")
        #expect(health.status == 200 && String(decoding: health.body, as: UTF8.self) == "ok\n")
        _ = try await f.get(f.path("w:50", "/p.jpg"))
        _ = try await f.get(f.path("w:50", "/p.jpg"))
        let text = String(decoding: try await f.get("/metrics").body, as: UTF8.self)
        for name in ["lumen_http_responses_total{status=\"200\"} 3", "lumen_http_request_duration_seconds_bucket{le=\"+Inf\"}",
                     "lumen_origin_fetches_total 1", "lumen_origin_bytes_total", "lumen_joins_total{stage=\"fetch\"}",
                     "lumen_cache_hits_total{layer=\"result_memory\"} 1", "lumen_requests_in_flight", "lumen_requests_queued",
                     "lumen_decode_seconds_total", "process_resident_memory_bytes"] {
            #expect(text.contains(name), "\(name) missing")
        }
    }

    @Test func metricsCanHaveAListenerOfTheirOwn() async throws {
        let f = try ServerFixture { c in c.metricsListen = ("127.0.0.1", 0) }
        let port = try #require(f.server.metricsPort)
        #expect(try await RawHTTP.fetch(port: port, "/metrics").status == 200)
        #expect(try await f.get("/metrics").status == 400) // not served on the main listener
    }

    @Test func localSourcesComeFromTheRoot() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-root-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        try TestImages.jpeg(width: 300, height: 200).write(to: root.appendingPathComponent("a.jpg"))
        let f = try ServerFixture { c in c.localRoot = root }
        let ok = try await f.get(f.path("w:30", source: "local:///a.jpg"))
        #expect(ok.status == 200)
        #expect(try TestImages.decode(ok.body).width == 30)
        #expect(try await f.get(f.path("w:30", source: "local:///../a.jpg")).status == 403)
        #expect(try await f.get(f.path("w:30", source: "local:///missing.jpg")).status == 404)
        #expect(try await f.get(f.path("w:30", source: "file://" + root.appendingPathComponent("a.jpg").path)).status == 403)
    }
}
