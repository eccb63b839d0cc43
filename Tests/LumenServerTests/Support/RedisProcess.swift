import Foundation
import LumenTestSupport

enum TemporaryDirectory {
    static func make(_ name: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}

/// redis-server on 127.0.0.1 with no persistence, in a temporary directory.
final class RedisProcess: @unchecked Sendable { // started and stopped by one test
    let port: Int
    let directory: URL
    private var service: ServiceProcess?

    init() throws {
        port = ServiceProcess.freePort()
        directory = try TemporaryDirectory.make("redis")
        try start()
    }

    var url: String { "redis://127.0.0.1:\(port)" }

    func start() throws {
        let service = try ServiceProcess(
            "redis-server",
            ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", directory.path, "--logfile", ""])
        try service.waitForLine(containing: "Ready to accept connections")
        self.service = service
    }

    /// Freezes the server (SIGSTOP): it keeps its port and accepts connections, and answers
    /// nothing until ``thaw()``.
    func freeze() {
        if let service { kill(service.pid, SIGSTOP) }
    }

    func thaw() {
        if let service { kill(service.pid, SIGCONT) }
    }

    func stop() {
        thaw()
        service?.stop()
        service = nil
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
