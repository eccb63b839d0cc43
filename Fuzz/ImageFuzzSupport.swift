// What the image harnesses share. Not part of the package: compiled into each image target
// by scripts/fuzz.sh.
import Foundation

/// CRC-32 (ISO 3309, as PNG uses it).
private let crcTable: [UInt32] = (0..<256).map { n in
    var c = UInt32(n)
    for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
    return c
}

/// `bytes` with every complete PNG chunk's CRC recomputed: libspng rejects a bad CRC at once,
/// so without this nearly every mutation would stop at the first chunk.
func fixingPNGChecksums(_ bytes: [UInt8]) -> [UInt8] {
    let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    guard bytes.count >= 8, Array(bytes[0..<8]) == signature else { return bytes }
    var out = bytes
    var p = 8
    while p + 12 <= out.count {
        let length = Int(out[p]) << 24 | Int(out[p + 1]) << 16 | Int(out[p + 2]) << 8 | Int(out[p + 3])
        let end = p + 8 + length
        guard length <= Int(Int32.max), end + 4 <= out.count else { break }
        var c: UInt32 = 0xFFFF_FFFF
        for i in (p + 4)..<end { c = crcTable[Int((c ^ UInt32(out[i])) & 0xFF)] ^ (c >> 8) }
        c ^= 0xFFFF_FFFF
        out[end] = UInt8(c >> 24); out[end + 1] = UInt8(c >> 16 & 0xFF)
        out[end + 2] = UInt8(c >> 8 & 0xFF); out[end + 3] = UInt8(c & 0xFF)
        p = end + 4
    }
    return out
}

/// `precondition` with its message: an optimised build's precondition traps without one.
func require(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition { fatalError(message(), file: file, line: line) }
}
