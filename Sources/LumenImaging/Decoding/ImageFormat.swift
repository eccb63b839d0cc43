import Foundation

/// An encoded image format, recognised by magic bytes.
public enum ImageFormat: String, Sendable, Hashable, CaseIterable {
    /// JPEG: data starting with `FF D8 FF`.
    case jpeg
    /// PNG: data starting with the 8-byte PNG signature.
    case png
    /// WebP: a `RIFF` container whose form type is `WEBP`.
    case webp
    /// GIF: data starting with `GIF87a` or `GIF89a`.
    case gif
    /// HEIC: an ISO BMFF `ftyp` box with a HEIF brand (`heic`, `heix`, `hevc`, `hevx`, `heim`,
    /// `heis`, or the generic `mif1`/`msf1`). Decoded only when Lumen is built with libheif.
    case heic
    /// AVIF: an ISO BMFF `ftyp` box with an `avif` or `avis` brand, which wins over HEIF
    /// brands. Decoded only when Lumen is built with libheif.
    case avif

    /// The format of `data`, from its first bytes; `nil` when no supported format matches.
    /// The file name or MIME type is never consulted.
    public init?(sniffing data: Data) {
        guard let format = data.withUnsafeBytes({ ImageFormat(sniffing: $0) }) else { return nil }
        self = format
    }

    /// The format of the bytes in `b`, from its first bytes; `nil` when no supported format
    /// matches.
    public init?(sniffing b: UnsafeRawBufferPointer) {
        func has(_ bytes: [UInt8], at offset: Int = 0) -> Bool {
            guard b.count >= offset + bytes.count else { return false }
            for (i, v) in bytes.enumerated() where b[offset + i] != v { return false }
            return true
        }
        if has([0xFF, 0xD8, 0xFF]) {
            self = .jpeg
        } else if has([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            self = .png
        } else if has(Array("RIFF".utf8)) && has(Array("WEBP".utf8), at: 8) {
            self = .webp
        } else if has(Array("GIF87a".utf8)) || has(Array("GIF89a".utf8)) {
            self = .gif
        } else if has(Array("ftyp".utf8), at: 4), b.count >= 12 {
            // The major brand, then the compatible brands (many AVIF files say `mif1` first and
            // `avif` among the compatible ones). The box size bounds the brand list.
            let boxSize = Int(b[0]) << 24 | Int(b[1]) << 16 | Int(b[2]) << 8 | Int(b[3])
            let end = min(b.count, max(12, min(boxSize, 256)))
            var brands = [String(decoding: UnsafeRawBufferPointer(rebasing: b[8..<12]), as: UTF8.self)]
            var offset = 16
            while offset + 4 <= end {
                brands.append(String(decoding: UnsafeRawBufferPointer(rebasing: b[offset..<offset + 4]), as: UTF8.self))
                offset += 4
            }
            if brands.contains(where: { $0 == "avif" || $0 == "avis" }) {
                self = .avif
            } else if brands.contains(where: { ["heic", "heix", "hevc", "hevx", "heim", "heis"].contains($0) }) {
                self = .heic
            } else if brands.contains(where: { $0 == "mif1" || $0 == "msf1" }) {
                self = .heic
            } else {
                return nil
            }
        } else {
            return nil
        }
    }

    /// The usual file extension.
    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        default: rawValue
        }
    }
}
