import Foundation
import CWebP

/// WebP decoding and encoding through libwebp, libwebpdemux and libwebpmux.
///
/// Still images (lossy, lossless, with alpha) decode with `WebPDecode` straight into the
/// bitmap's buffer, scaled by libwebp while decoding when a smaller size is asked for.
/// Animations go through `WebPAnimDecoder`, which composites each frame onto the canvas
/// (disposal, blending). Extended files are read with the demuxer for the canvas size, the
/// frame count, the EXIF orientation and the ICC profile. Every call owns its C handles.
enum WebPCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        let features = try features(of: data)
        var header = ImageHeader(
            format: .webp, width: Int(features.width), height: Int(features.height),
            hasAlpha: features.has_alpha != 0)
        guard isExtended(data) else { return header }
        try withDemuxer(data) { demux throws(ImagingError) in
            let flags = WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS)
            header.width = Int(WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH))
            header.height = Int(WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT))
            if features.has_animation != 0 {
                header.frameCount = Int(WebPDemuxGetI(demux, WEBP_FF_FRAME_COUNT))
                guard header.frameCount > 0 else { throw .corrupted(reason: "WebP animation has no frames") }
            }
            if flags & EXIF_FLAG.rawValue != 0 {
                withChunk("EXIF", in: demux) { exif in header.orientation = orientation(exif: exif) }
            }
        }
        return header
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        let features = try features(of: data)
        if features.has_animation != 0 {
            // The first frame composited on the canvas; the caller's resampler makes the size.
            let frames = try decodeAnimation(data, options: options, limit: 1)
            return CodecOutput(bitmap: frames[0].bitmap)
        }
        let width = Int(features.width), height = Int(features.height)
        let format: PixelFormat = features.has_alpha != 0 ? .rgba8 : .rgb8
        // For a lossy image with alpha (VP8 data and an ALPH chunk), libwebp's scaler averages
        // colour without weighting it by alpha, which darkens the edges of transparent areas:
        // such an image decodes at full size, and Lumen's premultiplied resampler makes the
        // size. Lossless images (format 2) are scaled premultiplied by libwebp itself.
        let scalesInLibwebp = features.has_alpha == 0 || features.format == 2
        let scaled = scalesInLibwebp ? scaledSize(width: width, height: height, minimum: minimumSize) : nil

        var config = WebPDecoderConfig()
        guard WebPInitDecoderConfig(&config) != 0 else {
            throw .corrupted(reason: "libwebp rejected its decoder configuration (version mismatch)")
        }
        if let scaled {
            config.options.use_scaling = 1
            config.options.scaled_width = Int32(scaled.width)
            config.options.scaled_height = Int32(scaled.height)
        }
        config.output.colorspace = format == .rgba8 ? MODE_RGBA : MODE_RGB
        config.output.is_external_memory = 1
        let outWidth = scaled?.width ?? width, outHeight = scaled?.height ?? height
        // `WebPDecode` runs to its end: the last look at the cancellation.
        try options.cancellation?.check()
        var image: Bitmap
        do {
            image = try Bitmap(width: outWidth, height: outHeight, format: format) { buffer in
                config.output.u.RGBA = WebPRGBABuffer(
                    rgba: buffer.baseAddress, stride: Int32(outWidth * format.channels), size: buffer.count)
                let status = WebPDecode(data.bindMemory(), data.count, &config)
                WebPFreeDecBuffer(&config.output)
                if status != VP8_STATUS_OK { throw error(for: status, data: data) }
            }
        } catch let error as ImagingError {
            throw error
        } catch {
            throw .corrupted(reason: "\(error)")
        }
        if options.convertsColorProfile, isExtended(data) {
            try withDemuxer(data) { demux in
                if WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS) & ICCP_FLAG.rawValue != 0 {
                    withChunk("ICCP", in: demux) { profile in
                        image = ColorProfile.convertToSRGB(image, profile: profile)
                    }
                }
            }
        }
        return CodecOutput(bitmap: image)
    }

    static func decodeFrames(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, options: DecodeOptions
    ) throws(ImagingError) -> [AnimationFrame] {
        let features = try features(of: data)
        guard features.has_animation != 0 else {
            let output = try decode(data, header: header, minimumSize: nil, options: options)
            return [AnimationFrame(bitmap: output.bitmap, duration: 0)]
        }
        return try decodeAnimation(data, options: options, limit: nil)
    }

    // MARK: - Animation

    /// Decodes up to `limit` frames (all when `nil`) composited on the canvas, as rgba8, or rgb8
    /// when every decoded pixel is opaque. Frames × canvas area is checked against
    /// `options.maximumPixelCount` from the animation's header before any frame is decoded.
    private static func decodeAnimation(
        _ data: UnsafeRawBufferPointer, options: DecodeOptions, limit: Int?
    ) throws(ImagingError) -> [AnimationFrame] {
        var decoderOptions = WebPAnimDecoderOptions()
        guard WebPAnimDecoderOptionsInit(&decoderOptions) != 0 else {
            throw .corrupted(reason: "libwebp rejected its animation decoder options (version mismatch)")
        }
        decoderOptions.color_mode = MODE_RGBA
        decoderOptions.use_threads = 0
        var webpData = WebPData(bytes: data.bindMemory(), size: data.count)
        guard let decoder = WebPAnimDecoderNew(&webpData, &decoderOptions) else {
            throw isShort(data) ? .truncated : .corrupted(reason: "WebP animation could not be parsed")
        }
        defer { WebPAnimDecoderDelete(decoder) }
        var info = WebPAnimInfo()
        guard WebPAnimDecoderGetInfo(decoder, &info) != 0 else {
            throw .corrupted(reason: "WebP animation has no readable header")
        }
        let width = Int(info.canvas_width), height = Int(info.canvas_height)
        let frameCount = min(Int(info.frame_count), limit ?? Int.max)
        guard width > 0, height > 0, frameCount > 0 else {
            throw .corrupted(reason: "WebP animation declares \(width)x\(height) with \(info.frame_count) frames")
        }
        let (area, overflow1) = width.multipliedReportingOverflow(by: height)
        let (total, overflow2) = area.multipliedReportingOverflow(by: frameCount)
        if overflow1 || overflow2 || total > options.maximumPixelCount {
            throw .tooLarge(width: width, height: height)
        }

        var frames: [AnimationFrame] = []
        frames.reserveCapacity(frameCount)
        var previousTimestamp: Int32 = 0
        var opaque = true
        while frames.count < frameCount, WebPAnimDecoderHasMoreFrames(decoder) != 0 {
            var canvas: UnsafeMutablePointer<UInt8>?
            var timestamp: Int32 = 0
            guard WebPAnimDecoderGetNext(decoder, &canvas, &timestamp) != 0, let canvas else {
                throw isShort(data) ? .truncated : .corrupted(reason: "WebP animation frame \(frames.count + 1) failed to decode")
            }
            let bitmap = Bitmap(width: width, height: height, format: .rgba8) { buffer in
                buffer.baseAddress!.update(from: canvas, count: buffer.count)
            }
            opaque = opaque && !bitmap.hasTransparentPixels
            let duration = Double(max(0, Int(timestamp) - Int(previousTimestamp))) / 1000
            previousTimestamp = timestamp
            frames.append(AnimationFrame(bitmap: bitmap, duration: duration))
        }
        guard !frames.isEmpty else { throw .corrupted(reason: "WebP animation has no decodable frame") }
        if options.convertsColorProfile, let demux = WebPAnimDecoderGetDemuxer(decoder),
           WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS) & ICCP_FLAG.rawValue != 0 {
            withChunk("ICCP", in: demux) { profile in
                for i in frames.indices { frames[i].bitmap = ColorProfile.convertToSRGB(frames[i].bitmap, profile: profile) }
            }
        }
        if opaque {
            for i in frames.indices { frames[i].bitmap = frames[i].bitmap.converted(to: .rgb8) }
        }
        return frames
    }

    // MARK: - Helpers

    private static func features(of data: UnsafeRawBufferPointer) throws(ImagingError) -> WebPBitstreamFeatures {
        var features = WebPBitstreamFeatures()
        let status = WebPGetFeatures(data.bindMemory(), data.count, &features)
        guard status == VP8_STATUS_OK else { throw error(for: status, data: data) }
        guard features.width > 0, features.height > 0 else {
            throw .corrupted(reason: "WebP header declares an empty \(features.width)x\(features.height) image")
        }
        return features
    }

    /// The size libwebp should scale to while decoding: at least `minimum` on both sides, the
    /// image's aspect ratio kept, never larger than the image; `nil` for a full-size decode.
    static func scaledSize(width: Int, height: Int, minimum: PixelSize?) -> PixelSize? {
        guard let minimum, minimum.width < width || minimum.height < height else { return nil }
        let scale = max(Double(minimum.width) / Double(width), Double(minimum.height) / Double(height))
        let w = min(width, max(minimum.width, Int((Double(width) * scale).rounded()), 1))
        let h = min(height, max(minimum.height, Int((Double(height) * scale).rounded()), 1))
        return w == width && h == height ? nil : PixelSize(width: w, height: h)
    }

    /// Whether the file uses the extended format (a VP8X chunk: animation, alpha, metadata).
    private static func isExtended(_ data: UnsafeRawBufferPointer) -> Bool {
        data.count >= 16 && data[12] == UInt8(ascii: "V") && data[13] == UInt8(ascii: "P")
            && data[14] == UInt8(ascii: "8") && data[15] == UInt8(ascii: "X")
    }

    /// Whether the data ends before the size its RIFF header declares.
    private static func isShort(_ data: UnsafeRawBufferPointer) -> Bool {
        guard data.count >= 8 else { return true }
        let riffSize = Int(data[4]) | Int(data[5]) << 8 | Int(data[6]) << 16 | Int(data[7]) << 24
        return data.count < riffSize + 8
    }

    private static func withDemuxer(
        _ data: UnsafeRawBufferPointer, _ body: (OpaquePointer) throws(ImagingError) -> Void
    ) throws(ImagingError) {
        var webpData = WebPData(bytes: data.bindMemory(), size: data.count)
        guard let demux = WebPDemux(&webpData) else {
            throw isShort(data) ? .truncated : .corrupted(reason: "WebP container could not be parsed")
        }
        defer { WebPDemuxDelete(demux) }
        try body(demux)
    }

    /// Calls `body` with the first chunk named `fourCC`, if there is one. The bytes point into
    /// the input data and are valid only during the call.
    private static func withChunk(_ fourCC: String, in demux: OpaquePointer, _ body: (UnsafeRawBufferPointer) -> Void) {
        var iterator = WebPChunkIterator()
        guard WebPDemuxGetChunk(demux, fourCC, 1, &iterator) != 0 else { return }
        defer { WebPDemuxReleaseChunkIterator(&iterator) }
        if let bytes = iterator.chunk.bytes, iterator.chunk.size > 0 {
            body(UnsafeRawBufferPointer(start: bytes, count: iterator.chunk.size))
        }
    }

    /// The orientation in a WebP EXIF chunk, which holds a TIFF block, sometimes preceded by
    /// the JPEG APP1 signature "Exif\0\0".
    static func orientation(exif: UnsafeRawBufferPointer) -> ImageOrientation {
        let signature: [UInt8] = [0x45, 0x78, 0x69, 0x66, 0, 0]
        if exif.count >= 6, exif.prefix(6).elementsEqual(signature) {
            return EXIF.orientation(tiff: UnsafeRawBufferPointer(rebasing: exif[6...]))
        }
        return EXIF.orientation(tiff: exif)
    }

    private static func error(for status: VP8StatusCode, data: UnsafeRawBufferPointer) -> ImagingError {
        switch status {
        case VP8_STATUS_NOT_ENOUGH_DATA: .truncated
        case VP8_STATUS_BITSTREAM_ERROR:
            isShort(data) ? .truncated : .corrupted(reason: "WebP bitstream error")
        case VP8_STATUS_UNSUPPORTED_FEATURE: .corrupted(reason: "WebP uses a feature libwebp does not support")
        case VP8_STATUS_OUT_OF_MEMORY: .corrupted(reason: "libwebp ran out of memory")
        case VP8_STATUS_INVALID_PARAM: .corrupted(reason: "libwebp rejected the decode parameters")
        default: .corrupted(reason: "libwebp failed with status \(status.rawValue)")
        }
    }
}

