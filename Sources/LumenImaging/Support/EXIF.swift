/// EXIF metadata shared by the codecs (JPEG APP1, WebP EXIF chunk, PNG eXIf).
enum EXIF {
    /// The orientation stored in a TIFF-structured EXIF block, `.up` when absent or unreadable.
    ///
    /// `tiff` starts at the byte-order mark ("II" or "MM"). Only IFD0's tag 0x0112 is read, and
    /// only when it is a SHORT with a value 1–8; every offset and count is bounds-checked, so a
    /// hostile block gives `.up`, never a crash.
    static func orientation(tiff: UnsafeRawBufferPointer) -> ImageOrientation {
        let count = tiff.count
        guard count >= 8 else { return .up }
        let littleEndian: Bool
        switch (tiff[0], tiff[1]) {
        case (0x49, 0x49): littleEndian = true
        case (0x4D, 0x4D): littleEndian = false
        default: return .up
        }
        func u16(_ at: Int) -> Int {
            let a = Int(tiff[at]), b = Int(tiff[at + 1])
            return littleEndian ? a | b << 8 : a << 8 | b
        }
        func u32(_ at: Int) -> Int {
            littleEndian ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2)
        }
        guard u16(2) == 42 else { return .up }
        let ifd = u32(4)  // at most 2^32 - 1: no overflow on 64-bit Int
        guard ifd >= 8, ifd <= count - 2 else { return .up }
        let entries = u16(ifd)
        for i in 0..<entries {
            let entry = ifd + 2 + i * 12
            guard entry <= count - 12 else { return .up }
            guard u16(entry) == 0x0112 else { continue }
            // Type 3 (SHORT), count 1: the value sits in the first two bytes of the value field.
            guard u16(entry + 2) == 3, u32(entry + 4) == 1 else { return .up }
            return ImageOrientation(rawValue: u16(entry + 8)) ?? .up
        }
        return .up
    }
}
