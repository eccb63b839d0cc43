import Foundation
import Testing
@testable import LumenImaging

/// Seeded random damage to small PNG and GIF files: every outcome is an image or an
/// `ImagingError` (typed throws guarantee the type); the test shows there is no crash or trap.
@Suite(.timeLimit(.minutes(1)))
struct PNGFuzzTests {
    static let cases = 300

    /// Runs every entry point on `data`; returns whether anything decoded.
    @discardableResult
    static func exercise(_ data: Data) -> Bool {
        var decoded = false
        if (try? ImageDecoder.info(for: data)) != nil { decoded = true }
        do {
            let image = try ImageDecoder.decode(data)
            #expect(image.bitmap.pixels.count == image.bitmap.width * image.bitmap.height * image.bitmap.format.channels)
            decoded = true
        } catch {
            _ = error.description  // typed: ImagingError
        }
        if (try? ImageDecoder.decodeFrames(data, options: DecodeOptions(maximumPixelCount: 4_000_000))) != nil { decoded = true }
        return decoded
    }

    /// `cases` mutants of `original`: half truncations, half 1–4 bit flips.
    static func mutants(of original: Data, seed: UInt64) -> [Data] {
        var random = SeededRandom(seed: seed)
        let bytes = [UInt8](original)
        return (0..<cases).map { i in
            if i % 2 == 0 {
                return Data(bytes.prefix(Int.random(in: 0..<bytes.count, using: &random)))
            }
            var copy = bytes
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let at = Int.random(in: 0..<copy.count, using: &random)
                copy[at] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
            }
            return Data(copy)
        }
    }

    @Test func damagedPNGNeverCrashes() throws {
        let original = try CorpusPNG.data("pngsuite/png/basi3p02.png")  // interlaced palette, small
        #expect(Self.exercise(original))
        var failures = 0
        for mutant in Self.mutants(of: original, seed: 0x5EED_0001) where !Self.exercise(mutant) { failures += 1 }
        // Every byte of a PNG is covered by a CRC or the signature: damage must mostly fail.
        #expect(failures > Self.cases / 2)
    }

    @Test func damagedGIFNeverCrashes() throws {
        let original = try CorpusPNG.data("real-world/dispose_bgnd.gif")  // 5 frames, local maps
        #expect(Self.exercise(original))
        for mutant in Self.mutants(of: original, seed: 0x5EED_0002) { Self.exercise(mutant) }
    }
}
