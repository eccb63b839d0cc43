import Foundation
import Testing
@testable import LumenImaging

// Colour, alpha and animation contract tests (issue 2, DESIGN.md §4, DecodingAndDownsampling.md).

enum ColourFixtures {
    /// 32×32 CMYK JPEG written by Pillow 13 (Adobe APP14, inverted CMYK as Photoshop writes it):
    /// quadrants white, cyan, red, 50 % black.
    static let cmykJPEG = Data(base64Encoded: "/9j/7gAOQWRvYmUAZAAAAAAA/9sAQwACAQEBAQECAQEBAgICAgIEAwICAgIFBAQDBAYFBgYGBQYGBgcJCAYHCQcGBggLCAkKCgoKCgYICwwLCgwJCgoK/8AAFAgAIAAgBEMRAE0RAFkRAEsRAP/EAB8AAAEFAQEBAQEBAAAAAAAAAAABAgMEBQYHCAkKC//EALUQAAIBAwMCBAMFBQQEAAABfQECAwAEEQUSITFBBhNRYQcicRQygZGhCCNCscEVUtHwJDNicoIJChYXGBkaJSYnKCkqNDU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6g4SFhoeIiYqSk5SVlpeYmZqio6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV1tfY2drh4uPk5ebn6Onq8fLz9PX29/j5+v/aAA4EQwBNAFkASwAAPwD9/K/fyv38r9/KKKKK/gDooooooor+/wAooooooor+AOiiiiiiiv7/ACv4A6/gDoooooor+/yv7/K/n/ooooor+AOv4A6/oAooooor+/yv7/K/n/oooor/2Q==")!
    /// 32×32 grayscale (one-component) JPEG written by Pillow 13: a horizontal ramp x × 8.
    static let grayJPEG = Data(base64Encoded: "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBwYGCAsICQoKCgoKBggLDAsKDAkKCgr/wAALCAAgACABAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEBAAA/APxv/Zt/5d/wr9AP2bf+Xf8ACv0A/Zt/5d/wr9AP2bf+Xf8ACv4//wBm3/l3/Cv0A/Zt/wCXf8K/QD9m3/l3/Cv0A/Zt/wCXf8K/j/8A2bf+Xf8ACv0A/Zt/5d/wr9AP2bf+Xf8ACv0A/Zt/5d/wr+P/APZt/wCXf8K/QD9m3/l3/Cv0A/Zt/wCXf8K/QD9m3/l3/Cv/2Q==")!

    /// D50-adapted XYZ of the Display P3 primaries.
    static let p3Red = (0.5151, 0.2412, -0.0011), p3Green = (0.2920, 0.6922, 0.0419), p3Blue = (0.1571, 0.0666, 0.7841)

    static func matrix(_ r: (Double, Double, Double), _ g: (Double, Double, Double), _ b: (Double, Double, Double)) -> [[Double]] {
        [[r.0, g.0, b.0], [r.1, g.1, b.1], [r.2, g.2, b.2]]
    }

    static func inverse(_ m: [[Double]]) -> [[Double]] {
        let a = m[0][0], b = m[0][1], c = m[0][2], d = m[1][0], e = m[1][1], f = m[1][2], g = m[2][0], h = m[2][1], i = m[2][2]
        let det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
        return [[(e * i - f * h) / det, (c * h - b * i) / det, (b * f - c * e) / det],
                [(f * g - d * i) / det, (a * i - c * g) / det, (c * d - a * f) / det],
                [(d * h - e * g) / det, (b * g - a * h) / det, (a * e - b * d) / det]]
    }

    /// The sRGB 8-bit value of linear-light P3 `rgb` (0…255 linear), clipped.
    static func srgbFromLinearP3(_ rgb: [Double]) -> [Double] {
        let p3 = matrix(p3Red, p3Green, p3Blue)
        let s = inverse(matrix(CorpusICCProfile.srgbRed, CorpusICCProfile.srgbGreen, CorpusICCProfile.srgbBlue))
        let v = rgb.map { $0 / 255 }
        let xyz = (0..<3).map { r in (0..<3).reduce(0.0) { $0 + p3[r][$1] * v[$1] } }
        let lin = (0..<3).map { r in (0..<3).reduce(0.0) { $0 + s[r][$1] * xyz[$1] } }
        return lin.map { CorpusJPEG.srgbEncoded(min(1, max(0, $0))) }
    }