// MARK: - Encoding

extension WebPCodec {
    /// `image` as WebP with an alpha channel when the image has one: lossy at `quality` (0–100),
    /// or lossless, where RGB values are kept exactly (even under fully transparent pixels) and
    /// `quality` is the compression effort (0 fastest, 100 smallest).
    static func encode(_ image: Bitmap, quality: Int, lossless: Bool) throws(ImagingError) -> Data {
        var config = try config(quality: quality, lossless: lossless)
        return try withPicture(image, lossless: lossless) { picture throws(ImagingError) in
            var writer = WebPMemoryWriter()
            WebPMemoryWriterInit(&writer)
            defer { WebPMemoryWriterClear(&writer) }
            let ok = withUnsafeMutablePointer(to: &writer) { writerPointer in
                picture.pointee.writer = WebPMemoryWrite
                picture.pointee.custom_ptr = UnsafeMutableRawPointer(writerPointer)
                return WebPEncode(&config, picture)
            }
            guard ok != 0, let bytes = writer.mem else {
                throw .encodingFailed(reason: describe(picture.pointee.error_code))
            }
            return Data(bytes: bytes, count: writer.size)
        }
    }

    /// An animated WebP of `frames` on a canvas their size, each shown for its duration in
    /// seconds (rounded to milliseconds), looping forever. For tests: not public API.
    static func encodeAnimation(
        _ frames: [(bitmap: Bitmap, duration: Double)], quality: Int = 80, lossless: Bool = true
    ) throws(ImagingError) -> Data {
        guard let first = frames.first?.bitmap else { throw .invalidArgument(reason: "an animation needs frames") }
        guard frames.allSatisfy({ $0.bitmap.width == first.width && $0.bitmap.height == first.height }) else {
            throw .invalidArgument(reason: "every animation frame must be \(first.width)x\(first.height)")
        }
        var config = try config(quality: quality, lossless: lossless)
        var encoderOptions = WebPAnimEncoderOptions()
        guard WebPAnimEncoderOptionsInit(&encoderOptions) != 0,
              let encoder = WebPAnimEncoderNew(Int32(first.width), Int32(first.height), &encoderOptions)
        else { throw .encodingFailed(reason: "libwebp could not create an animation encoder") }
        defer { WebPAnimEncoderDelete(encoder) }

        var timestamp = 0
        for frame in frames {
            try withPicture(frame.bitmap, lossless: lossless) { picture throws(ImagingError) in
                guard WebPAnimEncoderAdd(encoder, picture, Int32(timestamp), &config) != 0 else {
                    throw .encodingFailed(reason: String(cString: WebPAnimEncoderGetError(encoder)))
                }
            }
            timestamp += Int((frame.duration * 1000).rounded())
        }
        var output = WebPData()
        WebPDataInit(&output)
        defer { WebPDataClear(&output) }
        guard WebPAnimEncoderAdd(encoder, nil, Int32(timestamp), nil) != 0,
              WebPAnimEncoderAssemble(encoder, &output) != 0, let bytes = output.bytes
        else { throw .encodingFailed(reason: String(cString: WebPAnimEncoderGetError(encoder))) }
        return Data(bytes: bytes, count: output.size)
    }

