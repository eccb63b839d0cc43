/// EXIF metadata shared by the codecs (JPEG APP1, WebP EXIF chunk, PNG eXIf).
enum EXIF {
    /// The orientation stored in a TIFF-structured EXIF block (starting at the byte order mark
    /// "II"/"MM"), `.up` when absent or unreadable. (Being written.)
    static func orientation(tiff: UnsafeRawBufferPointer) -> ImageOrientation {
        .up
    }
}
