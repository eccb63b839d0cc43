#if LUMEN_HEIF
import Foundation
import CHeif

/// HEIC and AVIF through libheif (only when built with `LUMEN_HEIF=1`).
///
/// The primary image is decoded to interleaved 8-bit RGB, or RGBA when it has an alpha
/// channel. libheif applies the container's rotation and mirroring (`irot`/`imir`) itself, so
/// the header reports the displayed size and orientation `.up`. Which compressions decode and
/// encode depends on the plugins libheif was built with (Debian 12: libde265 for HEVC,
/// dav1d/aom for AV1 decoding, aom for AV1 encoding); a missing one is `unsupportedFormat`
/// with the sniffed format.
enum HEIFCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        try withPrimaryImage(data, options: options) { handle throws(ImagingError) in
            ImageHeader(
                format: ImageFormat(sniffing: data) ?? .heic,
                width: Int(heif_image_handle_get_width(handle)),
                height: Int(heif_image_handle_get_height(handle)),
                hasAlpha: heif_image_handle_has_alpha_channel(handle) != 0)
        }
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        try withPrimaryImage(data, options: options) { handle throws(ImagingError) in
            let format: PixelFormat = heif_image_handle_has_alpha_channel(handle) != 0 ? .rgba8 : .rgb8
            guard let decodingOptions = heif_decoding_options_alloc() else {
                throw .corrupted(reason: "libheif could not allocate decoding options")
            }
            defer { heif_decoding_options_free(decodingOptions) }
            decodingOptions.pointee.convert_hdr_to_8bit = 1
            var image: OpaquePointer?
            let status = heif_decode_image(
                handle, &image, heif_colorspace_RGB,
                format == .rgba8 ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB, decodingOptions)
            guard status.code == heif_error_Ok, let image else { throw error(status, data: data) }
            defer { heif_image_release(image) }

            let width = Int(heif_image_get_width(image, heif_channel_interleaved))
            let height = Int(heif_image_get_height(image, heif_channel_interleaved))
            var stride: Int32 = 0
            guard width > 0, height > 0,
                  let plane = heif_image_get_plane_readonly(image, heif_channel_interleaved, &stride),
                  Int(stride) >= width * format.channels
            else { throw .corrupted(reason: "libheif returned no usable \(width)x\(height) pixel plane") }
            let rowBytes = width * format.channels
            var bitmap = Bitmap(width: width, height: height, format: format) { buffer in
                for y in 0..<height {
                    (buffer.baseAddress! + y * rowBytes).update(from: plane + y * Int(stride), count: rowBytes)
                }
            }
            if format == .rgba8, heif_image_handle_is_premultiplied_alpha(handle) != 0 {
                // Lumen's bitmaps carry straight alpha.
                bitmap.pixels.withUnsafeMutableBufferPointer { p in
                    for i in Swift.stride(from: 0, to: p.count, by: 4) where p[i + 3] != 0 && p[i + 3] != 255 {
                        let a = Int(p[i + 3])
                        for k in 0..<3 { p[i + k] = UInt8(min(255, (Int(p[i + k]) * 255 + a / 2) / a)) }
                    }
                }
            }
            if options.convertsColorProfile, heif_image_handle_get_raw_color_profile_size(handle) > 0 {
                var profile = [UInt8](repeating: 0, count: heif_image_handle_get_raw_color_profile_size(handle))
                if heif_image_handle_get_raw_color_profile(handle, &profile).code == heif_error_Ok {
                    bitmap = profile.withUnsafeBytes { ColorProfile.convertToSRGB(bitmap, profile: $0) }
                }
            }
            return CodecOutput(bitmap: bitmap)
        }
    }

    /// Whether libheif here can decode AV1 (AVIF) images.
    static var canDecodeAVIF: Bool { isInitialized && heif_have_decoder_for_format(heif_compression_AV1) != 0 }

    /// Whether libheif here can encode AV1 (AVIF) images.
    static var canEncodeAVIF: Bool { isInitialized && heif_have_encoder_for_format(heif_compression_AV1) != 0 }

    // MARK: - Helpers

    /// libheif's reference-counted initialisation (plugin registration), done once for the
    /// process and never undone.
    private static let isInitialized: Bool = heif_init(nil).code == heif_error_Ok

    /// Parses `data` without copying it and runs `body` with the primary image's handle.
    private static func withPrimaryImage<T>(
        _ data: UnsafeRawBufferPointer, options: DecodeOptions, _ body: (OpaquePointer) throws(ImagingError) -> T
    ) throws(ImagingError) -> T {
        guard isInitialized, let context = heif_context_alloc() else {
            throw .corrupted(reason: "libheif could not be initialised")
        }
        defer { heif_context_free(context) }
        // No side can be longer than the pixel limit; libheif's own guard refuses more.
        heif_context_set_maximum_image_size_limit(context, Int32(clamping: options.maximumPixelCount))
        var status = heif_context_read_from_memory_without_copy(context, data.baseAddress, data.count, nil)
        guard status.code == heif_error_Ok else { throw error(status, data: data) }
        var handle: OpaquePointer?
        status = heif_context_get_primary_image_handle(context, &handle)
        guard status.code == heif_error_Ok, let handle else { throw error(status, data: data) }
        defer { heif_image_handle_release(handle) }
        return try body(handle)
    }

    /// The typed error for a libheif status about `data`: a file libheif does not take for
    /// HEIF is `unsupportedFormat(nil)`, one whose compression has no plugin here names its
    /// sniffed format.
    private static func error(_ status: heif_error, data: UnsafeRawBufferPointer) -> ImagingError {
        let message = status.message.map { String(cString: $0) } ?? "code \(status.code.rawValue)"
        if status.subcode == heif_suberror_End_of_data { return .truncated }
        switch status.code {
        case heif_error_Unsupported_filetype:
            return .unsupportedFormat(nil)
        case heif_error_Unsupported_feature where status.subcode == heif_suberror_Unsupported_codec:
            return .unsupportedFormat(ImageFormat(sniffing: data) ?? .heic)
        case heif_error_Memory_allocation_error where status.subcode == heif_suberror_Security_limit_exceeded:
            return .corrupted(reason: "libheif security limit: \(message)")
        default:
            return .corrupted(reason: "libheif: \(message)")
        }
    }
}

