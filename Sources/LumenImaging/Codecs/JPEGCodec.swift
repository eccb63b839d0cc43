import CLumenShim
import CTurboJPEG
import Foundation

/// JPEG decoding and encoding through TurboJPEG (libjpeg-turbo 2.1).
///
/// Thread safety: every call creates its own `tjhandle` and destroys it before returning, so
/// no handle is ever seen by two threads. Creating one costs a few small allocations, which is
/// noise next to even a 1/8-scale decode, so a per-thread cache would buy nothing worth its
/// lifetime questions.
enum JPEGCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        let parsed = try ParsedHeader(data, options: options)
        return ImageHeader(
            format: .jpeg, width: parsed.width, height: parsed.height, hasAlpha: false,
            orientation: parsed.markers.orientation, jpeg: parsed)
    }

    /// The marker walk plus TurboJPEG's reading of the header: everything a decode needs to
    /// know before touching the entropy-coded data.
    struct ParsedHeader: Sendable {
        var markers: JPEGMarkers
        var width: Int
        var height: Int
        var colorspace: Int32

        init(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) {
            markers = try JPEGMarkers(walking: data, scanLimit: options.maximumProgressiveScans)
            let handle = try Handle.decompressor()
            defer { handle.destroy() }
            let header = try handle.header(data, markers: markers)
            width = header.width
            height = header.height
            colorspace = header.colorspace
        }
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        // The header's parse when `readHeader` made it (it is for this data and these options);
        // TurboJPEG's decompress reads the header again by itself.
        let parsed: ParsedHeader
        if let cached = header.jpeg { parsed = cached } else { parsed = try ParsedHeader(data, options: options) }
        let markers = parsed.markers
        let info = (width: parsed.width, height: parsed.height, colorspace: parsed.colorspace)
        let (width, height, factor) = scaling(width: info.width, height: info.height, minimum: minimumSize)
        // A side that is not a multiple of the scale's block ends in a partial pixel.
        let extent = factor < 1 ? (width: Double(info.width) * factor, height: Double(info.height) * factor) : nil
        let isCMYK = info.colorspace == Int32(TJCS_CMYK.rawValue) || info.colorspace == Int32(TJCS_YCCK.rawValue)
        // TurboJPEG 2.1's own scan limit (500) backs up the marker walk when it is stricter.
        var flags = TJFLAG_ACCURATEDCT
        if options.maximumProgressiveScans <= 500 { flags |= TJFLAG_LIMITSCANS }

        let profile = options.convertsColorProfile ? markers.iccProfile : nil
        if !isCMYK, options.allowsReducedScaleDecoder, factor == 0.125 || factor == 0.25,
           var bitmap = try decodeReduced(
               data, markers: markers, info: info, denominator: Int(1 / factor), width: width, height: height,
               cancellation: options.cancellation) {
            if let profile {
                bitmap = profile.withUnsafeBytes { ColorProfile.convertToSRGB(bitmap, profile: $0) }
            }
            return CodecOutput(bitmap: bitmap, extent: extent)
        }
        // Data cut inside a marker segment (a table or a scan header after the last whole
        // scan): libjpeg would warn about the early end and then fail on the segment it cannot
        // finish, and TurboJPEG 2.1 reports that failure as a mere warning, with the output
        // never written. So it decodes the whole segments and scans before the cut, closed by
        // an end-of-image marker; the result is still marked partial.
        var source = data
        var closedCopy: UnsafeMutableRawBufferPointer?
        defer { closedCopy?.deallocate() }
        if markers.isTruncated, let cut = markers.incompleteSegmentStart, cut >= 2 {
            let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: cut + 2, alignment: 1)
            copy.copyMemory(from: UnsafeRawBufferPointer(rebasing: data[0..<cut]))
            copy[cut] = 0xFF
            copy[cut + 1] = 0xD9
            closedCopy = copy
            source = UnsafeRawBufferPointer(copy)
        }
        // TurboJPEG's decompress runs to its end: the last look at the cancellation.
        try options.cancellation?.check()
        let handle = try Handle.decompressor()
        defer { handle.destroy() }
        var outcome = Outcome.success
        var bitmap: Bitmap
        if isCMYK {
            var cmyk = [UInt8](repeating: 0, count: width * height * 4)
            cmyk.withUnsafeMutableBufferPointer { dst in
                outcome = handle.decompress(source, into: dst, width: width, height: height, format: TJPF_CMYK, flags: flags)
            }
            try outcome.check(markers)
            // Photoshop (and everything that writes an Adobe APP14 marker) stores CMYK inverted.
            let inverted = markers.adobeTransform != nil
            let converted = profile.flatMap { icc in
                icc.withUnsafeBytes { p in
                    cmyk.withUnsafeBytes { c in
                        ColorProfile.convertCMYKToSRGB(c, width: width, height: height, inverted: inverted, profile: p)
                    }
                }
            }
            bitmap = converted ?? naiveRGB(cmyk: cmyk, width: width, height: height, inverted: inverted)
        } else {
            bitmap = Bitmap(width: width, height: height, format: .rgb8) { dst in
                outcome = handle.decompress(source, into: dst, width: width, height: height, format: TJPF_RGB, flags: flags)
            }
            try outcome.check(markers)
            if let profile {
                bitmap = profile.withUnsafeBytes { ColorProfile.convertToSRGB(bitmap, profile: $0) }
            }
        }
        // A warning with the data cut short, or a warning that says pixels are missing even
        // though the file ends properly (half a scan closed by an end marker, a frame header
        // that claims more rows than the scan holds, a bad code in the entropy stream): a
        // progressive JPEG's scans so far make a coarse but complete frame (the partial
        // preview); a baseline JPEG's would be its top rows over grey filler, which is no image
        // at all, so that is `truncated`. A harmless warning on complete data (extraneous bytes
        // between segments, a bad ICC or JFIF marker) still gives the image.
        let isCut = (markers.isTruncated && (outcome.isWarning || closedCopy != nil)) || outcome == .warning(losesPixels: true)
        if isCut && !markers.isProgressive { throw .truncated }
        return CodecOutput(bitmap: bitmap, isPartial: isCut, extent: extent)
    }

    /// A 1/8- or 1/4-scale decode (`denominator` 8 or 4) of a clean baseline JPEG by Lumen's
    /// own decoder (`lumen_jpeg_decode_reduced`): the entropy-coded data is parsed once, and
    /// each coefficient that can affect a reduced pixel is folded straight into that pixel's
    /// mean instead of being stored and transformed. Its output follows TurboJPEG's own scaled
    /// decode (the same block means, the same chroma handling) to within rounding. `nil` when
    /// `width`×`height` is not that scale or the data is outside the decoder's case
    /// (progressive, several scans, CMYK or Adobe RGB, 4:4:0 at 1/4, damaged or cut short):
    /// TurboJPEG then decodes as usual, with its own warnings and errors. Throws
    /// ``ImagingError/cancelled`` when `cancellation` stopped it.
    static func decodeReduced(
        _ data: UnsafeRawBufferPointer, markers: JPEGMarkers, info: (width: Int, height: Int, colorspace: Int32),
        denominator: Int, width: Int, height: Int, cancellation: DecodeCancellation? = nil
    ) throws(ImagingError) -> Bitmap? {
        guard denominator == 8 || denominator == 4, info.width > 8 || info.height > 8,
              width == (info.width + denominator - 1) / denominator,
              height == (info.height + denominator - 1) / denominator,
              let frame = markers.frame, frame.components == 1 || frame.components == 3,
              !markers.isProgressive, markers.scanCount == 1, markers.reachedEnd, !markers.isTruncated,
              markers.adobeTransform == nil || markers.adobeTransform == 1,
              let base = data.baseAddress
        else { return nil }
        var status: Int32 = -1
        let bitmap = Bitmap(width: width, height: height, format: .rgb8) { dst in
            status = lumen_jpeg_decode_reduced(
                base.assumingMemoryBound(to: UInt8.self), data.count, Int32(denominator), dst.baseAddress,
                Int32(width), Int32(height), cancellation?.flag)
            if status != 0 { dst.initialize(repeating: 0) }
        }
        if status == Int32(LUMEN_DECODE_CANCELLED) { throw .cancelled }
        return status == 0 ? bitmap : nil
    }

    /// The smallest TurboJPEG scale (at most 1/1) whose output covers `minimum` on both sides,
    /// as the output size and the factor; full size (factor 1) when `minimum` is `nil`. Sizes
    /// follow `TJSCALED`: ceil(dimension × num / denom).
    static func scaling(width: Int, height: Int, minimum: PixelSize?) -> (width: Int, height: Int, factor: Double) {
        guard let minimum else { return (width, height, 1) }
        var count: Int32 = 0
        guard let factors = tjGetScalingFactors(&count), count > 0 else { return (width, height, 1) }
        var best = (width: width, height: height, factor: 1.0)
        for i in 0..<Int(count) {
            let num = Int(factors[i].num), denom = Int(factors[i].denom)
            guard num > 0, denom > 0, num <= denom else { continue }
            let w = (width * num + denom - 1) / denom
            let h = (height * num + denom - 1) / denom
            if w >= minimum.width, h >= minimum.height, w * h < best.width * best.height {
                best = (w, h, Double(num) / Double(denom))
            }
        }
        return best
    }

    /// CMYK to RGB without a profile: R = (1 − C)(1 − K), and likewise for G and B.
    static func naiveRGB(cmyk: [UInt8], width: Int, height: Int, inverted: Bool) -> Bitmap {
        let n = width * height
        return cmyk.withUnsafeBufferPointer { src in
            Bitmap(width: width, height: height, format: .rgb8) { dst in
                for i in 0..<n {
                    // `inverted` data already stores 255 − ink.
                    var c = Int(src[i * 4]), m = Int(src[i * 4 + 1]), y = Int(src[i * 4 + 2]), k = Int(src[i * 4 + 3])
                    if !inverted { c = 255 - c; m = 255 - m; y = 255 - y; k = 255 - k }
                    dst[i * 3] = UInt8((c * k + 127) / 255)
                    dst[i * 3 + 1] = UInt8((m * k + 127) / 255)
                    dst[i * 3 + 2] = UInt8((y * k + 127) / 255)
                }
            }
        }
    }

    /// How a TurboJPEG call ended.
    enum Outcome: Equatable {
        case success
        /// TurboJPEG returned -1 but `tjGetErrorCode` says the error was only a warning;
        /// `losesPixels` when that warning means part of the image was never decoded.
        case warning(losesPixels: Bool)
        case failure(String)

        var isWarning: Bool {
            if case .warning = self { return true }
            return false
        }

        /// Throws for a hard failure: `truncated` when the data ends before the first scan
        /// (nothing usable), `corrupted` with TurboJPEG's message otherwise.
        func check(_ markers: JPEGMarkers) throws(ImagingError) {
            guard case .failure(let reason) = self else { return }
            if markers.isTruncated && markers.scanCount == 0 { throw .truncated }
            throw .corrupted(reason: reason)
        }
    }

    /// A TurboJPEG instance owned by one call.
    struct Handle {
        let raw: tjhandle

        static func decompressor() throws(ImagingError) -> Handle {
            guard let raw = tjInitDecompress() else {
                throw .corrupted(reason: "TurboJPEG could not create a decompressor")
            }
            return Handle(raw: raw)
        }

        func destroy() { tjDestroy(raw) }

        var errorMessage: String { String(cString: tjGetErrorStr2(raw)) }

        /// Outcome of a call that returned `status`.
        ///
        /// TurboJPEG 2.1 keeps reporting `TJERR_WARNING` once any warning was emitted, even when
        /// a fatal error followed it and the output was never written. The message tells them
        /// apart: libjpeg prints only its first warning, and a fatal error overwrites it. So
        /// `.warning` needs both the code and a message that is one of libjpeg's warnings.
        func outcome(_ status: Int32) -> Outcome {
            if status == 0 { return .success }
            let message = errorMessage
            guard tjGetErrorCode(raw) == Int32(TJERR_WARNING.rawValue),
                  Self.warningPrefixes.contains(where: { message.hasPrefix($0) })
            else { return .failure(message) }
            let losesPixels = Self.pixelLosingWarningPrefixes.contains(where: { message.hasPrefix($0) })
                || Self.isLeftoverScanData(message)
            return .warning(losesPixels: losesPixels)
        }

        /// Whether `message` is `JWRN_EXTRANEOUS_DATA` before the end-of-image marker with at
        /// least 64 bytes: the last scan's codes ended that far before its data did, so they
        /// were misread. libjpeg-turbo's fast Huffman path takes a bad code silently (it does
        /// not warn "bad Huffman code"), and the stream goes out of step: it then either runs
        /// into the marker early (`JWRN_HIT_MARKER`) or stops early, and this is the only sign.
        /// A few bytes there are padding some encoders write (harmless: every block was read);
        /// 64 is far above any padding seen in real files and below what damage leaves behind
        /// except near the very end. Extraneous bytes before other markers are left alone: junk
        /// between header segments is common and costs no pixels.
        static func isLeftoverScanData(_ message: String) -> Bool {
            let prefix = "Corrupt JPEG data: ", suffix = " extraneous bytes before marker 0xd9"
            guard message.hasPrefix(prefix), message.hasSuffix(suffix) else { return false }
            let count = message.dropFirst(prefix.count).dropLast(suffix.count)
            return Int(count).map { $0 >= 64 } ?? false
        }

        /// The warnings after which libjpeg fills the rest of the frame (or of a restart
        /// interval) with grey or garbage: the data ran out (`JWRN_JPEG_EOF`), a scan hit a
        /// marker before its last block (`JWRN_HIT_MARKER`: half a scan followed by `FF D9`, or
        /// a frame header claiming more rows than were coded), a code that is no code
        /// (`JWRN_HUFF_BAD_CODE`, `JWRN_ARITH_BAD_CODE`), or a restart marker missing
        /// (`JWRN_MUST_RESYNC`), and many bytes left over after the last scan (see
        /// ``isLeftoverScanData(_:)``). The other warnings leave every pixel decoded: a few
        /// extraneous bytes before a marker (padding some encoders write after a scan's last
        /// block, common in real photos), a bad ICC or JFIF marker (metadata), odd but readable scan parameters,
        /// an unknown Adobe transform code. libjpeg reports only its first warning, so a harmless
        /// one followed by a pixel-losing one reads as harmless; a cut file usually warns first.
        static let pixelLosingWarningPrefixes = [
            "Premature end of JPEG file", "Corrupt JPEG data: premature end of data segment",
            "Corrupt JPEG data: bad Huffman code", "Corrupt JPEG data: bad arithmetic code",
            "Corrupt JPEG data: found marker",
        ]

        /// How libjpeg-turbo's warning messages (`JWRN_*` in jerror.h) begin.
        static let warningPrefixes = [
            "Premature end of JPEG file", "Corrupt JPEG data", "Warning:", "Inconsistent progression sequence",
            "Invalid SOS parameters for sequential JPEG", "Unknown Adobe color transform code",
            "Application transferred too many scanlines",
        ]

        /// Whether a failed `tjDecompressHeader3` only objected to a chroma subsampling that
        /// TurboJPEG 2.1 has no name for (4:1:0, 1×4, …: valid JPEG that libjpeg decodes). It
        /// fills in the size and colour space before raising that error, and `tjDecompress2`
        /// decodes such files, so the header stands.
        static func isUnnamedSubsampling(_ reason: String, colorspace: Int32) -> Bool {
            reason.hasPrefix("tjDecompressHeader3(): Could not determine subsampling type") && colorspace >= 0
        }

        /// The header as TurboJPEG reads it. Width and height are preset to 0 because
        /// TurboJPEG 2.1 can report success without filling them (a tables-only stream).
        func header(_ data: UnsafeRawBufferPointer, markers: JPEGMarkers) throws(ImagingError)
            -> (width: Int, height: Int, colorspace: Int32)
        {
            guard markers.frame != nil, markers.scanCount > 0 else {
                if markers.isTruncated { throw .truncated }
                throw .corrupted(reason: "JPEG data contains no image (no frame or no scan)")
            }
            var width: Int32 = 0, height: Int32 = 0, subsampling: Int32 = -1, colorspace: Int32 = -1
            let status = tjDecompressHeader3(
                raw, data.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(data.count),
                &width, &height, &subsampling, &colorspace)
            if case .failure(let reason) = outcome(status), !Self.isUnnamedSubsampling(reason, colorspace: colorspace) {
                if markers.isTruncated && markers.scanCount == 0 { throw .truncated }
                throw .corrupted(reason: reason)
            }
            guard width > 0, height > 0 else {
                throw .corrupted(reason: "JPEG header declares an empty \(width)x\(height) image")
            }
            return (Int(width), Int(height), colorspace)
        }

        /// Decompresses into `dst` (exactly `width`×`height`×channels bytes) at the size
        /// `width`×`height`, which must be a TurboJPEG scaled size.
        func decompress(
            _ data: UnsafeRawBufferPointer, into dst: UnsafeMutableBufferPointer<UInt8>,
            width: Int, height: Int, format: TJPF, flags: Int32
        ) -> Outcome {
            let status = tjDecompress2(
                raw, data.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(data.count),
                dst.baseAddress, Int32(width), 0, Int32(height), Int32(format.rawValue), flags)
            return outcome(status)
        }
    }
}

