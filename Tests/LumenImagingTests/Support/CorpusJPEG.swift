import Foundation
@testable import LumenImaging

/// Helpers for the JPEG, EXIF and colour-profile suites: corpus access, pixel comparisons and
/// synthetic photo-like images.
enum CorpusJPEG {
    /// `../shared/corpus` relative to the package root.
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Support
        .deletingLastPathComponent()  // LumenImagingTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
        .appendingPathComponent("../shared/corpus").standardizedFileURL

    /// The bytes of a corpus file, e.g. `"real-world/hopper.jpg"`.
    static func data(_ path: String) throws -> Data {
        try Data(contentsOf: root.appendingPathComponent(path))
    }

    /// Mean absolute difference per channel sample (0–255) over R, G, B of two same-sized
    /// bitmaps; `.infinity` when the sizes differ.
    static func meanAbsoluteDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
        guard a.width == b.width, a.height == b.height else { return .infinity }
        let ca = a.format.channels, cb = b.format.channels
        var total = 0
        a.pixels.withUnsafeBufferPointer { pa in
            b.pixels.withUnsafeBufferPointer { pb in
                for i in 0..<a.pixelCount {
                    for k in 0..<3 { total += abs(Int(pa[i * ca + k]) - Int(pb[i * cb + k])) }
                }
            }
        }
        return Double(total) / Double(a.pixelCount * 3)
    }

    /// Mean and standard deviation of one channel.
    static func channelStatistics(_ image: Bitmap, channel: Int) -> (mean: Double, deviation: Double) {
        let c = image.format.channels
        var sum = 0.0, squares = 0.0
        image.pixels.withUnsafeBufferPointer { p in
            for i in 0..<image.pixelCount {
                let v = Double(p[i * c + channel])
                sum += v
                squares += v * v
            }
        }
        let n = Double(image.pixelCount)
        let mean = sum / n
        return (mean, (max(0, squares / n - mean * mean)).squareRoot())
    }

    /// A deterministic photo-like RGB image: smooth diagonal gradients, a soft disc and a
    /// little noise (so that JPEG has real work to do, as on a photo).
    static func photoLike(width: Int, height: Int, seed: UInt64 = 1) -> Bitmap {
        var rng = Random(seed: seed)
        let cx = Double(width) * 0.6, cy = Double(height) * 0.4, radius = Double(min(width, height)) * 0.3
        return Bitmap(width: width, height: height, format: .rgb8) { dst in
            for y in 0..<height {
                let fy = Double(y) / Double(height)
                for x in 0..<width {
                    let fx = Double(x) / Double(width)
                    let dx = Double(x) - cx, dy = Double(y) - cy
                    let disc = max(0, 1 - (dx * dx + dy * dy).squareRoot() / radius)
                    let noise = Int(rng.next() & 7) - 4
                    let r = 40 + 170 * fx + 40 * disc
                    let g = 60 + 120 * fy + 60 * disc
                    let b = 200 - 150 * (fx + fy) / 2
                    let i = (y * width + x) * 3
                    dst[i] = UInt8(clamping: Int(r) + noise)
                    dst[i + 1] = UInt8(clamping: Int(g) + noise)
                    dst[i + 2] = UInt8(clamping: Int(b) + noise)
                }
            }
        }
    }
}

extension CorpusJPEG {
    /// The test target's seeded generator (SplitMix64, `Support/CorpusPNG.swift`).
    typealias Random = SeededRandom
}

extension CorpusJPEG {
    /// `jpeg` with extra marker segments inserted right after its start-of-image marker.
    static func inserting(_ segments: [(marker: UInt8, payload: [UInt8])], into jpeg: Data) -> Data {
        var out = Data(jpeg.prefix(2))
        for (marker, payload) in segments {
            let length = payload.count + 2
            out.append(contentsOf: [0xFF, marker, UInt8(length >> 8), UInt8(length & 0xFF)])
            out.append(contentsOf: payload)
        }
        out.append(jpeg.dropFirst(2))
        return out
    }

    /// An APP1 payload "Exif\0\0" + a big- or little-endian TIFF block whose IFD0 holds only
    /// the orientation tag.
    static func exifPayload(orientation: Int, bigEndian: Bool = false) -> [UInt8] {
        Array("Exif".utf8) + [0, 0] + tiff(entries: [(0x0112, 3, 1, orientation)], bigEndian: bigEndian)
    }