    /// `picture` in `format` with `profile` embedded the way the format embeds ICC profiles.
    static func withProfile(_ picture: Bitmap, _ profile: [UInt8], format: String) throws -> Data {
        switch format {
        case "jpeg":
            return CorpusJPEG.inserting([(0xE2, Array("ICC_PROFILE".utf8) + [0, 1, 1] + profile)], into: try picture.encode(as: .jpeg(quality: 100)))
        case "png":
            let iccp = Array("icc".utf8) + [0, 0] + SyntheticPNG.zlibStored(profile)
            return Contract.pngInserting([SyntheticPNG.chunk("iCCP", iccp)], into: try picture.encode(as: .png))
        default:
            return Contract.extendedWebP(try picture.encode(as: .webp(lossless: true)), width: picture.width, height: picture.height, iccp: profile)
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ImagingColourContractTests {
    @Test func cmykAdobeJPEGHasTheRightColours() throws {
        let out = try ImageDecoder.decode(ColourFixtures.cmykJPEG).bitmap
        #expect(out.format == .rgb8)
        let expected: [((Int, Int), (Double, Double, Double))] = [
            ((8, 8), (255, 255, 255)), ((24, 8), (0, 255, 255)), ((8, 24), (255, 0, 0)), ((24, 24), (127, 127, 127)),
        ]
        for ((x, y), e) in expected {
            let p = out.rgba(x: x, y: y)
            let d = max(abs(Double(p.r) - e.0), abs(Double(p.g) - e.1), abs(Double(p.b) - e.2))
            #expect(d <= 8, "(\(x),\(y)) = \(p), expected \(e)")
        }
    }

    @Test func grayscaleJPEGIsGrayRGB() throws {
        let out = try ImageDecoder.decode(ColourFixtures.grayJPEG).bitmap
        #expect(out.format == .rgb8)
        for x in [0, 10, 31] {
            let p = out.rgba(x: x, y: 16)
            #expect(p.r == p.g && p.g == p.b)
            #expect(abs(Int(p.r) - x * 8) <= 4, "x \(x): \(p)")
        }
        // Scaled decode too.
        let small = try ImageDecoder.decode(ColourFixtures.grayJPEG, options: DecodeOptions(size: .maxPixelSize(8))).bitmap
        #expect((small.width, small.height) == (8, 8))
    }

    /// Grayscale, palette, 16-bit and tRNS PNGs: the right colours, alpha only when present.
    @Test func pngColourTypes() throws {
        // Gray 8-bit with tRNS on value 0.
        let gray = Contract.pngInserting([SyntheticPNG.chunk("tRNS", [0, 0])],
                                         into: SyntheticPNG.make(width: 2, height: 1, colorType: 0, zlib: SyntheticPNG.zlibStored([0, 0, 200])))
        let g = try ImageDecoder.decode(gray).bitmap
        #expect(g.format == .rgba8)
        #expect(g.pixels == [0, 0, 0, 0, 200, 200, 200, 255] || (g.pixels[3] == 0 && Array(g.pixels[4...]) == [200, 200, 200, 255]))
        // Palette without tRNS: rgb8.
        func palette(trns: [UInt8]?) -> Data {
            var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
            png += SyntheticPNG.chunk("IHDR", SyntheticPNG.be32(2) + SyntheticPNG.be32(1) + [8, 3, 0, 0, 0])
            png += SyntheticPNG.chunk("PLTE", [10, 20, 30, 200, 100, 50])
            if let trns { png += SyntheticPNG.chunk("tRNS", trns) }
            png += SyntheticPNG.chunk("IDAT", SyntheticPNG.zlibStored([0, 0, 1]))
            png += SyntheticPNG.chunk("IEND", [])
            return Data(png)
        }
        let opaque = try ImageDecoder.decode(palette(trns: nil)).bitmap
        #expect(opaque.format == .rgb8)
        #expect(opaque.pixels == [10, 20, 30, 200, 100, 50])
        let translucent = try ImageDecoder.decode(palette(trns: [128])).bitmap
        #expect(translucent.format == .rgba8)
        #expect(translucent.pixels == [10, 20, 30, 128, 200, 100, 50, 255])
        // 16-bit RGB with tRNS on the first pixel's exact 16-bit value.
        let raw16: [UInt8] = [0, 0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0x01]
        let rgb16 = Contract.pngInserting([SyntheticPNG.chunk("tRNS", [0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC])],
                                          into: SyntheticPNG.make(width: 2, height: 1, bitDepth: 16, colorType: 2, zlib: SyntheticPNG.zlibStored(raw16)))
        let c = try ImageDecoder.decode(rgb16).bitmap
        #expect(c.format == .rgba8)
        #expect(c.pixels[3] == 0)
        #expect(abs(Int(c.pixels[4]) - 255) <= 1 && abs(Int(c.pixels[5]) - 128) <= 1 && c.pixels[6] <= 1 && c.pixels[7] == 255, "\(c.pixels)")
        // 16-bit RGB without tRNS: rgb8.
        let plain16 = SyntheticPNG.make(width: 2, height: 1, bitDepth: 16, colorType: 2, zlib: SyntheticPNG.zlibStored(raw16))
        #expect(try ImageDecoder.decode(plain16).bitmap.format == .rgb8)
    }

    @Test func alphaOnlyWhenTheImageHasIt() throws {
        let opaque = CorpusJPEG.photoLike(width: 40, height: 30)
        #expect(try ImageDecoder.decode(opaque.encode(as: .jpeg())).bitmap.format == .rgb8)
        #expect(try ImageDecoder.decode(opaque.encode(as: .png)).bitmap.format == .rgb8)
        #expect(try ImageDecoder.decode(opaque.encode(as: .webp())).bitmap.format == .rgb8)
        #expect(try ImageDecoder.decode(opaque.encode(as: .webp(lossless: true))).bitmap.format == .rgb8)
        let alpha = SyntheticImages.pattern(width: 40, height: 30, format: .rgba8)
        #expect(try ImageDecoder.decode(alpha.encode(as: .png)).bitmap.format == .rgba8)
        #expect(try ImageDecoder.decode(alpha.encode(as: .webp())).bitmap.format == .rgba8)
        #expect(try ImageDecoder.decode(alpha.encode(as: .webp(lossless: true))).bitmap.format == .rgba8)
        #expect(try ImageDecoder.info(for: alpha.encode(as: .webp())).hasAlpha)
        #expect(try !ImageDecoder.info(for: opaque.encode(as: .webp())).hasAlpha)
        // GIF: transparency index → rgba8, none → rgb8.
        let colors = (0..<256).map { (UInt8($0), UInt8(255 - $0), UInt8(0)) }
        let plain = SyntheticGIF.make(width: 2, height: 2, colors: colors, frames: [.init(width: 2, height: 2, indices: [1, 2, 3, 4])])
        #expect(try ImageDecoder.decode(plain).bitmap.format == .rgb8)
        let keyed = SyntheticGIF.make(width: 2, height: 2, colors: colors, frames: [.init(width: 2, height: 2, indices: [1, 2, 3, 4], transparentIndex: 1)])
        let k = try ImageDecoder.decode(keyed).bitmap
        #expect(k.format == .rgba8)
        #expect(k.pixels[3] == 0 && k.pixels[7] == 255)
    }

    /// Premultiplied resampling: an opaque white half next to a fully transparent black half
    /// gives no dark fringe at any scaled size, in PNG and WebP (lossless, lossy).
    @Test func noDarkFringeOnTransparentEdges() throws {
        let w = 301, h = 211
        let image = Bitmap(width: w, height: h, format: .rgba8) { dst in
            for y in 0..<h { for x in 0..<w {
                let i = (y * w + x) * 4
                let inside = x < w / 2 && y > h / 3
                dst[i] = inside ? 255 : 0; dst[i + 1] = inside ? 255 : 0; dst[i + 2] = inside ? 255 : 0; dst[i + 3] = inside ? 255 : 0
            } }
        }
        for (name, data) in [("png", try image.encode(as: .png)), ("webp-lossless", try image.encode(as: .webp(lossless: true))),
                             ("webp", try image.encode(as: .webp(quality: 95)))] {
            // Lossy WebP's own edge (colour bleeding under the alpha) is the floor, seen at full size.
            func darkestVisible(_ out: Bitmap) -> Int {
                var darkest = 255
                for y in 0..<out.height { for x in 0..<out.width {
                    let p = out.rgba(x: x, y: y)
                    if p.a >= 16 { darkest = min(darkest, Int(p.r), Int(p.g), Int(p.b)) }
                } }
                return darkest
            }
            let floor = name == "webp" ? darkestVisible(try ImageDecoder.decode(data).bitmap) - 10 : 235
            for size: DecodeSize in [.maxPixelSize(37), .maxPixelSize(100), .size(width: 64, height: 64, contentMode: .aspectFill)] {
                let out = try ImageDecoder.decode(data, options: DecodeOptions(size: size)).bitmap
                #expect(out.format == .rgba8)
                var darkest = 255
                for y in 0..<out.height { for x in 0..<out.width {
                    let p = out.rgba(x: x, y: y)
                    if p.a >= 16 { darkest = min(darkest, Int(p.r), Int(p.g), Int(p.b)) }
                } }
                #expect(darkest >= floor - (name == "webp" ? 10 : 0), "\(name) \(size): darkest visible pixel \(darkest)")
            }
        }
    }

    /// Embedded ICC profiles are converted to sRGB in JPEG (APP2), PNG (iCCP) and WebP (ICCP):
    /// a linear-light P3 profile, a gray profile; `convertsColorProfile = false` keeps the values.
    @Test(arguments: ["jpeg", "png", "webp"])
    func iccProfilesAreConverted(format: String) throws {
        let picture = Bitmap(width: 16, height: 8, format: .rgb8) { dst in
            for y in 0..<8 { for x in 0..<16 {
                let c: [UInt8] = x < 8 ? [128, 128, 128] : [200, 60, 30]
                for k in 0..<3 { dst[(y * 16 + x) * 3 + k] = c[k] }
            } }
        }
        let p3 = CorpusICCProfile.linearRGB(red: ColourFixtures.p3Red, green: ColourFixtures.p3Green, blue: ColourFixtures.p3Blue)
        let data = try ColourFixtures.withProfile(picture, p3, format: format)
        let out = try ImageDecoder.decode(data).bitmap
        let tolerance = format == "jpeg" ? 5.0 : 3.0
        for (x, src) in [(3, [128.0, 128, 128]), (12, [200.0, 60, 30])] {
            let e = ColourFixtures.srgbFromLinearP3(src)
            let p = out.rgba(x: x, y: 4)
            let d = max(abs(Double(p.r) - e[0]), abs(Double(p.g) - e[1]), abs(Double(p.b) - e[2]))
            #expect(d <= tolerance, "\(format) P3 \(src): got \(p), expected \(e)")
        }
        let raw = try ImageDecoder.decode(data, options: DecodeOptions(convertsColorProfile: false)).bitmap
        let r = raw.rgba(x: 3, y: 4)
        #expect(abs(Int(r.r) - 128) <= 2, "\(format) unconverted: \(r)")
        // Scaled decodes convert too.
        let small = try ImageDecoder.decode(data, options: DecodeOptions(size: .maxPixelSize(8))).bitmap
        let s = small.rgba(x: 1, y: 2)
        #expect(abs(Double(s.r) - CorpusJPEG.srgbEncoded(128.0 / 255)) <= tolerance + 1, "\(format) scaled: \(s)")
    }

    @Test func grayProfileOnGrayPNG() throws {
        let iccp = Array("g".utf8) + [0, 0] + SyntheticPNG.zlibStored(CorpusICCProfile.linearGray())
        let png = SyntheticPNG.make(width: 2, height: 1, colorType: 0, zlib: SyntheticPNG.zlibStored([0, 64, 128]))
        let data = Contract.pngInserting([SyntheticPNG.chunk("iCCP", iccp)], into: png)
        let out = try ImageDecoder.decode(data).bitmap
        for (x, v) in [(0, 64.0), (1, 128.0)] {
            let p = out.rgba(x: x, y: 0)
            #expect(abs(Double(p.r) - CorpusJPEG.srgbEncoded(v / 255)) <= 2.5 && p.r == p.g && p.g == p.b, "\(v): \(p)")
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ImagingAnimationContractTests {
    static let colors: [(UInt8, UInt8, UInt8)] = (0..<256).map { i in
        switch i { case 0: (255, 255, 255); case 1: (255, 0, 0); case 2: (0, 255, 0); case 3: (0, 0, 255); case 4: (255, 255, 0)
        default: (UInt8(i), UInt8(i), UInt8(i)) }
    }

    static func gif() -> Data {
        SyntheticGIF.make(width: 4, height: 4, colors: colors, frames: [
            .init(width: 4, height: 4, indices: [UInt8](repeating: 1, count: 16), delay: 10, disposal: 1),
            .init(left: 0, top: 0, width: 2, height: 2, indices: [2, 2, 2, 2], delay: 20, disposal: 2),
            .init(left: 2, top: 2, width: 2, height: 2, indices: [3, 9, 9, 3], delay: 30, disposal: 3, transparentIndex: 9),
            .init(left: 3, top: 0, width: 1, height: 1, indices: [4], delay: 40, disposal: 1),
        ])
    }

    /// Pixel (x, y) of `frame` is `rgb`, or — for `cleared` — transparent or the background colour.
    static func check(_ frame: Bitmap, _ expected: [[String]], _ label: String) {
        let palette: [String: (UInt8, UInt8, UInt8)] = ["R": (255, 0, 0), "G": (0, 255, 0), "B": (0, 0, 255), "Y": (255, 255, 0)]
        for y in 0..<4 { for x in 0..<4 {
            let p = frame.rgba(x: x, y: y)
            let e = expected[y][x]
            if e == "." {
                #expect(p.a == 0 || (p.r, p.g, p.b, p.a) == (255, 255, 255, 255), "\(label) (\(x),\(y)) cleared: \(p)")
            } else {
                let c = palette[e]!
                #expect((p.r, p.g, p.b, p.a) == (c.0, c.1, c.2, 255), "\(label) (\(x),\(y)) \(e): \(p)")
            }
        } }
    }

    @Test func gifFramesAreCompositedWithDisposalAndDurations() throws {
        let frames = try ImageDecoder.decodeFrames(Self.gif())
        try #require(frames.count == 4)
        Self.check(frames[0].bitmap, [["R", "R", "R", "R"], ["R", "R", "R", "R"], ["R", "R", "R", "R"], ["R", "R", "R", "R"]], "gif 1")
        Self.check(frames[1].bitmap, [["G", "G", "R", "R"], ["G", "G", "R", "R"], ["R", "R", "R", "R"], ["R", "R", "R", "R"]], "gif 2")
        Self.check(frames[2].bitmap, [[".", ".", "R", "R"], [".", ".", "R", "R"], ["R", "R", "B", "R"], ["R", "R", "R", "B"]], "gif 3")
        Self.check(frames[3].bitmap, [[".", ".", "R", "Y"], [".", ".", "R", "R"], ["R", "R", "R", "R"], ["R", "R", "R", "R"]], "gif 4")
        #expect(frames.map(\.duration) == [0.1, 0.2, 0.3, 0.4])
        // The first frame by default.
        let first = try ImageDecoder.decode(Self.gif()).bitmap
        #expect(first.converted(to: .rgba8).pixels == frames[0].bitmap.converted(to: .rgba8).pixels)
    }

    @Test func framesTimesAreaLimit() throws {
        // 4 frames × 16 pixels = 64.
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decodeFrames(Self.gif(), options: DecodeOptions(maximumPixelCount: 63)) } == .tooLarge(width: 4, height: 4))
        #expect(try ImageDecoder.decodeFrames(Self.gif(), options: DecodeOptions(maximumPixelCount: 64)).count == 4)
        #expect(try ImageDecoder.decode(Self.gif(), options: DecodeOptions(maximumPixelCount: 16)).bitmap.width == 4)
        let webp = try Self.animatedWebP()
        #expect(Contract.error { () throws(ImagingError) in _ = try ImageDecoder.decodeFrames(webp, options: DecodeOptions(maximumPixelCount: 8 * 8 * 3 - 1)) } == .tooLarge(width: 8, height: 8))
        #expect(try ImageDecoder.decodeFrames(webp, options: DecodeOptions(maximumPixelCount: 8 * 8 * 3)).count == 3)
    }

    /// An animated WebP built chunk by chunk: ANMF frames with offsets, alpha blending and
    /// dispose-to-background.
    static func animatedWebP() throws -> Data {
        func solid(_ w: Int, _ h: Int, _ c: [UInt8], transparentColumn: Bool = false) -> Bitmap {
            Bitmap(width: w, height: h, format: .rgba8) { dst in
                for y in 0..<h { for x in 0..<w {
                    let px: [UInt8] = transparentColumn && x == 0 ? [0, 0, 0, 0] : c
                    for k in 0..<4 { dst[(y * w + x) * 4 + k] = px[k] }
                } }
            }
        }
        func frame(_ b: Bitmap, x: Int, y: Int, ms: Int, blend: Bool, dispose: Bool) throws -> [UInt8] {
            let chunks = Contract.webpChunks(try b.encode(as: .webp(lossless: true))).filter { $0.0 != "VP8X" }
            var body = Contract.le24(x / 2) + Contract.le24(y / 2) + Contract.le24(b.width - 1) + Contract.le24(b.height - 1)
            body += Contract.le24(ms) + [UInt8((blend ? 0 : 2) | (dispose ? 1 : 0))]
            for c in chunks { body += Array(c.0.utf8) + Contract.le32(c.1.count) + c.1 + (c.1.count & 1 == 1 ? [0] : []) }
            return Array("ANMF".utf8) + Contract.le32(body.count) + body + (body.count & 1 == 1 ? [0] : [])
        }
        var body = Array("WEBP".utf8)
        body += Array("VP8X".utf8) + Contract.le32(10) + [0x12, 0, 0, 0] + Contract.le24(7) + Contract.le24(7)
        body += Array("ANIM".utf8) + Contract.le32(6) + [255, 255, 255, 255, 0, 0]
        body += try frame(solid(8, 8, [255, 0, 0, 255]), x: 0, y: 0, ms: 100, blend: false, dispose: false)
        body += try frame(solid(4, 4, [0, 255, 0, 255], transparentColumn: true), x: 0, y: 0, ms: 200, blend: true, dispose: true)
        body += try frame(solid(4, 4, [0, 0, 255, 255]), x: 4, y: 4, ms: 300, blend: false, dispose: false)
        return Data(Array("RIFF".utf8) + Contract.le32(body.count) + body)
    }

    @Test func animatedWebPFramesAreComposited() throws {
        let data = try Self.animatedWebP()
        #expect(try ImageDecoder.info(for: data).frameCount == 3)
        let frames = try ImageDecoder.decodeFrames(data)
        try #require(frames.count == 3)
        #expect(frames.map(\.duration) == [0.1, 0.2, 0.3])
        func at(_ b: Bitmap, _ x: Int, _ y: Int) -> [UInt8] { let p = b.rgba(x: x, y: y); return [p.r, p.g, p.b, p.a] }
        #expect(at(frames[0].bitmap, 5, 5) == [255, 0, 0, 255])
        #expect(at(frames[1].bitmap, 0, 1) == [255, 0, 0, 255], "blended: the transparent column shows the red below")
        #expect(at(frames[1].bitmap, 2, 2) == [0, 255, 0, 255])
        #expect(at(frames[1].bitmap, 6, 6) == [255, 0, 0, 255])
        let cleared = at(frames[2].bitmap, 2, 2)
        #expect(cleared[3] == 0 || cleared == [255, 255, 255, 255], "disposed to background: \(cleared)")
        #expect(at(frames[2].bitmap, 6, 6) == [0, 0, 255, 255])
        #expect(at(frames[2].bitmap, 6, 1) == [255, 0, 0, 255])
        let first = try ImageDecoder.decode(data).bitmap
        #expect(at(first, 5, 5)[0...2] == [255, 0, 0])
        // Sized: every frame at the decode size.
        let small = try ImageDecoder.decodeFrames(data, options: DecodeOptions(size: .maxPixelSize(4)))
        #expect(small.allSatisfy { ($0.bitmap.width, $0.bitmap.height) == (4, 4) })
    }
}
