import Foundation

/// JPEG decoding and encoding. (Being written: reports every input as unsupported for now.)
enum JPEGCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        throw .unsupportedFormat
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        throw .unsupportedFormat
    }
}

extension JPEGCodec {
    static func encode(_ image: Bitmap, quality: Int, progressive: Bool) throws(ImagingError) -> Data {
        throw .encodingFailed(reason: "JPEG encoder not built yet")
    }
}