extension JPEGCodec {
    /// Chroma subsampling for ``encode(_:quality:progressive:subsampling:)``; `grey` keeps the
    /// luma alone.
    enum Subsampling {
        case s444, s422, s420, grey

        var turbo: TJSAMP {
            switch self {
            case .s444: TJSAMP_444
            case .s422: TJSAMP_422
            case .s420: TJSAMP_420
            case .grey: TJSAMP_GRAY
            }
        }
    }

    /// `image` encoded as a JPEG at `quality` (1–100; ``Bitmap/encode(as:)`` refuses others) with 4:2:0 chroma
    /// subsampling (or `subsampling`: the public API only uses 4:2:0; the others are for
    /// tests), progressive when asked. Alpha is dropped.
    /// - Throws: ``ImagingError/encodingFailed(reason:)``.
    static func encode(
        _ image: Bitmap, quality: Int, progressive: Bool, subsampling: Subsampling = .s420
    ) throws(ImagingError) -> Data {
        guard image.width <= 65_535, image.height <= 65_535 else {
            throw .encodingFailed(reason: "JPEG cannot hold a \(image.width)x\(image.height) image (65535 max)")
        }
        guard let handle = tjInitCompress() else {
            throw .encodingFailed(reason: "TurboJPEG could not create a compressor")
        }
        defer { tjDestroy(handle) }
        var buffer: UnsafeMutablePointer<UInt8>?
        var size: UInt = 0
        defer { if let buffer { tjFree(buffer) } }
        let format = image.format == .rgba8 ? TJPF_RGBA : TJPF_RGB
        let flags = progressive ? TJFLAG_PROGRESSIVE : 0
        let status = image.pixels.withUnsafeBufferPointer { src in
            tjCompress2(
                handle, src.baseAddress, Int32(image.width), 0, Int32(image.height), Int32(format.rawValue),
                &buffer, &size, Int32(subsampling.turbo.rawValue), Int32(min(max(quality, 1), 100)), flags)
        }
        guard status == 0, let buffer, size > 0 else {
            throw .encodingFailed(reason: String(cString: tjGetErrorStr2(handle)))
        }
        return Data(bytes: buffer, count: Int(size))
    }
}
