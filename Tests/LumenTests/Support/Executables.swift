import Foundation
import Testing

/// Runs the package's executables (built beside the test bundle) as child processes.
enum Executables {
    /// The built executable `name` (`.build/<triple>/debug/<name>`).
    static func url(_ name: String) throws -> URL {
        var starts: [URL] = []
        if let executable = Bundle.main.executableURL { starts.append(executable.deletingLastPathComponent()) }
        starts.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        var candidates: [URL] = []
        for start in starts {
            var dir = start.standardizedFileURL
            for _ in 0..<4 {
                candidates.append(dir.appendingPathComponent(name))
                dir = dir.deletingLastPathComponent()
            }
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(root.appendingPathComponent(".build/debug/\(name)"))
        let found = candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) }
        return try #require(found, "\(name) not found; looked at \(candidates.map(\.path))")
    }

    struct Outcome {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    /// Runs `name` with `arguments`, standard output and error going to `output` and `error`
    /// (standard input empty), and waits for its exit status without blocking a thread.
    /// `didStart` runs once the process has started (or failed to).
    static func exitStatus(
        of name: String, _ arguments: [String], output: FileHandle, error: FileHandle, didStart: () -> Void = {}
    ) async throws -> Int32 {
        let process = Process()
        process.executableURL = try url(name)
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = error
        process.standardInput = FileHandle.nullDevice
        return try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
            didStart()
        }
    }

    /// Runs `name` with `arguments` and waits for it without blocking a thread.
    static func run(_ name: String, _ arguments: [String]) async throws -> Outcome {
        // Output goes to files, not pipes: a child that fills a pipe nobody reads would block.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-exec-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let outURL = dir.appendingPathComponent("stdout"), errURL = dir.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
        let status = try await exitStatus(of: name, arguments, output: out, error: err)
        try out.close()
        try err.close()
        let stdout = try Data(contentsOf: outURL)
        let stderr = try Data(contentsOf: errURL)
        return Outcome(status: status, standardOutput: String(decoding: stdout, as: UTF8.self),
                       standardError: String(decoding: stderr, as: UTF8.self))
    }
}
