// libFuzzer entry point for LumenImaging's decoder. Not part of the package: built by
// scripts/fuzz.sh with `-sanitize=fuzzer,address` (see that script for how to run it).
//
// Every input goes through each public decoding entry point. The decoder uses typed throws,
// so an `ImagingError` is the only error that can come out; anything else (a trap, an ASan
// report, a leak, a timeout, an allocation over the RSS limit) is a finding. Outputs are
// checked for the invariants a caller relies on: the pixel buffer matches the bitmap's size,
// and a sized decode never exceeds the requested size.
//
// PNG inputs get their chunk CRCs recomputed before decoding: libspng rejects a bad CRC at
// once, so without this nearly every mutation would stop at the first chunk. Set
// LUMEN_FUZZ_DUMP=path to write the bytes actually decoded (for regression tests).
import Foundation
import LumenImaging

/// A limit small enough that decompression bombs are refused cheaply.
private let pixelLimit = 4_000_000

private func check(_ bitmap: Bitmap, maxSide: Int? = nil, exact: (Int, Int)? = nil) {
    precondition(bitmap.width > 0 && bitmap.height > 0, "empty bitmap \(bitmap)")
    precondition(
        bitmap.pixels.count == bitmap.width * bitmap.height * bitmap.format.channels,
        "pixel buffer does not match \(bitmap)")
    precondition(bitmap.width * bitmap.height <= pixelLimit, "bitmap over the pixel limit: \(bitmap)")
    if let maxSide {
        precondition(max(bitmap.width, bitmap.height) <= maxSide, "\(bitmap) exceeds maxPixelSize \(maxSide)")
    }
    if let exact {
        precondition(bitmap.width <= exact.0 && bitmap.height <= exact.1, "\(bitmap) exceeds \(exact)")
    }
}

private let border = ImageProcessors.Border(color: .white, width: 2)
private let processors: [any ImageProcessing] = [
    ImageProcessors.Circle(border: border),
    ImageProcessors.RoundedCorners(radius: 6, border: border),
    ImageProcessors.GaussianBlur(radius: 2),
    ImageProcessors.Grayscale(),
    ImageProcessors.Resize(size: (24, 24), contentMode: .aspectFill, crop: true, upscale: true),
    ImageProcessors.Crop(x: 3, y: -2, width: 10, height: 40),
]

private let dumpPath = ProcessInfo.processInfo.environment["LUMEN_FUZZ_DUMP"]

@_cdecl("LLVMFuzzerTestOneInput")
public func lumenFuzzOneInput(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let raw = start.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    let data = Data(fixingPNGChecksums(raw))
    if let dumpPath { _ = FileManager.default.createFile(atPath: dumpPath, contents: data) }

    let info: ImageInfo
    do {
        info = try ImageDecoder.info(for: data)
    } catch {
        _ = error.description  // typed: ImagingError
        return 0
    }
    precondition(info.width > 0 && info.height > 0, "info reports an empty image: \(info)")

    let full = DecodeOptions(maximumPixelCount: pixelLimit)
    if let image = try? ImageDecoder.decode(data, options: full) {
        check(image.bitmap)
        // A full-size decode of an upright image has the size `info` promised.
        precondition(
            image.bitmap.width == info.width && image.bitmap.height == info.height,
            "full decode \(image.bitmap) differs from info \(info.width)x\(info.height)")
    }

    let small = DecodeOptions(size: .maxPixelSize(64), maximumPixelCount: pixelLimit)
    if let image = try? ImageDecoder.decode(data, options: small) {
        check(image.bitmap, maxSide: 64)
        // Processors see whatever sizes and formats hostile images decode to.
        for processor in processors {
            do {
                check(try processor.process(image.bitmap))
            } catch let error as ImagingError {
                _ = error.description
            } catch {
                preconditionFailure("\(processor.identifier) threw a non-ImagingError: \(error)")
            }
        }
    }

    let fill = DecodeOptions(size: .size(width: 40, height: 24, contentMode: .aspectFill), maximumPixelCount: pixelLimit)
    if let image = try? ImageDecoder.decode(data, options: fill) {
        check(image.bitmap, exact: (40, 24))
    }

    // Fill with upscaling: extreme aspect ratios must not blow up the intermediate image.
    let upscale = DecodeOptions(
        size: .size(width: 48, height: 48, contentMode: .aspectFill), allowsUpscaling: true, maximumPixelCount: pixelLimit)
    if let image = try? ImageDecoder.decode(data, options: upscale) {
        check(image.bitmap, exact: (48, 48))
        precondition(image.bitmap.width == 48 && image.bitmap.height == 48, "upscaled fill gave \(image.bitmap)")
    }

    if let frames = try? ImageDecoder.decodeFrames(data, options: full) {
        precondition(!frames.isEmpty, "decodeFrames returned no frames")
        precondition(frames.count * info.width * info.height <= pixelLimit, "frames × area over the limit")
        for frame in frames {
            check(frame.bitmap)
            precondition(
                frame.bitmap.width == info.width && frame.bitmap.height == info.height,
                "frame \(frame.bitmap) is not the \(info.width)x\(info.height) canvas")
            precondition(frame.duration >= 0 && frame.duration.isFinite, "bad duration \(frame.duration)")
        }
    }
    return 0
}
