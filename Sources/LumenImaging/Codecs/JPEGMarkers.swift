import Foundation

/// What a walk over a JPEG's marker segments found: metadata TurboJPEG does not report
/// (EXIF orientation, ICC profile, Adobe APP14), the scan count, and whether the data ends
/// before the image does.
///
/// The walk trusts nothing: every length is bounds-checked, a segment running past the end
/// marks the data truncated, and the scan count is compared with the caller's limit as it
/// grows, so a hostile progressive JPEG is refused before any decoding starts.
struct JPEGMarkers {
    /// The first start-of-frame segment's size and component count, stored orientation.
    var frame: (width: Int, height: Int, components: Int)?
    /// SOF2/6/10/14: progressive Huffman or arithmetic coding.
    var isProgressive = false
    /// Orientation from the first APP1 "Exif" segment, `.up` without one.
    var orientation: ImageOrientation = .up
    /// The ICC profile reassembled from its APP2 chunks, `nil` when absent or incomplete.
    var iccProfile: [UInt8]?
    /// The APP14 "Adobe" transform flag (0 CMYK/RGB, 1 YCbCr, 2 YCCK), `nil` without the
    /// marker. Its presence also means CMYK data is stored inverted (Photoshop's convention).
    var adobeTransform: Int?
    /// Number of start-of-scan markers before the end of the image.
    var scanCount = 0
    /// Whether the end-of-image marker was reached.
    var reachedEnd = false
    /// Whether the data ended inside a segment or before the end-of-image marker.
    var isTruncated = false
    /// When the data ends inside a marker segment (or in the fill bytes before one) rather than
    /// inside a scan's entropy-coded data: the offset of that segment's first byte. The bytes
    /// before it are whole segments and scans, so they can be decoded as an image of their own.
    var incompleteSegmentStart: Int?

    /// Walks the markers of the JPEG in `bytes`.
    /// - Parameter scanLimit: the most start-of-scan markers allowed.
    /// - Throws: ``ImagingError/corrupted(reason:)`` for a malformed marker structure or more
    ///   scans than `scanLimit`.
    init(walking bytes: UnsafeRawBufferPointer, scanLimit: Int) throws(ImagingError) {
        let n = bytes.count
        guard n >= 2, bytes[0] == 0xFF, bytes[1] == 0xD8 else {
            throw .corrupted(reason: "JPEG data does not start with a start-of-image marker")
        }
        var chunks: [Int: ArraySlice<UInt8>] = [:]
        var chunkCount = 0
        var chunksConsistent = true
        var sawExif = false
        var p = 2
        walk: while true {
            // Bytes that are not a marker are skipped, as libjpeg does (with a warning).
            while p < n && bytes[p] != 0xFF { p += 1 }
            let segmentStart = p
            while p < n && bytes[p] == 0xFF { p += 1 }  // fill bytes
            guard p < n else {
                isTruncated = true
                if segmentStart < n { incompleteSegmentStart = segmentStart }
                break
            }
            let marker = bytes[p]
            p += 1
            switch marker {
            case 0xD9:
                reachedEnd = true
                break walk
            case 0xD8:
                throw .corrupted(reason: "JPEG data has a second start-of-image marker")
            case 0x00, 0x01, 0xD0...0xD7:
                continue walk  // standalone markers (or a stray stuffed zero)
            case 0x02...0xBF:
                // Reserved codes: libjpeg stops on them too. Random junk mostly lands here.
                throw .corrupted(reason: "JPEG data has an unknown marker 0xFF\(String(marker, radix: 16, uppercase: true))")
            default:
                break
            }
            guard p + 2 <= n else {
                isTruncated = true
                incompleteSegmentStart = segmentStart
                break
            }
            let length = Int(bytes[p]) << 8 | Int(bytes[p + 1])
            guard length >= 2 else {
                throw .corrupted(reason: "JPEG marker 0x\(String(marker, radix: 16)) has a bad length \(length)")
            }
            let end = p + length
            guard end <= n else {
                isTruncated = true
                incompleteSegmentStart = segmentStart
                break
            }
            let segment = UnsafeRawBufferPointer(rebasing: bytes[(p + 2)..<end])
            p = end
            switch marker {
            case 0xC0...0xC3, 0xC5...0xC7, 0xC9...0xCB, 0xCD...0xCF:
                guard segment.count >= 6 else { throw .corrupted(reason: "JPEG start-of-frame segment is too short") }
                if frame == nil {
                    let height = Int(segment[1]) << 8 | Int(segment[2])
                    let width = Int(segment[3]) << 8 | Int(segment[4])
                    frame = (width, height, Int(segment[5]))
                    isProgressive = [0xC2, 0xC6, 0xCA, 0xCE].contains(marker)
                }
            case 0xE1 where !sawExif && Self.has(segment, prefix: [0x45, 0x78, 0x69, 0x66, 0, 0]):  // "Exif\0\0"
                sawExif = true
                orientation = EXIF.orientation(tiff: UnsafeRawBufferPointer(rebasing: segment[6...]))
            case 0xE2 where Self.has(segment, prefix: Self.iccSignature) && segment.count >= 14:
                let sequence = Int(segment[12]), count = Int(segment[13])
                if sequence < 1 || sequence > count || (chunkCount != 0 && count != chunkCount) || chunks[sequence] != nil {
                    chunksConsistent = false
                } else {
                    chunkCount = count
                    chunks[sequence] = ArraySlice(segment[14...])
                }
            case 0xEE where Self.has(segment, prefix: [0x41, 0x64, 0x6F, 0x62, 0x65]) && segment.count >= 12:  // "Adobe"
                adobeTransform = Int(segment[11])
            case 0xDA:
                scanCount += 1
                if scanCount > scanLimit {
                    throw .corrupted(
                        reason: "JPEG has more than \(scanLimit) scans (the progressive scan limit, maximumProgressiveScans)")
                }
                // Skip the entropy-coded data up to the next real marker: FF followed by
                // something other than a stuffed zero, a restart marker or another fill byte.
                guard let next = Self.endOfEntropyData(bytes, from: p) else { isTruncated = true; break walk }
                p = next
            default:
                break
            }
        }
        if chunksConsistent, chunkCount > 0, chunks.count == chunkCount {
            iccProfile = (1...chunkCount).flatMap { chunks[$0]! }
        }
        if !reachedEnd { isTruncated = true }
    }

    private static let iccSignature: [UInt8] = Array("ICC_PROFILE".utf8) + [0]

    private static func has(_ segment: UnsafeRawBufferPointer, prefix: [UInt8]) -> Bool {
        guard segment.count >= prefix.count else { return false }
        for i in 0..<prefix.count where segment[i] != prefix[i] { return false }
        return true
    }

    /// The offset of the 0xFF that starts the marker after entropy-coded data beginning at
    /// `start`, or `nil` when the data ends first.
    private static func endOfEntropyData(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        let n = bytes.count
        var p = start
        while p < n {
            guard let hit = memchr(base + p, 0xFF, n - p) else { return nil }
            let q = base.distance(to: UnsafeRawPointer(hit))
            guard q + 1 < n else { return nil }
            switch bytes[q + 1] {
            case 0x00, 0xD0...0xD7: p = q + 2
            case 0xFF: p = q + 1
            default: return q
            }
        }
        return nil
    }
}
