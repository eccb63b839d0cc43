import Foundation
import Testing
@testable import LumenImaging

/// Formats are recognised by their magic bytes, never by name.
@Suite(.timeLimit(.minutes(1)))
struct SniffingTests {
    static func ftyp(major: String, compatible: [String]) -> [UInt8] {
        let body = Array(major.utf8) + [0, 0, 0, 0] + compatible.flatMap { Array($0.utf8) }
        let size = 8 + body.count
        return [0, 0, 0, UInt8(size)] + Array("ftyp".utf8) + body + [0, 0, 0, 8] + Array("meta".utf8)
    }

    static let cases: [([UInt8], ImageFormat?)] = [
        ([0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10], .jpeg),
        ([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0], .png),
        (Array("RIFF".utf8) + [0x24, 0, 0, 0] + Array("WEBPVP8 ".utf8), .webp),
        (Array("GIF89a".utf8) + [1, 0, 1, 0], .gif),
        (Array("GIF87a".utf8) + [1, 0, 1, 0], .gif),
        (ftyp(major: "avif", compatible: ["mif1", "miaf"]), .avif),
        (ftyp(major: "mif1", compatible: ["mif1", "avif", "miaf"]), .avif),
        (ftyp(major: "heic", compatible: ["mif1", "heic"]), .heic),
        (ftyp(major: "mif1", compatible: ["heic"]), .heic),
        (ftyp(major: "isom", compatible: ["mp41"]), nil),  // an MP4 is not an image
        ([0xFF, 0xD8], nil),  // too short to be sure
        (Array("RIFF".utf8) + [0x24, 0, 0, 0] + Array("WAVE".utf8), nil),
        (Array("BM".utf8) + [0, 0, 0, 0], nil),
        ([], nil),
    ]

    @Test(arguments: cases.indices)
    func sniffsByMagicBytes(index: Int) {
        let (bytes, expected) = Self.cases[index]
        #expect(ImageFormat(sniffing: Data(bytes)) == expected, "case \(index)")
    }

    @Test func realFilesAreRecognisedWhateverTheirName() throws {
        let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/corpus/real-world")
        let expected: [String: ImageFormat] = [
            "hopper.jpg": .jpeg, "hopper.png": .png, "hopper.webp": .webp, "hopper.gif": .gif,
            "avif_hopper.avif": .avif, "avif_star.avifs": .avif,
        ]
        for (name, format) in expected {
            #expect(ImageFormat(sniffing: try Data(contentsOf: corpus.appendingPathComponent(name))) == format, "\(name)")
        }
    }
}
