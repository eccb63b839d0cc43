import Testing
@testable import LumenImaging

@Suite(.timeLimit(.minutes(1)))
struct OrientationTests {
    /// The stored image, 3×2, each pixel named by a letter:
    ///
    ///     A B C
    ///     D E F
    static let letters: [Character] = ["A", "B", "C", "D", "E", "F"]

    static func stored(_ format: PixelFormat) -> Bitmap {
        let c = format.channels
        var pixels: [UInt8] = []
        for (i, _) in letters.enumerated() {
            // Distinct values per channel so a swapped channel would show too.
            let px: [UInt8] = [UInt8(10 + i), UInt8(100 + i), UInt8(200 + i), UInt8(50 + i)]
            pixels += px.prefix(c)
        }
        return Bitmap(width: 3, height: 2, format: format, pixels: pixels)
    }

    /// Reads an oriented bitmap back as rows of letters.
    static func letterRows(_ bitmap: Bitmap) -> [String] {
        (0..<bitmap.height).map { y in
            String((0..<bitmap.width).map { x in
                let p = bitmap.rgba(x: x, y: y)
                let i = Int(p.r) - 10
                let intact = Int(p.g) == 100 + i && Int(p.b) == 200 + i && (bitmap.format == .rgb8 || Int(p.a) == 50 + i)
                return intact && letters.indices.contains(i) ? letters[i] : "?"
            })
        }
    }

    /// Worked out by hand from the EXIF definitions (where the stored 0th row and 0th column
    /// end up on the upright picture), not from the implementation:
    /// 1 as stored; 2 mirrored left–right; 3 turned 180°; 4 mirrored top–bottom;
    /// 5 0th row on the left, 0th column on top (transpose);
    /// 6 0th row on the right, 0th column on top (turn 90° clockwise);
    /// 7 0th row on the right, 0th column at the bottom (transverse);
    /// 8 0th row on the left, 0th column at the bottom (turn 90° anticlockwise).
    static let expected: [(ImageOrientation, [String])] = [
        (.up, ["ABC", "DEF"]),
        (.upMirrored, ["CBA", "FED"]),
        (.down, ["FED", "CBA"]),
        (.downMirrored, ["DEF", "ABC"]),
        (.leftMirrored, ["AD", "BE", "CF"]),
        (.right, ["DA", "EB", "FC"]),
        (.rightMirrored, ["FC", "EB", "DA"]),
        (.left, ["CF", "BE", "AD"]),
    ]

    @Test(arguments: [PixelFormat.rgb8, .rgba8])
    func allEightOrientationsMatchTheHandWrittenMapping(_ format: PixelFormat) {
        for (orientation, rows) in Self.expected {
            let upright = Self.stored(format).applying(orientation)
            #expect(upright.format == format)
            #expect(Self.letterRows(upright) == rows, "orientation \(orientation.rawValue)")
        }
    }

    /// Bigger than one 32-pixel tile and not a multiple of it, against a per-pixel walk of
    /// the same hand mapping (as composition of flips and turns).
    @Test(arguments: [PixelFormat.rgb8, .rgba8])
    func largeImagesMatchAPerPixelWalk(_ format: PixelFormat) {
        let image = SyntheticImages.pattern(width: 71, height: 45, format: format, seed: 7)
        let w = image.width, h = image.height
        for orientation in ImageOrientation.allCases {
            let out = image.applying(orientation)
            #expect(out.width == (orientation.swapsDimensions ? h : w))
            #expect(out.height == (orientation.swapsDimensions ? w : h))
            var mismatches = 0
            for y in 0..<out.height {
                for x in 0..<out.width {
                    let (sx, sy): (Int, Int)
                    switch orientation {
                    case .up: (sx, sy) = (x, y)
                    case .upMirrored: (sx, sy) = (w - 1 - x, y)
                    case .down: (sx, sy) = (w - 1 - x, h - 1 - y)
                    case .downMirrored: (sx, sy) = (x, h - 1 - y)
                    case .leftMirrored: (sx, sy) = (y, x)
                    case .right: (sx, sy) = (y, h - 1 - x)
                    case .rightMirrored: (sx, sy) = (w - 1 - y, h - 1 - x)
                    case .left: (sx, sy) = (w - 1 - y, x)
                    }
                    if out.rgba(x: x, y: y) != image.rgba(x: sx, y: sy) { mismatches += 1 }
                }
            }
            #expect(mismatches == 0, "orientation \(orientation.rawValue)")
        }
    }

    @Test func orientationsRoundTripThroughTheirInverses() {
        let image = SyntheticImages.pattern(width: 40, height: 33, format: .rgba8, seed: 3)
        // Turning clockwise then anticlockwise, or mirroring twice, gives the image back.
        #expect(image.applying(.right).applying(.left) == image)
        #expect(image.applying(.down).applying(.down) == image)
        #expect(image.applying(.leftMirrored).applying(.leftMirrored) == image)
        #expect(image.applying(.rightMirrored).applying(.rightMirrored) == image)
        #expect(image.applying(.right).applying(.right) == image.applying(.down))
    }

    @Test func cropCopiesTheRectangle() {
        let image = SyntheticImages.pattern(width: 20, height: 10, format: .rgb8)
        let crop = image.cropped(x: 3, y: 2, width: 5, height: 4)
        #expect(crop.width == 5 && crop.height == 4)
        for y in 0..<4 {
            for x in 0..<5 { #expect(crop.rgba(x: x, y: y) == image.rgba(x: x + 3, y: y + 2)) }
        }
        #expect(image.cropped(x: 0, y: 0, width: 20, height: 10) == image)
        // Full-width rows (a single block copy).
        let band = image.cropped(x: 0, y: 3, width: 20, height: 4)
        #expect(band.pixels == Array(image.pixels[(3 * 20 * 3)..<(7 * 20 * 3)]))
    }
}
