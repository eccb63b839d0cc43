import Foundation
import Lumen
import LumenServer
import LumenTestSupport
import Testing

/// An origin (the loopback test server) and a Lumen server in front of it, both on
/// 127.0.0.1 with ephemeral ports; the server may connect to 127.0.0.1 only.
final class ServerFixture: @unchecked Sendable { // set up once, then read only
    let origin: LoopbackServer
    let server: ImageServer
    let signer: URLSigner
    var port: Int { server.port }
    private let ownsOrigin: Bool

    static let keyHex = "736563726574"
    static let saltHex = "68656c6c6f"

    /// A server in front of `origin` (shared by several nodes of a fleet), or of an origin of
    /// its own.
    init(signed: Bool = true, origin: LoopbackServer? = nil,
         _ configure: (inout ImageServer.Configuration) -> Void = { _ in }) throws {
        ownsOrigin = origin == nil
        self.origin = try origin ?? LoopbackServer()
        signer = try URLSigner(keyHex: Self.keyHex, saltHex: Self.saltHex)
        var configuration = ImageServer.Configuration()
        configuration.port = 0
        configuration.workers = 2
        configuration.httpThreads = 2
        configuration.allowedSourceAddresses = [IPAddressRange("127.0.0.1/32")!]
        if signed { configuration.signers = [signer] } else { configuration.allowsUnsigned = true }
        configure(&configuration)
        server = try ImageServer(configuration: configuration)
    }

    deinit {
        server.stop()
        if ownsOrigin { origin.stop() }
    }

    /// The signed path for the origin's `originPath` with `options`.
    func path(_ options: String, _ originPath: String) -> String {
        signer.path(options: options, source: origin.url(for: originPath).absoluteString)
    }

    func path(_ options: String, source: String, base64: Bool = false) -> String {
        signer.path(options: options, source: source, base64: base64)
    }

    func get(_ path: String, method: String = "GET", headers: [String: String] = [:]) async throws -> RawResponse {
        try await RawHTTP.fetch(port: port, path, method: method, headers: headers)
    }

    /// Serves a photo-like JPEG of `width`×`height` at `path`.
    @discardableResult
    func serveJPEG(_ path: String, width: Int = 640, height: Int = 480) -> Data {
        let data = try! TestImages.jpeg(width: width, height: height)
        origin.serve(path: path, data: data, contentType: "image/jpeg")
        return data
    }
}

enum TestImages {
    /// A smooth gradient with some detail, so that encoders have something to do.
    static func bitmap(width: Int, height: Int, alpha: Bool = false) -> Bitmap {
        let channels = alpha ? 4 : 3
        var pixels = [UInt8](repeating: 0, count: width * height * channels)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * channels
                pixels[i] = UInt8(x * 255 / max(1, width - 1))
                pixels[i + 1] = UInt8(y * 255 / max(1, height - 1))
                pixels[i + 2] = UInt8((x ^ y) & 0xff)
                if alpha { pixels[i + 3] = x < width / 2 ? 255 : 128 }
            }
        }
        return Bitmap(width: width, height: height, format: alpha ? .rgba8 : .rgb8, pixels: pixels)
    }

    static func jpeg(width: Int, height: Int) throws -> Data {
        try bitmap(width: width, height: height).encode(as: .jpeg(quality: 90))
    }

    static func png(width: Int, height: Int, alpha: Bool) throws -> Data {
        try bitmap(width: width, height: height, alpha: alpha).encode(as: .png)
    }

    /// Decodes a response body (to check its size and that it is a whole image).
    static func decode(_ data: Data) throws -> Bitmap {
        let decoded = try ImageDecoder.decode(data)
        guard !decoded.isPartial else { throw ImagingError.truncated }
        return decoded.bitmap
    }
}

/// Waits, without sleeping, until `condition` holds (yielding between looks), for at most
/// `seconds`; records an issue when it never does.
func eventually(_ what: String, seconds: Double = 30, _ condition: () -> Bool) async {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() > deadline {
            Issue.record("timed out waiting until \(what)")
            return
        }
        await Task.yield()
    }
}
