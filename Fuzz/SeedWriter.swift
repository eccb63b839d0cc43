// Writes the saved seeds of the image targets (Fuzz/seeds/decoder, jpeg-reduced, png-rows):
// small synthetic images, so that the repository holds no third-party files and
// `make fuzz-smoke` needs nothing outside it. Not part of the package: `scripts/fuzz.sh seeds`
// builds and runs it (a libFuzzer binary that does its work in LLVMFuzzerInitialize and exits).
import CTurboJPEG
import Foundation
import LumenImaging

/// Saturated cells, thin diagonal stripes and a gradient band: detail in luma and chroma.
private func pattern(width: Int, height: Int, alpha: Bool = false, seed: UInt32) -> Bitmap {
    var state = seed
    func next() -> UInt8 {
        state = state &* 1_103_515_245 &+ 12345
        return UInt8(truncatingIfNeeded: state >> 16)
    }
    let columns = (width + 4) / 5
    let cells = (0..<(columns * ((height + 6) / 7))).map { _ in (next(), next(), next()) }
    let channels = alpha ? 4 : 3
    return Bitmap(width: width, height: height, format: alpha ? .rgba8 : .rgb8) { dst in
        for y in 0..<height {
            for x in 0..<width {
                var (r, g, b) = cells[(y / 7) * columns + x / 5]
                if (x + 2 * y) % 11 < 2 { (r, g, b) = (255 - r, g, 255 - b) }
                if y < height / 4 { r = UInt8(x * 255 / max(width - 1, 1)) }
                let i = (y * width + x) * channels
                dst[i] = r; dst[i + 1] = g; dst[i + 2] = b
                if alpha { dst[i + 3] = UInt8((x * 37 + y * 11) & 0xFF) }
            }
        }
    }
}

/// A baseline JPEG by TurboJPEG with the given chroma subsampling (Lumen's encoder picks its own).
private func jpeg(_ bitmap: Bitmap, subsampling: TJSAMP, quality: Int32) -> Data {
    guard let handle = tjInitCompress() else { fatalError("tjInitCompress") }
    defer { tjDestroy(handle) }
    var buffer: UnsafeMutablePointer<UInt8>?
    var size: UInt = 0
    let status = bitmap.pixels.withUnsafeBufferPointer { src in
        tjCompress2(handle, src.baseAddress, Int32(bitmap.width), 0, Int32(bitmap.height), Int32(TJPF_RGB.rawValue),
                    &buffer, &size, Int32(subsampling.rawValue), quality, TJFLAG_ACCURATEDCT)
    }
    guard status == 0, let buffer else { fatalError("tjCompress2: \(String(cString: tjGetErrorStr2(handle)))") }
    defer { tjFree(buffer) }
    return Data(bytes: buffer, count: Int(size))
}

private func write(_ data: Data, _ path: String) {
    let url = URL(fileURLWithPath: path)
    try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    guard FileManager.default.createFile(atPath: path, contents: data) else { fatalError("cannot write \(path)") }
    print("wrote \(path) (\(data.count) bytes)")
}

@_cdecl("LLVMFuzzerInitialize")
public func lumenSeedWriterInitialize(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    guard let root = ProcessInfo.processInfo.environment["LUMEN_SEEDS"] else { fatalError("set LUMEN_SEEDS=Fuzz/seeds") }
    do {
        let jpegs: [(String, Int, Int, TJSAMP, Int32)] = [
            ("420-40x30", 40, 30, TJSAMP_420, 75), ("444-33x17", 33, 17, TJSAMP_444, 85),
            ("422-48x20", 48, 20, TJSAMP_422, 60), ("440-20x12", 20, 12, TJSAMP_440, 90),
            ("grey-25x41", 25, 41, TJSAMP_GRAY, 75), ("420-9x70", 9, 70, TJSAMP_420, 50),
        ]
        for (name, width, height, subsampling, quality) in jpegs {
            write(jpeg(pattern(width: width, height: height, seed: UInt32(width * height)), subsampling: subsampling, quality: quality),
                  "\(root)/jpeg-reduced/\(name).jpg")
        }
        write(try pattern(width: 23, height: 11, seed: 7).encode(as: .png), "\(root)/png-rows/rgb-23x11.png")
        write(try pattern(width: 9, height: 14, alpha: true, seed: 8).encode(as: .png), "\(root)/png-rows/rgba-9x14.png")
        write(try pattern(width: 30, height: 8, seed: 9).encode(as: .png), "\(root)/png-rows/rgb-30x8.png")

        write(jpeg(pattern(width: 40, height: 30, seed: 10), subsampling: TJSAMP_420, quality: 75), "\(root)/decoder/baseline.jpg")
        write(try pattern(width: 14, height: 6, seed: 11).encode(as: .jpeg(quality: 70, progressive: true)), "\(root)/decoder/progressive.jpg")
        write(try pattern(width: 9, height: 14, alpha: true, seed: 12).encode(as: .png), "\(root)/decoder/rgba.png")
        write(try pattern(width: 12, height: 9, seed: 13).encode(as: .webp(quality: 50)), "\(root)/decoder/lossy.webp")
        write(try pattern(width: 10, height: 10, alpha: true, seed: 14).encode(as: .webp(lossless: true)), "\(root)/decoder/lossless.webp")
    } catch {
        fatalError("encoding a seed: \(error)")
    }
    exit(0)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func lumenSeedWriterOneInput(_ start: UnsafeRawPointer?, _ count: Int) -> CInt { 0 }
