// libFuzzer entry point: Lumen's reduced-scale JPEG decoder (`lumen_jpeg_decode_reduced`,
// 1/8 and 1/4) differentially against TurboJPEG's scaled decode of the same bytes. Not part
// of the package: built by scripts/fuzz.sh with `-sanitize=fuzzer,address`.
//
// ASan finds crashes; this target finds a wrong image. The reduced decoder may decline any
// input (it returns `nil` and TurboJPEG decodes as usual), so a decline is never a finding.
// When it gives a bitmap, TurboJPEG must decode the same bytes at the same scale to a complete
// image of the same size whose pixels are within the bounds the tests hold the two decoders to
// (Tests/LumenImagingTests/JPEGQuarterScaleTests.swift, JPEGEighthScaleTests.swift):
//   1/4: mean absolute difference < 0.06 (0.15 below 100 pixels), max ≤ 4;
//   1/8, greyscale, 4:4:4 and 4:2:0: mean < 0.25, max ≤ 3;
//   1/8, other subsampling (TurboJPEG takes that chroma from the DC term alone, so it is the
//   one further off): no further from the 8×8 means of the full-size decode than TurboJPEG's
//   1/8 decode is, plus 0.5, over the whole blocks the full decode did not clamp. (The tests
//   allow 0.05 on real photos; on damaged data the full decode's chroma upsampling, which
//   blends neighbouring blocks, moves the reference by about a level either way, while
//   chroma taken the wrong way is off by 0.4–4.7 on average.)
// Anything else traps, with both results in the message.
@testable import LumenImaging
import Foundation

private let pixelLimit = 4_000_000

/// How many inputs the reduced decoder took, and how many it declined (printed at exit, so
/// that a run shows the comparison was made, not just skipped).
nonisolated(unsafe) private var compared = 0
nonisolated(unsafe) private var declined = 0
nonisolated(unsafe) private var isExitHookInstalled = false

/// The components' sampling factors from the first SOF0/SOF1 segment, `nil` without one.
private func samplingFactors(_ bytes: [UInt8]) -> [(h: Int, v: Int)]? {
    var p = 2
    while p + 4 <= bytes.count {
        // Bytes between segments are skipped, as libjpeg and Lumen's decoder skip them.
        guard bytes[p] == 0xFF else { p += 1; continue }
        let marker = bytes[p + 1]
        if marker == 0xFF { p += 1; continue }
        let length = Int(bytes[p + 2]) << 8 | Int(bytes[p + 3])
        if marker == 0xC0 || marker == 0xC1 {
            guard p + 10 <= bytes.count else { return nil }
            let count = Int(bytes[p + 9])
            guard p + 10 + 3 * count <= bytes.count else { return nil }
            return (0..<count).map { i in
                let byte = bytes[p + 10 + 3 * i + 1]
                return (Int(byte >> 4), Int(byte & 0x0F))
            }
        }
        if marker == 0xDA || marker == 0xD9 { return nil }
        p += 2 + length
    }
    return nil
}

private func meanDifference(_ a: Bitmap, _ b: Bitmap) -> Double {
    var total = 0
    for (x, y) in zip(a.pixels, b.pixels) { total += abs(Int(x) - Int(y)) }
    return Double(total) / Double(max(a.pixels.count, 1))
}

private func maximumDifference(_ a: Bitmap, _ b: Bitmap) -> Int {
    var largest = 0
    for (x, y) in zip(a.pixels, b.pixels) { largest = max(largest, abs(Int(x) - Int(y))) }
    return largest
}

/// The mean absolute difference of two 1/8 decodes from the 8×8 block means of `full`, over
/// the whole blocks whose full-size pixels are all inside the sample range: where the full
/// decode clamped, the mean of its pixels is no longer the mean a reduced decode approximates,
/// and a block cut by the image's edge is decoded over its padding rows or columns too (which
/// an encoder fills with copies of the edge, damaged data with anything).
private func errorsFromBlockMeans(_ ours: Bitmap, _ theirs: Bitmap, _ full: Bitmap) -> (ours: Double, theirs: Double) {
    var totals = (0.0, 0.0), blocks = 0
    for by in 0..<ours.height {
        blocks: for bx in 0..<ours.width {
            let x1 = bx * 8 + 8, y1 = by * 8 + 8
            guard x1 <= full.width, y1 <= full.height else { continue }
            var sums = [0, 0, 0], count = 0
            for y in (by * 8)..<y1 {
                for x in (bx * 8)..<x1 {
                    for c in 0..<3 {
                        let v = full.pixels[(y * full.width + x) * 3 + c]
                        if v == 0 || v == 255 { continue blocks }
                        sums[c] += Int(v)
                    }
                    count += 1
                }
            }
            let o = (by * ours.width + bx) * 3
            for c in 0..<3 {
                let mean = Double(sums[c]) / Double(count)
                totals.0 += abs(mean - Double(ours.pixels[o + c]))
                totals.1 += abs(mean - Double(theirs.pixels[o + c]))
            }
            blocks += 1
        }
    }
    let samples = Double(max(blocks * 3, 1))
    return (totals.0 / samples, totals.1 / samples)
}