    /// A TIFF block: header, IFD0 at offset 8 with `entries` (tag, type, count, value in the
    /// first bytes of the value field), and a zero next-IFD offset.
    static func tiff(entries: [(tag: Int, type: Int, count: Int, value: Int)], bigEndian: Bool = false) -> [UInt8] {
        func u16(_ v: Int) -> [UInt8] {
            bigEndian ? [UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] : [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF)]
        }
        func u32(_ v: Int) -> [UInt8] { bigEndian ? u16(v >> 16) + u16(v & 0xFFFF) : u16(v & 0xFFFF) + u16(v >> 16) }
        var out: [UInt8] = bigEndian ? [0x4D, 0x4D] : [0x49, 0x49]
        out += u16(42) + u32(8) + u16(entries.count)
        for e in entries { out += u16(e.tag) + u16(e.type) + u32(e.count) + u16(e.value) + [0, 0] }
        return out + u32(0)
    }

    /// The sRGB transfer function applied to a linear value in 0…1, scaled to 0…255 (the
    /// IEC 61966-2-1 formula, independent of lcms2).
    static func srgbEncoded(_ linear: Double) -> Double {
        let v = linear <= 0.0031308 ? 12.92 * linear : 1.055 * pow(linear, 1 / 2.4) - 0.055
        return v * 255
    }
}

/// Hand-built ICC v2 profiles for the colour-management tests.
enum CorpusICCProfile {
    /// D50-adapted XYZ of the sRGB primaries (as in the ICC's published sRGB profile).
    static let srgbRed = (0.4361, 0.2225, 0.0139)
    static let srgbGreen = (0.3851, 0.7169, 0.0971)
    static let srgbBlue = (0.1431, 0.0606, 0.7141)
    static let d50 = (0.9642, 1.0, 0.8249)

    /// A matrix/TRC RGB display profile with linear (gamma 1) curves and the given colorants.
    static func linearRGB(
        red: (Double, Double, Double) = srgbRed, green: (Double, Double, Double) = srgbGreen,
        blue: (Double, Double, Double) = srgbBlue
    ) -> [UInt8] {
        build(space: "RGB ", tags: [
            ("rXYZ", xyz(red)), ("gXYZ", xyz(green)), ("bXYZ", xyz(blue)),
            ("rTRC", linearCurve), ("gTRC", linearCurve), ("bTRC", linearCurve), ("wtpt", xyz(d50)),
        ])
    }

    /// A gray display profile with a linear (gamma 1) curve.
    static func linearGray() -> [UInt8] {
        build(space: "GRAY", tags: [("kTRC", linearCurve), ("wtpt", xyz(d50))])
    }

    /// A profile whose header claims `space` (e.g. "CMYK") but holds only a white point.
    static func claiming(space: String) -> [UInt8] {
        build(space: space, tags: [("wtpt", xyz(d50))])
    }

    private static let linearCurve: [UInt8] = Array("curv".utf8) + [0, 0, 0, 0] + be32(0)  // 0 entries: identity

    private static func be32(_ v: Int) -> [UInt8] {
        [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
    }

    private static func s15(_ v: Double) -> [UInt8] { be32(Int((v * 65536).rounded()) & 0xFFFF_FFFF) }

    private static func xyz(_ v: (Double, Double, Double)) -> [UInt8] {
        Array("XYZ ".utf8) + [0, 0, 0, 0] + s15(v.0) + s15(v.1) + s15(v.2)
    }

    private static func build(space: String, tags: [(String, [UInt8])]) -> [UInt8] {
        let tableSize = 4 + tags.count * 12
        var offset = 128 + tableSize
        var table = be32(tags.count)
        var body: [UInt8] = []
        for (signature, data) in tags {
            var padded = data
            while padded.count % 4 != 0 { padded.append(0) }
            table += Array(signature.utf8) + be32(offset) + be32(data.count)
            body += padded
            offset += padded.count
        }
        var header = [UInt8](repeating: 0, count: 128)
        func put(_ bytes: [UInt8], at i: Int) { header.replaceSubrange(i..<(i + bytes.count), with: bytes) }
        put(be32(offset), at: 0)
        put([0x02, 0x10, 0, 0], at: 8)  // version 2.1
        put(Array("mntr".utf8), at: 12)
        put(Array(space.utf8), at: 16)
        put(Array("XYZ ".utf8), at: 20)
        put(Array("acsp".utf8), at: 36)
        put(s15(d50.0) + s15(d50.1) + s15(d50.2), at: 68)
        return header + table + body
    }
}
