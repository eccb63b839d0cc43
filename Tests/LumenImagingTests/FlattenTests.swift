import Testing
@testable import LumenImaging

/// ``Bitmap/flattened(onto:)``: alpha composited over an opaque colour.
@Suite(.timeLimit(.minutes(1)))
struct FlattenTests {
    @Test func eachPixelIsItsColourOverTheBackgroundByItsAlpha() {
        // Opaque red, transparent black, half-transparent green, a quarter-opaque blue.
        let image = Bitmap(width: 4, height: 1, format: .rgba8, pixels: [
            255, 0, 0, 255,   0, 0, 0, 0,   0, 255, 0, 128,   0, 0, 255, 64,
        ])
        let flat = image.flattened(onto: (red: 255, green: 255, blue: 255))
        #expect(flat.format == .rgb8 && flat.width == 4 && flat.height == 1)
        #expect(flat.pixels == [
            255, 0, 0,
            255, 255, 255,
            127, 255, 127, // 255 × 127 / 255 = 127 for red and blue; green stays 255
            191, 191, 255, // 255 × 191 / 255 = 191
        ])
        #expect(image.flattened(onto: (red: 10, green: 20, blue: 30)).pixels[3..<6] == [10, 20, 30])
    }

    @Test func anImageWithoutAlphaIsUnchanged() {
        let image = Bitmap(width: 2, height: 1, format: .rgb8, pixels: [1, 2, 3, 4, 5, 6])
        #expect(image.flattened(onto: (red: 255, green: 255, blue: 255)) == image)
    }
}
