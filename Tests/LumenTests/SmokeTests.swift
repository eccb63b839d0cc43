import Testing
import Lumen

@Suite struct SmokeTests {
    @Test func bitmapCrop() {
        let b = Bitmap(width: 2, height: 1, format: .rgb8, pixels: [1, 2, 3, 4, 5, 6])
        #expect(b.cropped(x: 1, y: 0, width: 1, height: 1).pixels == [4, 5, 6])
    }
}
