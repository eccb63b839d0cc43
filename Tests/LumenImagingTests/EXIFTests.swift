import Foundation
import Testing
@testable import LumenImaging

@Suite(.timeLimit(.minutes(1)))
struct EXIFTests {
    private func orientation(_ bytes: [UInt8]) -> ImageOrientation {
        bytes.withUnsafeBytes { EXIF.orientation(tiff: $0) }
    }

    @Test(arguments: ImageOrientation.allCases, [false, true])
    func readsEveryOrientationInBothByteOrders(expected: ImageOrientation, bigEndian: Bool) {
        let tiff = CorpusJPEG.tiff(entries: [(0x0112, 3, 1, expected.rawValue)], bigEndian: bigEndian)
        #expect(orientation(tiff) == expected)
    }

    @Test func findsTheTagAmongOtherEntries() {
        let tiff = CorpusJPEG.tiff(entries: [(0x010F, 2, 4, 0), (0x0110, 2, 4, 0), (0x0112, 3, 1, 6), (0x011A, 5, 1, 0)])
        #expect(orientation(tiff) == .right)
    }

    @Test func absentTagIsUp() {
        #expect(orientation(CorpusJPEG.tiff(entries: [(0x010F, 2, 4, 0)])) == .up)
        #expect(orientation(CorpusJPEG.tiff(entries: [])) == .up)
    }

    @Test(arguments: [0, 9, 255, 0xFFFF])
    func outOfRangeValueIsUp(value: Int) {
        #expect(orientation(CorpusJPEG.tiff(entries: [(0x0112, 3, 1, value)])) == .up)
    }

    @Test func wrongTypeOrCountIsUp() {
        #expect(orientation(CorpusJPEG.tiff(entries: [(0x0112, 4, 1, 6)])) == .up)  // LONG
        #expect(orientation(CorpusJPEG.tiff(entries: [(0x0112, 3, 0, 6)])) == .up)  // no value
        #expect(orientation(CorpusJPEG.tiff(entries: [(0x0112, 3, 70_000, 6)])) == .up)  // value is an offset
    }

    @Test func hostileHeadersAreUp() {
        let good = CorpusJPEG.tiff(entries: [(0x0112, 3, 1, 6)])
        #expect(orientation(good) == .right)  // the baseline the mutations below break
        #expect(orientation([]) == .up)
        #expect(orientation([0x49, 0x49, 42, 0]) == .up)  // too short for an IFD offset
        var badMark = good; badMark[0] = 0x4D  // "MI"
        #expect(orientation(badMark) == .up)
        var badMagic = good; badMagic[2] = 43
        #expect(orientation(badMagic) == .up)
        var offsetPastEnd = good; offsetPastEnd[4] = 0xFF; offsetPastEnd[5] = 0xFF; offsetPastEnd[6] = 0xFF; offsetPastEnd[7] = 0xFF
        #expect(orientation(offsetPastEnd) == .up)
        var offsetIntoHeader = good; offsetIntoHeader[4] = 2
        #expect(orientation(offsetIntoHeader) == .up)
        // 65535 entries declared, one present: the walk stops at the end of the data.
        var hugeCount = CorpusJPEG.tiff(entries: [(0x010F, 2, 4, 0)])
        hugeCount[8] = 0xFF; hugeCount[9] = 0xFF
        #expect(orientation(hugeCount) == .up)
        let cut = Array(good.prefix(8 + 2 + 6))  // the entry is cut in the middle
        #expect(orientation(cut) == .up)
    }

    @Test func randomBytesNeverCrash() {
        var rng = CorpusJPEG.Random(seed: 7)
        let good = CorpusJPEG.tiff(entries: [(0x0112, 3, 1, 3)])
        for _ in 0..<2000 {
            var bytes = good
            for _ in 0..<Int(rng.next() % 4 + 1) {
                bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next())
            }
            let n = Int(rng.next() % UInt64(bytes.count + 1))
            _ = orientation(Array(bytes.prefix(n)))
        }
    }

    @Test func jpegAPP1OrientationIsAppliedOnDecode() throws {
        let stored = CorpusJPEG.photoLike(width: 64, height: 48)
        let jpeg = try stored.encode(as: .jpeg(quality: 95))
        let plain = try ImageDecoder.decode(jpeg).bitmap
        for bigEndian in [false, true] {
            let tagged = CorpusJPEG.inserting([(0xE1, CorpusJPEG.exifPayload(orientation: 6, bigEndian: bigEndian))], into: jpeg)
            let info = try ImageDecoder.info(for: tagged)
            #expect(info.orientation == .right)
            #expect(info.width == 48 && info.height == 64)
            let decoded = try ImageDecoder.decode(tagged)
            #expect(decoded.bitmap == plain.applying(.right))
            #expect(decoded.statistics.orientation == .right)
        }
    }
}
