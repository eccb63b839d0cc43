// libFuzzer entry point: the PNG row reader (ISA-L's inflate, Sources/CLumenShim/
// lumen_png_rows.c) differentially against libspng on the same bytes. Not part of the package:
// built by scripts/fuzz.sh with `-sanitize=fuzzer,address`.
//
// ASan finds crashes; this target finds a wrong image. For 8-bit non-interlaced RGB and RGBA
// the decoder reads the image data with ISA-L, and must give exactly what libspng gives with
// the reader switched off (as Tests/LumenImagingTests/PNGFastRowsTests.swift requires): the
// same pixels, or the same error, at full size and at two reduced sizes (rows reduced while
// they stream). Anything else traps, with both outcomes in the message. Chunk CRCs are
// recomputed first (see fixingPNGChecksums), or nearly every mutation would stop at libspng's
// first CRC check.
@testable import LumenImaging
import Foundation

private let pixelLimit = 4_000_000

private func decode(_ png: Data, size: Int?, fast: Bool) -> Result<Bitmap, ImagingError> {
    var options = DecodeOptions(size: size.map { .maxPixelSize($0) }, maximumPixelCount: pixelLimit)
    options.allowsFastPNGRows = fast
    do throws(ImagingError) {
        return .success(try ImageDecoder.decode(png, options: options).bitmap)
    } catch {
        return .failure(error)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func lumenFuzzOneInput(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let raw = start.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    // Only what the reader can take (IHDR: bit depth 8, colour type 2 or 6, not interlaced)
    // is worth two decodes; the rest is the decoder target's.
    guard raw.count > 29, raw[24] == 8, raw[25] == 2 || raw[25] == 6, raw[28] == 0 else { return 0 }
    let png = Data(fixingPNGChecksums(raw))
    for size in [nil, 64, 7] as [Int?] {
        let fast = decode(png, size: size, fast: true), reference = decode(png, size: size, fast: false)
        let context = "at \(size.map { "maxPixelSize \($0)" } ?? "full size")"
        switch (fast, reference) {
        case let (.success(a), .success(b)):
            require(a == b, "\(context): ISA-L's rows give other pixels than libspng's (\(a) vs \(b))")
        case let (.failure(a), .failure(b)):
            require(a == b, "\(context): the reader's error \(a), libspng's \(b)")
        default:
            fatalError("\(context): with the reader \(fast), with libspng \(reference)")
        }
    }
    return 0
}
