import Foundation
import LumenServer
import LumenTestSupport
import Testing

/// `lumen serve` and `lumen sign` as a user runs them.
@Suite(.timeLimit(.minutes(2)))
struct ServeCommandTests {
    static func lumen() throws -> URL {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let candidates = [
            Bundle.main.executableURL?.deletingLastPathComponent().appendingPathComponent("lumen"),
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("lumen"),
            root.appendingPathComponent(".build/debug/lumen"),
        ].compactMap { $0 }
        return try #require(candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) })
    }

    /// Runs `lumen` to the end; returns status, stdout, stderr.
    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (Int32, String, String) {
        let process = Process()
        process.executableURL = try lumen()
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LUMEN_") }.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let error = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self), String(decoding: error, as: UTF8.self))
    }

    /// Runs a shell command; returns status, stdout, stderr.
    static func shell(_ command: String) throws -> (Int32, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self), "")
    }

    @Test func signPrintsTheLibrarysPath() throws {
        let (status, output, _) = try Self.run(["sign", "--key", "736563726574", "--salt", "68656c6c6f", "w:256,h:256", "https://a.example/p.jpg"])
        #expect(status == 0)
        let expected = try URLSigner(keyHex: "736563726574", saltHex: "68656c6c6f").path(options: "w:256,h:256", source: "https://a.example/p.jpg")
        #expect(output == expected + "\n")
        let (b64Status, b64, _) = try Self.run(["sign", "--b64", "_", "https://a.example/p.jpg"], environment: ["LUMEN_KEY": "736563726574", "LUMEN_SALT": "68656c6c6f"])
        #expect(b64Status == 0 && b64.contains("/_/b64/"))
        #expect(try Self.run(["sign", "--key", "xyz", "--salt", "00", "_", "https://a.example/p.jpg"]).0 == 2)
        #expect(try Self.run(["sign", "_"]).0 == 2)
    }

    /// An unknown short option is named as thumbnail and sign name it (a stranger found
    /// "unexpected argument '-x'" here), and is a usage error.
    @Test func anUnknownShortOptionIsNamedAsEveryCommandNamesIt() throws {
        let (status, _, error) = try Self.run(["serve", "-x"])
        #expect(status == 2)
        #expect(error.contains("unknown option -x"), "\(error)")
        let (plainStatus, _, plain) = try Self.run(["serve", "stray"])
        #expect(plainStatus == 2 && plain.contains("unexpected argument 'stray'"), "\(plain)")
    }

    @Test func serveHelpListsEveryOptionWithItsVariableAndDefault() throws {
        let (status, output, _) = try Self.run(["serve", "--help"])
        #expect(status == 0)
        for name in ["listen", "key", "salt", "allow-unsigned", "allow-host", "allow-source-address", "local-root",
                     "max-output-side", "max-source-bytes", "max-source-pixels", "max-queue", "source-timeout",
                     "client-timeout", "max-connections", "drain-timeout", "max-age", "memory-cache", "cache",
                     "cache-size", "metrics-listen", "log-format"] {
            #expect(output.contains("--\(name)"), "--\(name) missing")
            #expect(output.contains("LUMEN_" + name.uppercased().replacingOccurrences(of: "-", with: "_")), "variable of --\(name) missing")
        }
        #expect(output.contains("default: 4096") && output.contains("default: 50000000") && output.contains("default: 256"))
    }

    @Test func serveRefusesToStartWithoutAKeyOrWithBadFlags() throws {
        let (status, _, error) = try Self.run(["serve", "--listen", "127.0.0.1:0"])
        #expect(status == 1)
        #expect(error.contains("--allow-unsigned"))
        #expect(try Self.run(["serve", "--bogus"]).0 == 2)
        #expect(try Self.run(["serve", "--max-queue", "many", "--allow-unsigned"]).0 == 2)
        #expect(try Self.run(["serve", "--key", "00"]).0 == 2) // a key without its salt
        let (keyStatus, _, keyError) = try Self.run(["serve", "--key", "zz", "--salt", "00"])
        #expect(keyStatus == 2 && !keyError.contains("zz\n"))
    }

    @Test func serveSaysWhenItIsReadyServesAndStopsOnSIGTERM() async throws {
        let origin = try LoopbackServer()
        defer { origin.stop() }
        origin.serve(path: "/p.jpg", data: try TestImages.jpeg(width: 200, height: 100), contentType: "image/jpeg")
        let process = Process()
        process.executableURL = try Self.lumen()
        process.arguments = ["serve", "--listen", "127.0.0.1:0", "--allow-source-address", "127.0.0.1/32", "--log-format", "json"]
        process.environment = ProcessInfo.processInfo.environment.merging([
            "LUMEN_KEY": "736563726574", "LUMEN_SALT": "68656c6c6f",
        ]) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        // The ready line, read as it is printed.
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        #expect(text.hasPrefix("listening on http://127.0.0.1:"))
        let port = try #require(Int(text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ":").last ?? ""))
        let source = origin.url(for: "/p.jpg").absoluteString
        let signer = try URLSigner(keyHex: "736563726574", saltHex: "68656c6c6f")
        let response = try await RawHTTP.fetch(port: port, signer.path(options: "w:50", source: source.replacingOccurrences(of: "http://", with: "http://user:hunter2@")))
        #expect(response.status == 200)
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let entry = try #require(log.split(separator: "\n").first { $0.hasPrefix("{") })
        let object = try #require(try JSONSerialization.jsonObject(with: Data(entry.utf8)) as? [String: Any])
        #expect(object["status"] as? Int == 200)
        #expect(!log.contains("hunter2") && !log.contains("736563726574"))
    }
}
