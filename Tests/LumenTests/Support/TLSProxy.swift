#if os(Linux)
import CLumenTLSProxy
import Foundation
import LumenTestSupport

/// A TLS front for a ``LoopbackServer`` (see `CLumenTLSProxy`): `https://127.0.0.1:<port>`
/// with a self-signed certificate for 127.0.0.1, relayed to the server decrypted. Clients
/// that do not trust ``certificateFile`` refuse it.
final class TLSProxy: @unchecked Sendable {
    // @unchecked: `proxy` is set once; the C side locks what its threads share.
    private let proxy: OpaquePointer
    /// The proxy's certificate (PEM): the certificate authority to trust for it.
    let certificateFile: URL
    let port: UInt16

    struct StartError: Error, CustomStringConvertible {
        var description: String
    }

    init(forwardingTo server: LoopbackServer) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        certificateFile = directory.appendingPathComponent("certificate.pem")
        var message = [CChar](repeating: 0, count: 256)
        guard let proxy = lumen_tls_proxy_start(server.port, certificateFile.path, &message, message.count) else {
            try? FileManager.default.removeItem(at: directory)
            throw StartError(description: String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        self.proxy = proxy
        port = lumen_tls_proxy_port(proxy)
    }

    deinit {
        lumen_tls_proxy_stop(proxy)
        try? FileManager.default.removeItem(at: certificateFile.deletingLastPathComponent())
    }

    /// `https://127.0.0.1:<port><path>`.
    func url(for path: String) -> URL { URL(string: "https://127.0.0.1:\(port)\(path)")! }

    /// Waits (10 s at most) until `count` TLS handshakes have failed — the client refused the
    /// certificate, say: the proxy hears of it only after the client gave up — and returns
    /// how many have.
    func waitForFailedHandshakes(_ count: Int) -> Int {
        lumen_tls_proxy_wait_for_failed_handshakes(proxy, count, 10_000)
    }
    /// Connections accepted.
    var connections: Int { lumen_tls_proxy_connections(proxy) }
}
#endif
