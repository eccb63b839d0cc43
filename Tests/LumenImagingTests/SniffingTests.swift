import Testing
import Foundation
@testable import LumenImaging

@Suite struct SniffingTests {
    @Test func sniffsPNG() {
        #expect(ImageFormat(sniffing: Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])) == .png)
    }
}
