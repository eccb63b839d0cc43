import CLumenShim
import CSpng
import Foundation

/// PNG decoding and encoding with libspng.
///
/// The image data of the most common files — 8 bits per sample, not interlaced, truecolour
/// without tRNS or truecolour with alpha, IDATs followed by IEND — is read by ISA-L's inflate
/// and Lumen's unfilter (`lumen_png_rows.c`), about twice as fast as libspng with zlib. That
/// reader succeeds only on data libspng decodes to the same samples; on anything else it fails
/// and libspng decodes the file, so every error below is libspng's.
///
/// Every call creates its own `spng_ctx` and frees it before returning, so calls run
/// concurrently without sharing C state. Hostile input is bounded by libspng's own guards:
///
/// - Image limits: width and height are each capped at ``DecodeOptions/maximumPixelCount``
///   (the orchestrator checks the product from ``readHeader(_:options:)`` before decoding).
/// - Chunk limits: no ancillary chunk may inflate past ``maximumChunkSize`` and all stored
///   ancillary chunks together (text, ICC, EXIF, …) past ``chunkCacheLimit``. A file that hits
///   them is a metadata decompression bomb: it fails as ``ImagingError/corrupted(reason:)``
///   saying that its ancillary chunks exceed the metadata limit (not as `tooLarge`, which is
///   the pixel limit: the image itself may be 1×1). Such a file never decodes, whatever the
///   pixel limit.
/// - CRC: a checksum mismatch in any chunk, critical or ancillary, is an error (libspng's
///   default silently drops ancillary chunks with bad CRCs). The trailing chunks after the
///   image data are read too, so the last IDAT's CRC is checked; a file that simply ends
///   after complete image data (no IEND) is accepted, as browsers do.
///
/// Colour: output is 8-bit, `.rgb8` for colour types 0, 2, 3 without tRNS, `.rgba8` otherwise,
/// with tRNS applied (its colour masked to the bit depth, which the spec allows); 16-bit samples are reduced to 8 bits by libspng. The `gAMA` chunk is
/// **not** applied: the PngSuite reference pixels Lumen is tested against are the stored
/// samples, not gamma-corrected ones, and browsers only honour gAMA inconsistently. An `iCCP`
/// profile is converted to sRGB through ``ColorProfile`` when
/// ``DecodeOptions/convertsColorProfile`` is set. `eXIf` (before the image data) gives the
/// orientation. APNG files decode to their default image (the IDAT image) only.
enum PNGCodec: ImageCodec {
    /// The largest single ancillary chunk libspng keeps, inflated (ICC profiles, EXIF, text).
    static let maximumChunkSize = 4 << 20
    /// The most bytes of ancillary chunks libspng keeps for one image.
    static let chunkCacheLimit = 4 << 20

    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        try withDecoder(data, options: options) { ctx throws(ImagingError) in
            try header(ctx, data: data)
        }
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        try withDecoder(data, options: options) { ctx throws(ImagingError) in
            // Re-read the header in this context (chunks before IDAT are parsed here, bounded
            // by the chunk limits) rather than trusting the caller's copy for the buffer size.
            let info = try self.header(ctx, data: data)
            try maskTransparentColor(ctx, data: data)
            let format: PixelFormat = info.hasAlpha ? .rgba8 : .rgb8
            let factor = reductionFactor(width: info.width, height: info.height, minimum: minimumSize)
            var ihdr = spng_ihdr()
            try check(spng_get_ihdr(ctx, &ihdr), data: data)
            if factor > 1, ihdr.interlace_method == 0 {
                // The last block of a side that is not a multiple of the factor is partial.
                let extent = (width: Double(info.width) / Double(factor), height: Double(info.height) / Double(factor))
                let cancellation = options.cancellation
                if options.allowsFastPNGRows, let rows = openFastRows(ihdr, format: format, data: data) {
                    defer { lumen_png_rows_close(rows) }
                    if let reduced = decodeReduced(width: info.width, height: info.height, format: format, factor: factor,
                                                   nextRow: { cancellation?.isCancelled == true ? nil : lumen_png_rows_next(rows) }),
                       lumen_png_rows_finish(rows) == 0 {
                        return try finishDecode(ctx, reduced, options: options, data: data, extent: extent)
                    }
                    // A missing row: cancelled, or libspng decodes it instead.
                    try cancellation?.check()
                }
                let reduced = try decodeReducedWithLibspng(ctx, width: info.width, height: info.height, format: format, factor: factor,
                                                           data: data, cancellation: cancellation)
                return try finishDecode(ctx, reduced, options: options, data: data, extent: extent)
            }
            let spngFormat = Int32(format == .rgba8 ? SPNG_FMT_RGBA8.rawValue : SPNG_FMT_RGB8.rawValue)
            var length = 0
            try check(spng_decoded_image_size(ctx, spngFormat, &length), data: data)
            let (expected, overflow) = info.width.multipliedReportingOverflow(by: info.height * format.channels)
            guard !overflow, length == expected else {
                throw .corrupted(reason: "libspng wants \(length) bytes for a \(info.width)x\(info.height) image")
            }
            if options.allowsFastPNGRows, let rows = openFastRows(ihdr, format: format, data: data) {
                defer { lumen_png_rows_close(rows) }
                let rowLength = info.width * format.channels
                var complete = true
                let pixels = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
                    for y in 0..<info.height {
                        guard options.cancellation?.isCancelled != true, let row = lumen_png_rows_next(rows) else { complete = false; break }
                        (buffer.baseAddress! + y * rowLength).update(from: row, count: rowLength)
                    }
                    complete = complete && lumen_png_rows_finish(rows) == 0
                    initialized = complete ? length : 0
                }
                if complete {
                    return try finishDecode(ctx, Bitmap(width: info.width, height: info.height, format: format, pixels: pixels),
                                            options: options, data: data)
                }
            }
            // A missing row above was a cancellation or a reason to decode with libspng, whose
            // whole-image decode runs to its end: the last look at the cancellation.
            try options.cancellation?.check()
            var status: Int32 = 0
            let pixels = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
                status = spng_decode_image(ctx, buffer.baseAddress, length, spngFormat, Int32(SPNG_DECODE_TRNS.rawValue))
                initialized = status == 0 ? length : 0
            }
            try check(status, data: data)
            return try finishDecode(ctx, Bitmap(width: info.width, height: info.height, format: format, pixels: pixels),
                                    options: options, data: data)
        }
    }

    /// ISA-L's reader of the image's rows when the file is one it reads (8-bit, non-interlaced,
    /// samples already in `format`: truecolour without tRNS for `.rgb8`, truecolour with alpha
    /// for `.rgba8`), else `nil`. It gives exactly libspng's samples or fails, and on failure
    /// the caller decodes with libspng, so errors are always libspng's.
    private static func openFastRows(_ ihdr: spng_ihdr, format: PixelFormat, data: UnsafeRawBufferPointer) -> OpaquePointer? {
        guard ihdr.bit_depth == 8, ihdr.interlace_method == 0 else { return nil }
        let native: PixelFormat
        switch Int32(ihdr.color_type) {
        case Int32(SPNG_COLOR_TYPE_TRUECOLOR.rawValue): native = .rgb8
        case Int32(SPNG_COLOR_TYPE_TRUECOLOR_ALPHA.rawValue): native = .rgba8
        default: return nil
        }
        guard native == format, let base = data.baseAddress else { return nil }
        return lumen_png_rows_open(base.assumingMemoryBound(to: UInt8.self), data.count, ihdr.width, ihdr.height,
                                   UInt32(format.channels))
    }

    /// After the image data: reads what follows it (checks the last IDAT's CRC and the
    /// trailing chunks), then converts an `iCCP` profile to sRGB when asked.
    /// `extent`: the image's size in a reduced decode's pixels (see ``CodecOutput/extent``).
    private static func finishDecode(
        _ ctx: OpaquePointer, _ decoded: Bitmap, options: DecodeOptions, data: UnsafeRawBufferPointer,
        extent: (width: Double, height: Double)? = nil
    ) throws(ImagingError) -> CodecOutput {
        let trailing = spng_decode_chunks(ctx)
        if trailing != 0 && !isEndOfData(trailing) {
            try check(trailing, data: data)
        }
        var bitmap = decoded
        if options.convertsColorProfile {
            var iccp = spng_iccp()
            if spng_get_iccp(ctx, &iccp) == 0, let profile = iccp.profile, iccp.profile_len > 0 {
                bitmap = ColorProfile.convertToSRGB(bitmap, profile: UnsafeRawBufferPointer(start: profile, count: iccp.profile_len))
            }
        }
        return CodecOutput(bitmap: bitmap, extent: extent)
    }

    /// Resets the count behind ``libspngPeakBytes`` for the calling thread.
    static func resetLibspngPeakBytes() { lumen_spng_reset_peak() }

    /// The most bytes libspng (with zlib) held at once on the calling thread since the last
    /// reset: shows that hostile files are refused before their declared size is allocated.
    /// Pixel buffers are Lumen's and are not counted.
    static var libspngPeakBytes: Int { lumen_spng_peak_bytes() }

    // MARK: - Internals

    /// Runs `body` with a fresh, configured decoder context over `data`, always freeing it.
    private static func withDecoder<T>(
        _ data: UnsafeRawBufferPointer, options: DecodeOptions, _ body: (OpaquePointer) throws(ImagingError) -> T
    ) throws(ImagingError) -> T {
        guard let base = data.baseAddress, data.count > 0 else { throw .truncated }
        guard let ctx = lumen_spng_ctx_new(0) else { throw .corrupted(reason: "libspng could not create a context") }
        defer { spng_ctx_free(ctx) }
        let side = UInt32(clamping: min(max(options.maximumPixelCount, 1), Int(Int32.max)))
        let critical = Int32(SPNG_CRC_ERROR.rawValue)
        guard spng_set_image_limits(ctx, side, side) == 0,
              spng_set_chunk_limits(ctx, maximumChunkSize, chunkCacheLimit) == 0,
              spng_set_crc_action(ctx, critical, critical) == 0
        else { throw .corrupted(reason: "libspng refused Lumen's limits") }
        try check(spng_set_png_buffer(ctx, base, data.count), data: data)
        return try body(ctx)
    }

    /// Size, alpha and orientation; parses the chunks before IDAT, never pixel data.
    private static func header(_ ctx: OpaquePointer, data: UnsafeRawBufferPointer) throws(ImagingError) -> ImageHeader {
        var ihdr = spng_ihdr()
        try check(spng_get_ihdr(ctx, &ihdr), data: data)
        var trns = spng_trns()
        let trnsStatus = spng_get_trns(ctx, &trns)  // parses every chunk up to the first IDAT
        let hasTRNS: Bool
        switch trnsStatus {
        case 0: hasTRNS = true
        case Int32(SPNG_ECHUNKAVAIL.rawValue): hasTRNS = false
        default: try check(trnsStatus, data: data); hasTRNS = false
        }
        let colorType = Int32(ihdr.color_type)
        let hasAlphaChannel = colorType == Int32(SPNG_COLOR_TYPE_GRAYSCALE_ALPHA.rawValue)
            || colorType == Int32(SPNG_COLOR_TYPE_TRUECOLOR_ALPHA.rawValue)
        var orientation = ImageOrientation.up
        var exif = spng_exif()
        if spng_get_exif(ctx, &exif) == 0, let bytes = exif.data, exif.length > 0 {
            orientation = EXIF.orientation(tiff: UnsafeRawBufferPointer(start: bytes, count: exif.length))
        }
        return ImageHeader(
            format: .png, width: Int(ihdr.width), height: Int(ihdr.height),
            hasAlpha: hasAlphaChannel || hasTRNS, orientation: orientation)
    }

    /// A tRNS colour for a grayscale or truecolour image below 16 bits keeps only the low
    /// `bit depth` bits. The spec says encoders set the rest to 0 and decoders *may* mask them;
    /// Lumen masks, so that a 1-bit image whose tRNS says 0x00FF (as some encoders write
    /// "white") gets its white pixels transparent instead of none.
    private static func maskTransparentColor(_ ctx: OpaquePointer, data: UnsafeRawBufferPointer) throws(ImagingError) {
        var ihdr = spng_ihdr()
        var trns = spng_trns()
        guard spng_get_ihdr(ctx, &ihdr) == 0, ihdr.bit_depth < 16,
              ihdr.color_type == UInt8(SPNG_COLOR_TYPE_GRAYSCALE.rawValue) || ihdr.color_type == UInt8(SPNG_COLOR_TYPE_TRUECOLOR.rawValue),
              spng_get_trns(ctx, &trns) == 0
        else { return }
        let mask = UInt16((1 << Int(ihdr.bit_depth)) - 1)
        guard trns.gray & ~mask != 0 || trns.red & ~mask != 0 || trns.green & ~mask != 0 || trns.blue & ~mask != 0 else { return }
        trns.gray &= mask; trns.red &= mask; trns.green &= mask; trns.blue &= mask
        try check(spng_set_trns(ctx, &trns), data: data)
    }

    private static func isEndOfData(_ status: Int32) -> Bool {
        status == SPNG_IO_EOF.rawValue || status == SPNG_IO_ERROR.rawValue || status == Int32(SPNG_EOF.rawValue)
    }

    /// Throws the typed error for a libspng status (0 is success).
    static func check(_ status: Int32, data: UnsafeRawBufferPointer) throws(ImagingError) {
        guard status != 0 else { return }
        if isEndOfData(status) { throw .truncated }
        switch status {
        case Int32(SPNG_EUSER_WIDTH.rawValue), Int32(SPNG_EUSER_HEIGHT.rawValue):
            let (width, height) = declaredSize(data)
            throw .tooLarge(width: width, height: height)
        case Int32(SPNG_ECHUNK_LIMITS.rawValue):
            // The metadata, not the pixels, is over a limit: say which one.
            throw .corrupted(reason: "ancillary chunks exceed the metadata limit (\(maximumChunkSize >> 20) MiB per chunk "
                + "inflated, \(chunkCacheLimit >> 20) MiB in all)")
        default:
            throw .corrupted(reason: "libspng: " + String(cString: spng_strerror(status)))
        }
    }

    /// Width and height straight from the IHDR bytes (for errors raised before libspng
    /// hands out the header).
    private static func declaredSize(_ data: UnsafeRawBufferPointer) -> (Int, Int) {
        guard data.count >= 24 else { return (0, 0) }
        func word(_ at: Int) -> Int {
            (0..<4).reduce(0) { $0 << 8 | Int(data[at + $1]) }
        }
        return (word(16), word(20))
    }
}

