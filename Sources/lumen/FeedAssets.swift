import Foundation
import Lumen
import LumenTestSupport

/// One image of the demo feed: what it is, how it is drawn and where it is served.
struct FeedAsset: Sendable {
    enum Kind: String, Sendable { case photo, avatar }

    var kind: Kind
    var name: String
    var width: Int
    var height: Int
    var format: EncodingFormat
    var seed: UInt64

    /// The path it is served at on the loopback server.
    var path: String { "/\(kind.rawValue)s/\(name)" }
    var megapixels: Double { Double(width * height) / 1e6 }
    var contentType: String {
        switch format {
        case .png: "image/png"
        case .webp: "image/webp"
        default: "image/jpeg"
        }
    }
}

/// The demo's images: deterministic (a seed per image), generated once per machine with
/// ``SyntheticPhotos`` and kept in a versioned temporary directory, so that reruns start at
/// once. Bump ``directoryName`` whenever the catalogue or the generator changes.
///
/// The full catalogue has 60 photos — 56 of 0.5–3 MP (mostly JPEG, every seventh WebP, one
/// PNG) and four 12 MP JPEGs — and 6 round avatars of 256×256 (PNG with alpha). The quick
/// catalogue (tests) has 26 photos of at most 1.9 MP and 4 avatars.
enum FeedAssets {
    static let directoryName = "lumen-feed-v2"

    /// Photo sizes cycled through by the catalogue (0.5–3 MP, landscape, portrait, square).
    private static let photoSizes: [(Int, Int)] = [
        (1200, 800), (800, 1200), (1024, 768), (1600, 1067), (900, 600), (1000, 1000),
        (1500, 1000), (768, 1024), (2000, 1500), (1280, 853), (1067, 1600), (1800, 1200),
    ]
    private static let quickSizes: [(Int, Int)] = [(640, 480), (480, 640), (800, 600), (600, 600), (720, 480)]

    /// The photos and avatars, in catalogue order (photo `i` is `photos[i]`).
    static func catalogue(quick: Bool) -> (photos: [FeedAsset], avatars: [FeedAsset]) {
        var photos: [FeedAsset] = []
        let photoCount = quick ? 26 : 60
        // 12 MP photos sit at fixed catalogue positions so the trace can find them.
        let largeIndices: Set<Int> = quick ? [5] : [7, 21, 36, 50]
        var regular = 0
        for i in 0..<photoCount {
            let (w, h): (Int, Int)
            var format = EncodingFormat.jpeg(quality: 85)
            if largeIndices.contains(i) {
                (w, h) = quick ? (1600, 1200) : (i % 2 == 0 ? (4000, 3000) : (3000, 4000))
            } else {
                (w, h) = quick ? quickSizes[regular % quickSizes.count] : photoSizes[regular % photoSizes.count]
                if regular % 7 == 3 { format = .webp(quality: 80) }
                if !quick && regular == 10 { format = .png }
                regular += 1
            }
            let ext = switch format {
            case .png: "png"
            case .webp: "webp"
            default: "jpg"
            }
            let prefix = quick ? "q" : "p"
            photos.append(FeedAsset(kind: .photo, name: String(format: "%@%02d-%dx%d.%@", prefix, i, w, h, ext),
                                    width: w, height: h, format: format, seed: UInt64(1000 + i)))
        }
        let avatars = (0..<(quick ? 4 : 6)).map { i in
            FeedAsset(kind: .avatar, name: String(format: "a%02d.png", i), width: 256, height: 256,
                      format: .png, seed: UInt64(500 + i))
        }
        return (photos, avatars)
    }

    /// Where the generated files live.
    static var directory: URL {
        FileManager.default.temporaryDirectory.appendingPathComponent(directoryName)
    }

    /// The file of `asset` in ``directory``.
    static func file(for asset: FeedAsset) -> URL {
        directory.appendingPathComponent(asset.kind.rawValue + "-" + asset.name)
    }

    /// Generates the files that are missing (on every core) and returns how many it made and
    /// how long that took; `willGenerate` is told how many are missing before the work starts.
    static func prepare(_ assets: [FeedAsset], willGenerate: (Int) -> Void = { _ in }) throws -> (generated: Int, seconds: Double) {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let missing = assets.filter { !FileManager.default.fileExists(atPath: file(for: $0).path) }
            .sorted { $0.width * $0.height > $1.width * $1.height } // biggest first: better balance
        if !missing.isEmpty { willGenerate(missing.count) }
        let start = monotonicSeconds()
        let failures = FailureList()
        parallelForEach(missing.count, concurrency: ProcessInfo.processInfo.activeProcessorCount) { i in
            let asset = missing[i]
            do {
                var bitmap = SyntheticPhotos.photo(width: asset.width, height: asset.height, seed: asset.seed)
                if asset.kind == .avatar { bitmap = circleCropped(bitmap) }
                try bitmap.encode(as: asset.format).write(to: file(for: asset), options: .atomic)
            } catch {
                failures.append("\(asset.name): \(error)")
            }
        }
        if let first = failures.all.first { throw BenchError("generating images failed: \(first)") }
        return (missing.count, monotonicSeconds() - start)
    }

    /// `image` with transparent corners: an RGBA disc, anti-aliased over one pixel.
    static func circleCropped(_ image: Bitmap) -> Bitmap {
        let w = image.width, h = image.height, c = image.format.channels
        let cx = Double(w) / 2, cy = Double(h) / 2, r = Double(min(w, h)) / 2
        var pixels = [UInt8](repeating: 0, count: w * h * 4)
        for y in 0..<h {
            for x in 0..<w {
                let dx = Double(x) + 0.5 - cx, dy = Double(y) + 0.5 - cy
                let coverage = min(1, max(0, r - (dx * dx + dy * dy).squareRoot()))
                let s = (y * w + x) * c, d = (y * w + x) * 4
                pixels[d] = image.pixels[s]; pixels[d + 1] = image.pixels[s + 1]; pixels[d + 2] = image.pixels[s + 2]
                pixels[d + 3] = UInt8(coverage * 255)
            }
        }
        return Bitmap(width: w, height: h, format: .rgba8, pixels: pixels)
    }

    /// Serves every asset on `server` with an ETag and a year-long `Cache-Control`, and returns
    /// the total size in bytes.
    @discardableResult
    static func serve(_ assets: [FeedAsset], on server: LoopbackServer) throws -> Int {
        var total = 0
        for asset in assets {
            let data = try Data(contentsOf: file(for: asset))
            total += data.count
            server.serve(path: asset.path, data: data, contentType: asset.contentType,
                         etag: "\"\(asset.seed)-\(data.count)\"", cacheControl: "public, max-age=31536000")
        }
        return total
    }
}

/// Error messages collected from worker threads.
final class FailureList: @unchecked Sendable { // guarded by `lock`
    private let lock = NSLock()
    private var items: [String] = []
    func append(_ message: String) { lock.withLock { items.append(message) } }
    var all: [String] { lock.withLock { items } }
}
