import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// nginx in front of a fleet of `lumen serve` nodes, for tests and `lumen demo --fleet`: the
/// shipped `deploy/nginx/lumen.conf` with its listen port and node list replaced, run by a
/// master of its own from a temporary directory (nothing of the system's nginx is used).
public final class NginxFront: Sendable {
    public let port: Int
    public let directory: URL
    private let service: ServiceProcess

    /// Starts nginx; returns once its worker runs.
    /// - Parameters:
    ///   - template: the text of `deploy/nginx/lumen.conf`.
    ///   - nodes: the nodes' ports on 127.0.0.1.
    ///   - consistentHashing: `false` drops the `hash` line (nginx's round robin).
    public init(template: String, nodes: [Int], consistentHashing: Bool = true, port: Int? = nil) throws {
        self.port = port ?? ServiceProcess.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-nginx-\(UUID().uuidString)")
        let temporary = directory.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        // nginx's workers may run as another user (nobody, under a root master): they write
        // proxied bodies here.
        chmod(temporary.path, 0o777)
        let site = Self.site(template, listen: self.port, nodes: nodes, consistentHashing: consistentHashing)
        try site.write(to: directory.appendingPathComponent("lumen.conf"), atomically: true, encoding: .utf8)
        let main = """
            daemon off;
            worker_processes 1;
            pid \(directory.path)/nginx.pid;
            error_log stderr notice;
            events { worker_connections 1024; }
            http {
                access_log off;
                client_body_temp_path \(temporary.path)/body;
                proxy_temp_path \(temporary.path)/proxy;
                fastcgi_temp_path \(temporary.path)/fastcgi;
                uwsgi_temp_path \(temporary.path)/uwsgi;
                scgi_temp_path \(temporary.path)/scgi;
                include \(directory.path)/lumen.conf;
            }

            """
        let configuration = directory.appendingPathComponent("nginx.conf")
        try main.write(to: configuration, atomically: true, encoding: .utf8)
        service = try ServiceProcess("nginx", ["-p", directory.path, "-c", configuration.path, "-e", "stderr"])
        try service.waitForLine(containing: "start worker process")
    }

    /// The site configuration: `template` with its `listen` and upstream `server` lines
    /// replaced (the node lines' parameters kept), and without the `hash` line for round robin.
    public static func site(_ template: String, listen: Int, nodes: [Int], consistentHashing: Bool) -> String {
        var lines: [String] = []
        var nodesWritten = false
        for line in template.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            let indent = String(line.prefix(while: { $0 == " " }))
            if trimmed.hasPrefix("listen ") {
                lines.append("\(indent)listen 127.0.0.1:\(listen);")
            } else if trimmed.hasPrefix("server 127.0.0.1:") {
                guard !nodesWritten else { continue }
                nodesWritten = true
                let parameters = trimmed.split(separator: " ").dropFirst(2).joined(separator: " ")
                for node in nodes {
                    lines.append("\(indent)server 127.0.0.1:\(node) \(parameters)")
                }
            } else if trimmed.hasPrefix("hash ") && !consistentHashing {
                continue
            } else {
                lines.append(line)
            }
        }
        return lines.joined(separator: "\n")
    }

    /// Stops nginx (its master and workers) and removes its directory.
    public func stop() {
        service.stop(signal: SIGTERM)
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }
}
