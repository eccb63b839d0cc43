import Foundation

/// WebP decoding and encoding. (Being written: reports every input as unsupported for now.)
enum WebPCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        throw .unsupportedFormat
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        throw .unsupportedFormat
    }
}

extension WebPCodec {
    static func encode(_ image: Bitmap, quality: Int, lossless: Bool) throws(ImagingError) -> Data {
        throw .encodingFailed(reason: "WebP encoder not built yet")
    }
}
