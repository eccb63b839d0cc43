import CSpng

/// PNG's scaled decode: libspng has no reduced-size output, so a thumbnail of a PNG is made
/// while the rows stream out (of ISA-L's row reader or of libspng) — every `factor` × `factor` block of source pixels is
/// averaged into one pixel (premultiplied by alpha when there is alpha, so transparent pixels
/// lend no colour) and only one source row is ever held. The resampler then takes the reduced
/// image, at least the size the pre-shrink rule asks for, to the exact size, as it does after
/// JPEG's DCT scaling.
///
/// Interlaced (Adam7) files deliver their rows pass by pass, so they still decode at full size.
extension PNGCodec {
    /// The largest reduction a block average may make: keeps the sums of a block (at most
    /// 128² × 255 × 255 for premultiplied colour) inside `UInt32`.
    static let maximumReduction = 128

    /// The whole factor the image is reduced by while decoding: the largest that keeps both
    /// sides at least `minimum` (stored orientation), 1 when there is no minimum.
    static func reductionFactor(width: Int, height: Int, minimum: PixelSize?) -> Int {
        guard let minimum, minimum.width > 0, minimum.height > 0 else { return 1 }
        return max(1, min(width / minimum.width, height / minimum.height, maximumReduction))
    }

    /// Decodes the image in `ctx` (header parsed, tRNS set) with libspng, row by row, into a
    /// bitmap reduced by `factor` (see ``decodeReduced(width:height:format:factor:nextRow:)``).
    static func decodeReducedWithLibspng(
        _ ctx: OpaquePointer, width: Int, height: Int, format: PixelFormat, factor: Int,
        data: UnsafeRawBufferPointer, cancellation: DecodeCancellation? = nil
    ) throws(ImagingError) -> Bitmap {
        let spngFormat = Int32(format == .rgba8 ? SPNG_FMT_RGBA8.rawValue : SPNG_FMT_RGB8.rawValue)
        let flags = Int32(SPNG_DECODE_TRNS.rawValue) | Int32(SPNG_DECODE_PROGRESSIVE.rawValue)
        try check(spng_decode_image(ctx, nil, 0, spngFormat, flags), data: data)
        let rowLength = width * format.channels
        let row = UnsafeMutablePointer<UInt8>.allocate(capacity: rowLength)
        defer { row.deallocate() }
        var status: Int32 = 0
        var y = 0
        let bitmap = decodeReduced(width: width, height: height, format: format, factor: factor) {
            if cancellation?.isCancelled == true { return nil }
            status = spng_decode_row(ctx, row, rowLength)
            y += 1
            // The call that delivers the last row says so; any other non-zero is an error.
            if status == Int32(SPNG_EOI.rawValue) && y == height { status = 0 }
            return status == 0 ? UnsafePointer(row) : nil
        }
        try check(status, data: data)
        try cancellation?.check()
        guard let bitmap else { throw .corrupted(reason: "libspng ended the image data early") }
        return bitmap
    }

    /// The image whose rows `nextRow` gives (top to bottom; `nil` when it cannot), reduced by
    /// `factor` on both sides (the last block of a row or column may be narrower); `nil` when
    /// a row was missing.
    static func decodeReduced(
        width: Int, height: Int, format: PixelFormat, factor k: Int, nextRow: () -> UnsafePointer<UInt8>?
    ) -> Bitmap? {
        let channels = format.channels
        let outWidth = (width + k - 1) / k, outHeight = (height + k - 1) / k
        // Per output pixel: colour sums (premultiplied with alpha) and, with alpha, the alpha sum.
        let colourSums = UnsafeMutablePointer<UInt32>.allocate(capacity: outWidth * 3)
        let alphaSums = UnsafeMutablePointer<UInt32>.allocate(capacity: outWidth)
        defer { colourSums.deallocate(); alphaSums.deallocate() }

        var complete = true
        let bitmap = Bitmap(width: outWidth, height: outHeight, format: format) { out in
            for oy in 0..<outHeight {
                colourSums.initialize(repeating: 0, count: outWidth * 3)
                alphaSums.initialize(repeating: 0, count: outWidth)
                let rows = min(k, height - oy * k)
                for _ in 0..<rows {
                    guard let row = nextRow() else { complete = false; break }
                    if channels == 4 {
                        accumulatePremultiplied(row, width: width, factor: k, colour: colourSums, alpha: alphaSums)
                    } else {
                        accumulate(row, width: width, factor: k, into: colourSums)
                    }
                }
                if !complete {
                    // Fill the rest so the buffer is initialised; the bitmap is discarded.
                    UnsafeMutableBufferPointer(rebasing: out[(oy * outWidth * channels)...]).initialize(repeating: 0)
                    return
                }
                let o = out.baseAddress! + oy * outWidth * channels
                for ox in 0..<outWidth {
                    let count = UInt32(min(k, width - ox * k) * rows)
                    if channels == 4 {
                        let a = alphaSums[ox]
                        for c in 0..<3 {
                            o[ox * 4 + c] = a == 0 ? 0 : UInt8((colourSums[ox * 3 + c] + a / 2) / a)
                        }
                        o[ox * 4 + 3] = UInt8((a + count / 2) / count)
                    } else {
                        for c in 0..<3 { o[ox * 3 + c] = UInt8((colourSums[ox * 3 + c] + count / 2) / count) }
                    }
                }
            }
        }
        return complete ? bitmap : nil
    }

    /// Adds each source pixel of an RGB row to its block's colour sums.
    private static func accumulate(_ row: UnsafePointer<UInt8>, width: Int, factor k: Int, into sums: UnsafeMutablePointer<UInt32>) {
        var x = 0, block = 0
        while x < width {
            let end = min(x + k, width)
            var r: UInt32 = 0, g: UInt32 = 0, b: UInt32 = 0
            while x < end {
                let p = row + x * 3
                r &+= UInt32(p[0]); g &+= UInt32(p[1]); b &+= UInt32(p[2])
                x += 1
            }
            let s = sums + block * 3
            s[0] &+= r; s[1] &+= g; s[2] &+= b
            block += 1
        }
    }

    /// Adds each source pixel of an RGBA row to its block's sums: colour times alpha, and alpha.
    private static func accumulatePremultiplied(
        _ row: UnsafePointer<UInt8>, width: Int, factor k: Int,
        colour: UnsafeMutablePointer<UInt32>, alpha: UnsafeMutablePointer<UInt32>
    ) {
        var x = 0, block = 0
        while x < width {
            let end = min(x + k, width)
            var r: UInt32 = 0, g: UInt32 = 0, b: UInt32 = 0, a: UInt32 = 0
            while x < end {
                let p = row + x * 4
                let pa = UInt32(p[3])
                r &+= UInt32(p[0]) &* pa; g &+= UInt32(p[1]) &* pa; b &+= UInt32(p[2]) &* pa
                a &+= pa
                x += 1
            }
            let s = colour + block * 3
            s[0] &+= r; s[1] &+= g; s[2] &+= b
            alpha[block] &+= a
            block += 1
        }
    }
}