// MARK: - Encoding

extension HEIFCodec {
    /// `image` as AVIF at `quality` (0–100), with alpha when the image has it.
    /// - Throws: ``ImagingError/unsupportedFormat(_:)`` (with `.avif`) when libheif has no AV1 encoder,
    ///   ``ImagingError/encodingFailed(reason:)`` when encoding fails.
    static func encodeAVIF(_ image: Bitmap, quality: Int) throws(ImagingError) -> Data {
        guard canEncodeAVIF, let context = heif_context_alloc() else { throw .unsupportedFormat(.avif) }
        defer { heif_context_free(context) }
        var encoder: OpaquePointer?
        guard heif_context_get_encoder_for_format(context, heif_compression_AV1, &encoder).code == heif_error_Ok,
              let encoder
        else { throw .unsupportedFormat(.avif) }
        defer { heif_encoder_release(encoder) }
        try check(heif_encoder_set_lossy_quality(encoder, Int32(min(max(quality, 0), 100))))

        var heifImage: OpaquePointer?
        let chroma = image.format == .rgba8 ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB
        try check(heif_image_create(Int32(clamping: image.width), Int32(clamping: image.height), heif_colorspace_RGB, chroma, &heifImage))
        guard let heifImage else { throw .encodingFailed(reason: "libheif could not create an image") }
        defer { heif_image_release(heifImage) }
        try check(heif_image_add_plane(heifImage, heif_channel_interleaved, Int32(clamping: image.width), Int32(clamping: image.height), 8))
        var stride: Int32 = 0
        guard let plane = heif_image_get_plane(heifImage, heif_channel_interleaved, &stride) else {
            throw .encodingFailed(reason: "libheif gave no pixel plane")
        }
        image.pixels.withUnsafeBufferPointer { pixels in
            for y in 0..<image.height {
                (plane + y * Int(stride)).update(from: pixels.baseAddress! + y * image.bytesPerRow, count: image.bytesPerRow)
            }
        }
        var handle: OpaquePointer?
        try check(heif_context_encode_image(context, heifImage, encoder, nil, &handle))
        if let handle { heif_image_handle_release(handle) }

        var output = Data()
        var writer = heif_writer(writer_api_version: 1) { _, bytes, size, userdata in
            if let bytes, let userdata {
                userdata.assumingMemoryBound(to: Data.self).pointee.append(bytes.assumingMemoryBound(to: UInt8.self), count: size)
            }
            return heif_error(code: heif_error_Ok, subcode: heif_suberror_Unspecified, message: nil)
        }
        try withUnsafeMutablePointer(to: &output) { pointer throws(ImagingError) in
            try check(heif_context_write(context, &writer, pointer))
        }
        guard !output.isEmpty else { throw .encodingFailed(reason: "libheif wrote nothing") }
        return output
    }

    private static func check(_ status: heif_error) throws(ImagingError) {
        guard status.code == heif_error_Ok else {
            throw .encodingFailed(reason: "libheif: " + (status.message.map { String(cString: $0) } ?? "code \(status.code.rawValue)"))
        }
    }
}
#endif
