import Foundation
import Synchronization
@testable import Lumen

/// A clock the test moves by hand.
final class CacheTestClock: Sendable {
    private let current: Mutex<Date>

    init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        current = Mutex(start)
    }

    var now: Date { current.withLock { $0 } }

    func advance(by seconds: TimeInterval) {
        current.withLock { $0 += seconds }
    }

    var cacheClock: CacheClock {
        CacheClock { [self] in now }
    }
}

/// Collects what a callback reports, from any thread.
final class CacheTestRecorder<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func record(_ value: Value) { values.withLock { $0.append(value) } }

    var all: [Value] { values.withLock { $0 } }
}

/// A fresh directory under the system temporary directory, removed by `remove()`.
struct CacheTestDirectory: ~Copyable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("lumen-cache-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    var path: String { url.path }

    deinit {
        // Restore permissions first so a test that made it read-only cannot leak it.
        _ = try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: url.path)
        try? FileManager.default.removeItem(at: url)
    }
}

/// A decoded image of exactly `cost` bytes (a multiple of 4), filled with `fill`.
func cacheTestImage(cost: Int, fill: UInt8 = 0) -> ImageContainer {
    precondition(cost % 4 == 0 && cost > 0)
    return ImageContainer(image: Bitmap(width: cost / 4, height: 1, format: .rgba8, pixels: [UInt8](repeating: fill, count: cost)))
}

func cacheKey(_ id: String) -> ImageCacheKey { ImageCacheKey(imageID: id) }


/// The SHA-256 of `data` computed by the system's `sha256sum`, an implementation independent
/// of the one under test.
func cacheTestSHA256(_ data: Data) -> String? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["sha256sum"]
    let input = Pipe()
    let output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    do { try process.run() } catch { return nil }
    input.fileHandleForWriting.write(data)
    try? input.fileHandleForWriting.close()
    let result = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: result, as: UTF8.self).split(separator: " ").first.map(String.init)
}
