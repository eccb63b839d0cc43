/// GIF decoding and encoding. (Being written: reports every input as unsupported for now.)
enum GIFCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        throw .unsupportedFormat
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        throw .unsupportedFormat
    }
}