extension PNGCodec {
    /// `image` as a PNG: colour type 2 for `.rgb8`, 6 for `.rgba8`, 8 bits per sample.
    static func encode(_ image: Bitmap) throws(ImagingError) -> Data {
        guard let ctx = spng_ctx_new(Int32(SPNG_CTX_ENCODER.rawValue)) else {
            throw .encodingFailed(reason: "libspng could not create an encoder")
        }
        defer { spng_ctx_free(ctx) }
        func check(_ status: Int32) throws(ImagingError) {
            if status != 0 { throw .encodingFailed(reason: "libspng: " + String(cString: spng_strerror(status))) }
        }
        guard let width = UInt32(exactly: image.width), let height = UInt32(exactly: image.height),
              width <= UInt32(Int32.max), height <= UInt32(Int32.max)
        else { throw .encodingFailed(reason: "\(image.width)x\(image.height) is too large for PNG") }
        try check(spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1))
        var ihdr = spng_ihdr(
            width: width, height: height, bit_depth: 8,
            color_type: UInt8(image.format == .rgba8 ? SPNG_COLOR_TYPE_TRUECOLOR_ALPHA.rawValue : SPNG_COLOR_TYPE_TRUECOLOR.rawValue),
            compression_method: 0, filter_method: 0, interlace_method: 0)
        try check(spng_set_ihdr(ctx, &ihdr))
        let status = image.pixels.withUnsafeBytes { pixels in
            spng_encode_image(
                ctx, pixels.baseAddress, pixels.count, Int32(SPNG_FMT_PNG.rawValue), Int32(SPNG_ENCODE_FINALIZE.rawValue))
        }
        try check(status)
        var length = 0
        var error: Int32 = 0
        guard let buffer = spng_get_png_buffer(ctx, &length, &error) else {
            throw .encodingFailed(reason: "libspng: " + String(cString: spng_strerror(error)))
        }
        // The buffer comes from libspng's default allocator (malloc) and is now ours to free.
        defer { free(buffer) }
        return Data(bytes: buffer, count: length)
    }
}