/// TurboJPEG's decode covering `minimumSize` (full size when `nil`): stored orientation, no ICC.
private func turbo(_ data: UnsafeRawBufferPointer, minimumSize: PixelSize?) -> Result<CodecOutput, ImagingError> {
    var options = DecodeOptions(maximumPixelCount: pixelLimit, convertsColorProfile: false)
    options.allowsReducedScaleDecoder = false
    do throws(ImagingError) {
        let header = try JPEGCodec.readHeader(data, options: options)
        return .success(try JPEGCodec.decode(data, header: header, minimumSize: minimumSize, options: options))
    } catch {
        return .failure(error)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func lumenFuzzOneInput(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    if !isExitHookInstalled {
        isExitHookInstalled = true
        atexit {
            FileHandle.standardError.write(Data("jpeg-reduced: \(compared) decodes compared with TurboJPEG's, \(declined) declined\n".utf8))
        }
    }
    let bytes = start.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    bytes.withUnsafeBytes { data in
        guard let markers = try? JPEGMarkers(walking: data, scanLimit: 100), let frame = markers.frame,
              frame.width > 0, frame.height > 0, frame.width * frame.height <= pixelLimit else { return }
        for denominator in [8, 4] {
            let width = (frame.width + denominator - 1) / denominator
            let height = (frame.height + denominator - 1) / denominator
            let reduced: Bitmap?
            do throws(ImagingError) {
                reduced = try JPEGCodec.decodeReduced(
                    data, markers: markers, info: (frame.width, frame.height, 0), denominator: denominator,
                    width: width, height: height)
            } catch {
                fatalError("the reduced decoder threw \(error) without a cancellation")
            }
            guard let ours = reduced else {
                declined += 1
                continue
            }
            compared += 1
            require(ours.width == width && ours.height == height && ours.format == .rgb8, "reduced decode gave \(ours)")
            let context = "\(frame.width)x\(frame.height)x\(frame.components) at 1/\(denominator)"
            let theirs: Bitmap
            switch turbo(data, minimumSize: PixelSize(width: width, height: height)) {
            case .failure(let error):
                fatalError("\(context): the reduced decoder gave an image, TurboJPEG refused it: \(error)")
            case .success(let output):
                require(!output.isPartial, "\(context): the reduced decoder gave an image, TurboJPEG only a partial one")
                theirs = output.bitmap
            }
            require(
                theirs.width == width && theirs.height == height,
                "\(context): TurboJPEG's scaled decode is \(theirs.width)x\(theirs.height), ours \(width)x\(height)")
            let mean = meanDifference(ours, theirs), largest = maximumDifference(ours, theirs)
            let factors = samplingFactors(bytes) ?? []
            let isUsualSampling = factors.count == 1
                || (factors.count == 3 && factors[1] == (1, 1) && factors[2] == (1, 1)
                    && (factors[0] == (1, 1) || factors[0] == (2, 2)))
            if denominator == 4 {
                let meanBound = ours.pixelCount >= 100 ? 0.06 : 0.15
                require(mean < meanBound && largest <= 4, "\(context): mean difference \(mean), max \(largest) from TurboJPEG's")
            } else if isUsualSampling {
                require(mean < 0.25 && largest <= 3, "\(context): mean difference \(mean), max \(largest) from TurboJPEG's")
            } else {
                guard case .success(let full) = turbo(data, minimumSize: nil), !full.isPartial else {
                    fatalError("\(context): TurboJPEG decodes at 1/8 but not at full size")
                }
                let (ourError, turboError) = errorsFromBlockMeans(ours, theirs, full.bitmap)
                require(
                    ourError <= turboError + 0.5,
                    "\(context), sampling \(factors): \(ourError) from the block means, TurboJPEG's \(turboError)"
                        + (ours.pixelCount <= 16 ? "; ours \(ours.pixels), TurboJPEG's \(theirs.pixels)" : ""))
            }
        }
    }
    return 0
}