    private static func config(quality: Int, lossless: Bool) throws(ImagingError) -> WebPConfig {
        var config = WebPConfig()
        guard WebPConfigInit(&config) != 0 else {
            throw .encodingFailed(reason: "libwebp rejected its encoder configuration (version mismatch)")
        }
        config.quality = Float(min(max(quality, 0), 100))
        if lossless {
            config.lossless = 1
            config.exact = 1
        }
        guard WebPValidateConfig(&config) != 0 else {
            throw .encodingFailed(reason: "libwebp rejected the encoder configuration")
        }
        return config
    }

    /// Runs `body` with a WebPPicture holding `image`'s pixels, freed afterwards.
    private static func withPicture<T>(
        _ image: Bitmap, lossless: Bool, _ body: (UnsafeMutablePointer<WebPPicture>) throws(ImagingError) -> T
    ) throws(ImagingError) -> T {
        var picture = WebPPicture()
        guard WebPPictureInit(&picture) != 0 else {
            throw .encodingFailed(reason: "libwebp rejected its picture structure (version mismatch)")
        }
        // The importer converts to ARGB (lossless) or YUV (lossy) while copying.
        picture.use_argb = lossless ? 1 : 0
        picture.width = Int32(clamping: image.width)
        picture.height = Int32(clamping: image.height)
        defer { WebPPictureFree(&picture) }
        let imported = image.pixels.withUnsafeBufferPointer { pixels in
            let stride = Int32(clamping: image.bytesPerRow)
            return image.format == .rgba8
                ? WebPPictureImportRGBA(&picture, pixels.baseAddress, stride)
                : WebPPictureImportRGB(&picture, pixels.baseAddress, stride)
        }
        guard imported != 0 else {
            throw .encodingFailed(reason: describe(picture.error_code))
        }
        return try withUnsafeMutablePointer(to: &picture) { pointer throws(ImagingError) in try body(pointer) }
    }

    private static func describe(_ code: WebPEncodingError) -> String {
        switch code {
        case VP8_ENC_ERROR_OUT_OF_MEMORY, VP8_ENC_ERROR_BITSTREAM_OUT_OF_MEMORY: "libwebp ran out of memory"
        case VP8_ENC_ERROR_BAD_DIMENSION: "WebP images are at most 16383 pixels on each side"
        case VP8_ENC_ERROR_FILE_TOO_BIG: "the encoded WebP would exceed 4 GB"
        case VP8_ENC_ERROR_PARTITION0_OVERFLOW, VP8_ENC_ERROR_PARTITION_OVERFLOW:
            "a lossy WebP partition overflowed; try a lower quality"
        default: "libwebp failed with error \(code.rawValue)"
        }
    }
}

private extension UnsafeRawBufferPointer {
    /// The bytes as `const uint8_t*` for libwebp, which only reads them.
    func bindMemory() -> UnsafePointer<UInt8>? {
        baseAddress?.assumingMemoryBound(to: UInt8.self)
    }
}
