import CLumenShim
import Foundation
import Testing
@testable import LumenImaging

/// Lumen's own reduced-scale baseline JPEG decoder (`lumen_jpeg_decode_reduced`) at 1/8, which
/// `ImageDecoder.decode` uses instead of TurboJPEG when a thumbnail needs the 1/8 scale: it
/// must give TurboJPEG's pixels (or, where TurboJPEG approximates, the true 8×8 means), decline
/// everything outside its case so TurboJPEG decides, and survive damaged data.
@Suite(.timeLimit(.minutes(1)))
struct JPEGEighthScaleTests {
    /// The 1/`denominator` decode by Lumen's decoder, `nil` when it declines.
    static func reduced(_ data: Data, denominator: Int = 8, cancellation: DecodeCancellation? = nil) throws -> Bitmap? {
        try data.withUnsafeBytes { bytes throws(ImagingError) -> Bitmap? in
            let markers = try JPEGMarkers(walking: bytes, scanLimit: 100)
            guard let frame = markers.frame else { return nil }
            return try JPEGCodec.decodeReduced(
                bytes, markers: markers, info: (frame.width, frame.height, 0), denominator: denominator,
                width: (frame.width + denominator - 1) / denominator, height: (frame.height + denominator - 1) / denominator,
                cancellation: cancellation)
        }
    }

    /// The 1/8 decode by Lumen's decoder, `nil` when it declines.
    static func eighth(_ data: Data) throws -> Bitmap? { try reduced(data, denominator: 8) }

    /// TurboJPEG's 1/8 decode (or `minimumSize`'s scale), in stored orientation, no ICC.
    static func turbo(_ data: Data, minimumSize: PixelSize? = PixelSize(width: 1, height: 1)) throws -> Bitmap {
        var options = DecodeOptions(convertsColorProfile: false)
        options.allowsReducedScaleDecoder = false
        return try data.withUnsafeBytes { bytes throws(ImagingError) -> Bitmap in
            let header = try JPEGCodec.readHeader(bytes, options: options)
            return try JPEGCodec.decode(bytes, header: header, minimumSize: minimumSize, options: options).bitmap
        }
    }

    /// The mean of every 8×8 block (clipped at the edges) of the full-size decode: what a 1/8
    /// decode approximates.
    static func boxMeans(_ full: Bitmap) -> [Double] {
        let w = (full.width + 7) / 8, h = (full.height + 7) / 8
        var out = [Double](repeating: 0, count: w * h * 3)
        for y in 0..<h {
            for x in 0..<w {
                for c in 0..<3 {
                    var sum = 0, count = 0
                    for yy in (y * 8)..<min(y * 8 + 8, full.height) {
                        for xx in (x * 8)..<min(x * 8 + 8, full.width) {
                            sum += Int(full.pixels[(yy * full.width + xx) * 3 + c])
                            count += 1
                        }
                    }
                    out[(y * w + x) * 3 + c] = Double(sum) / Double(count)
                }
            }
        }
        return out
    }

    static func meanError(_ image: Bitmap, _ reference: [Double]) -> Double {
        var total = 0.0
        for i in 0..<reference.count { total += abs(Double(image.pixels[i]) - reference[i]) }
        return total / Double(reference.count)
    }

    static func maximumDifference(_ a: Bitmap, _ b: Bitmap) -> Int {
        zip(a.pixels, b.pixels).map { abs(Int($0) - Int($1)) }.max() ?? 0
    }

    // Made with Pillow: 67×45, quality 90. 4:2:2 with a restart marker every MCU row; 4:2:0
    // with one every two MCU rows; greyscale with one every three blocks.
    static let restart422 = Data(base64Encoded: "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQERMUFRUVDA8XGBYUGBIUFRT/2wBDAQMEBAUEBQkFBQkUDQsNFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBT/wAARCAAtAEMDASEAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/90ABAAF/9oADAMBAAIRAxEAPwD2bw342ttq/OPzrrh41tvK++K/jSlkc/abH1eTZZU+prTocr4g8bW21vnX86831jxrbeYfnFfs/D2RzstD8A46yypzvQq6f42tvNHzj869J8LeNbb5PnH51+nSyOfJsfG8J5ZU+sLQ9P0rxrbeUPnH50uqeNrbyz84/Ot8Bkc/aLQ/p+tllT6lt0OMuPG1t5z/ADr19aK/TI5HPlWh+I1Msqc706n/0PPPDfj+42r85/Ouu/4T+48r75/OvkKWQQ9psf1Jk2Uw+prTocr4g8f3G1vnP515vrHj+48w/Ofzr9n4eyGFlofgHHWUw53oVdP8fXHmj5z+dek+FvH9x8nzn86/TpZBDk2PjOE8ph9YWh6fpXj+48ofOfzqHXviW1jatLPP5adMn1+lYRy3CZbSnjMW1GnTTlJ9kvTV+SV23olc/qGpk8Z4NRitWeXXnxykF1II4HZM8FpNp/LBor8zqeKtCM2qOWtxvo3Us2ujaVOSTtuk3ba73PyufC0OZ3l+H/BP/9HgPDfw7udq/uz+VdcPh5c+V/qz+VddKtD2h/UGTZxT+prXoct4g+Hlztb5D+Vebax8O7nzD+7b8q/ZuHq0LI/AeOs4p871Kun/AA8ufNHyGvSPDPw+njUMylVUZJPAAr9Mq4mlTpOc2kkrtvZI+N4TziDxCszsBo8lugjtIvPfu5ztHP6//q61y+ueBb673STb5HPdu3sPQe1fxHx34gR4kx39n4CX+y0num/3ktPef91bRXrJvVKP9h0cfTo4Dnk/ea+44e4+Hlz5z/IetFfNxrQ5UfklTOKfO9ep/9L6D8N/Dq22r+7FdcPh1beV/qx+VfMUq8/aHrZNnNT6mtehy3iD4dW21v3a/lXm2r/Dq28w/ux+Vfs/D1edkfgPHWc1Od6mJJ4X07S3AZFlm7RJjI47+g6VuaT4VOpthxshJ4iXpjjr69O9fkHiv4iVHGfDuVzatpVknvprTTX3T2d04PTmT8jgXH1PrEa0/l/n/l953+lfDq28ofux+VLqnw6tvLP7ta/l7AV5+0R/XVfOan1LfocZcfDq285/3a9fSiv0uNedkfiNTOanO9ep/9P6M8N+Pbfavzr+ddcPHtv5X31/OvRpZDP2mx6GTZTU+prTocf4r+JNhY27yzzrGmcZPc/SvDvFfxoW4ldLRxBEeNxxvPr9Pw5461wcV59PhzDrLMuf+1VFdu3wQd9b/wAz+ytbK8nb3eb8T4u4fqVqjnNe6vxOW0/x7b+aPnH516T4W8e2/wAnzj86/m2WQz5Njh4Tymp9YWh6fpXj238ofOOnrS6n49t/LPzr+db4DIZ+0Wh/T9fKan1LbocZcePbfzn+cdfWiv0yOQz5VofiNTKanO9Op//UyfDfiq92L8/61sa98RNQ0i3iEah3lzgsxwMY7d+tfufFWIhw5k+IzSjTU500rJ7XlKMU3bVpOV2la9rXV7r+i+Hsro1qEYPr/keR+KPGmpXjvJNM0jnuzdPYegrzHWPFV75h+f8AWv5LynDfXq0sTipOc5u7b3bPy/jnLqEZNRWhV07xVe+YPm/WvSfC3iq9+X5v1r9DlldDk2PjuE8BR+sLQ9P0rxVe+UPm7etLqfiu98tvn/Wt8BldD2i0P6erYCj9R26HGz+Kr3zn+bv60V+lxyyhyrQ/EamAo8706n//2Q==")!
    static let restart420 = Data(base64Encoded: "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQERMUFRUVDA8XGBYUGBIUFRT/2wBDAQMEBAUEBQkFBQkUDQsNFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBT/wAARCAAtAEMDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/90ABAAK/9oADAMBAAIRAxEAPwD2bw342ttq/OPzrrh41tvK++K+KPDfj+42r85/Ouu/4T+48r75/OvwKl4fP2mx+z5Nwa/qa9D3/wAQeNrba3zr+deb6x41tvMPzivHvEHj+42t85/OvN9Y8f3HmH5z+dfs/D3h87LQ/AeOuDXzs+n9P8bW3mj5x+dek+FvGtt8nzj86+DdP8fXHmj5z+dek+FvH9x8nzn86/TpeHz5Nj4zhPg1/WEffGleNbbyh84/Ol1TxtbeWfnH518q6V4/uPKHzn86h174ltY2rSzz+WnTJ9fpRh+BaeGvWryUYR1bbSSXdt6JH9QVuDJSwdl2Pfbjxtbec/zr19aK+Mbz45SC6kEcDsmeC0m0/lg0UPH8IwfI8Zqu0KjX3qFn6rQ/Hp8AYlyfu/ijR8N/Du52r+7P5V1w+Hlz5X+rP5V9KeG/h1bbV/diuuHw6tvK/wBWPyr85p5p+82P2bJuOf8AY16Hwp4g+Hlztb5D+Vebax8O7nzD+7b8q/QvxB8Orba37tfyrzbV/h1beYf3Y/Kv2fh7M9FofgPHXHPvs+M9P+Hlz5o+Q16R4Z+H08ahmUqqjJJ4AFe0yeF9O0twGRZZu0SYyOO/oOlbmk+FTqbYcbISeIl6Y46+vTvXLxd4t5RwxCVCP77ELTkj0f8AfltH01l5W1PmuDOLqlbEJ7LueVDR5LdBHaRee/dznaOf1/8A1da5fXPAt9d7pJt8jnu3b2HoPavrzSvh1beUP3Y/Kl1T4dW3ln92tfyBm3iLm/FWKUsdO1NPSEdIr5dX5ybfay0P6/fGNOhgfdWttz4KuPh5c+c/yHrRX2FcfDq285/3a9fSivUjmmi0Pxqpxz779T//0Pozw349t9q/Ov511w8e2/lffX86+L/Dfiq92L8/61sa98RNQ0i3iEah3lzgsxwMY7d+tfoWZ8M4DI8LUzHHS5acLXaTb1aSVl3bS7a62Wp+m5FwYquGUIvVo+iPFfxJsLG3eWedY0zjJ7n6V4d4r+NC3ErpaOIIjxuON59fp+HPHWvDPFHjTUrx3kmmaRz3ZunsPQV5jrHiq98w/P8ArX47i87x+dr6tln+z0e6f7yXrJfCvKOveTWh+Q8Z8BUac3Kbu/wPpjT/AB7b+aPnH516T4W8e2/yfOPzr4U07xVe+YPm/WvSfC3iq9+X5v1r5iXAdPkPA4T4Qh9YWp946V49t/KHzjp60up+Pbfyz86/nXy5pXiq98ofN29aXU/Fd75bfP8ArW+A4Dp+0R/T1bhCH1Lfoe33Hj2385/nHX1or5en8VXvnP8AN39aK/TI8B0+Van4jU4QhzvXqf/Z")!
    static let greyRestart = Data(base64Encoded: "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQERMUFRUVDA8XGBYUGBIUFRT/wAALCAAtAEMBAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/90ABAAD/9oACAEBAAA/APZvDfja22r84/OuuHjW28r74rlfEHja22t86/nX/9DotY8a23mH5xVXT/G1t5o+cfnXpPhbxrbfJ84/Ov/R+sNK8a23lD5x+dLqnja28s/OPzrjLjxtbec/zr19a//S888N+P7javzn8667/hP7jyvvn865XxB4/uNrfOfzr//T+eNY8f3HmH5z+dVdP8fXHmj5z+dek+FvH9x8nzn86//Un0rx/ceUPnP51Dr3xLaxtWlnn8tOmT6/SvLrz45SC6kEcDsmeC0m0/lg1//V4Dw38O7nav7s/lXXD4eXPlf6s/lXLeIPh5c7W+Q/lX//1vnzWPh3c+Yf3bflVXT/AIeXPmj5DXpHhn4fTxqGZSqqMkngAV//18oaPJboI7SLz37uc7Rz+v8A+rrXL654FvrvdJNvkc927ew9B7Vw9x8PLnzn+Q9a/9D6D8N/Dq22r+7FdcPh1beV/qx+Vct4g+HVttb92v5V/9Hv9X+HVt5h/dj8qxJPC+naW4DIss3aJMZHHf0HStzSfCp1NsONkJPES9McdfXp3r//0vf9K+HVt5Q/dj8qXVPh1beWf3a1xlx8Orbzn/dr19K//9P6M8N+Pbfavzr+ddcPHtv5X31/OuP8V/Emwsbd5Z51jTOMnufpX//U2fFfxoW4ldLRxBEeNxxvPr9Pw5461y2n+PbfzR84/OvSfC3j23+T5x+df//V+iNK8e2/lD5x09aXU/Htv5Z+dfzrjLjx7b+c/wA46+tf/9bJ8N+Kr3Yvz/rWxr3xE1DSLeIRqHeXOCzHAxjt3615H4o8aaleO8k0zSOe7N09h6Cv/9f5X1jxVe+Yfn/WquneKr3zB83616T4W8VXvy/N+tf/0MXSvFV75Q+bt60up+K73y2+f9a42fxVe+c/zd/Wv//Z")!

    @Test(arguments: [(1600, 1200), (517, 389), (33, 17), (9, 300)])
    func syntheticPhotosMatchTurboJPEG(width: Int, height: Int) throws {
        let jpeg = try CorpusJPEG.photoLike(width: width, height: height, seed: UInt64(width)).encode(as: .jpeg(quality: 88))
        let ours = try #require(try Self.eighth(jpeg))
        let theirs = try Self.turbo(jpeg)
        #expect(ours.width == theirs.width && ours.height == theirs.height)
        // Luma is the same DC term; 4:2:0 chroma differs from TurboJPEG's 2×2 IDCT by rounding.
        #expect(CorpusJPEG.meanAbsoluteDifference(ours, theirs) < 0.25)
        #expect(Self.maximumDifference(ours, theirs) <= 3)
    }

    @Test(arguments: [
        "real-world/hopper.jpg", "real-world/hopper_gray.jpg", "real-world/pil_sample_rgb.jpg",
        "real-world/flower.jpg", "exif-orientation/Landscape_1.jpg",
    ])
    func corpusBaselineJPEGsMatchTurboJPEG(path: String) throws {
        let jpeg = try CorpusJPEG.data(path)
        let ours = try #require(try Self.eighth(jpeg), "\(path) should take the 1/8 decoder")
        let theirs = try Self.turbo(jpeg)
        #expect(CorpusJPEG.meanAbsoluteDifference(ours, theirs) < 0.25)
        #expect(Self.maximumDifference(ours, theirs) <= 3)
    }

    /// Restart markers, 4:2:2 and greyscale: against the true 8×8 means of the full decode.
    /// TurboJPEG's 1/8 scale takes 4:2:2 chroma from the DC term alone and upsamples it, so
    /// it is the one further off there; ours must be close and never worse.
    @Test(arguments: [("422", restart422), ("420", restart420), ("grey", greyRestart)])
    func restartMarkersAndSubsamplingGiveTheBlockMeans(name: String, jpeg: Data) throws {
        let ours = try #require(try Self.eighth(jpeg), "\(name) should take the 1/8 decoder")
        let reference = Self.boxMeans(try Self.turbo(jpeg, minimumSize: nil))
        let ourError = Self.meanError(ours, reference)
        let turboError = Self.meanError(try Self.turbo(jpeg), reference)
        #expect(ourError < 3)
        #expect(ourError <= turboError + 0.05)
    }

    /// Whole bytes of junk between an interval's last block and its restart marker (libjpeg's
    /// "extraneous bytes before marker", a warning Lumen accepts): the blocks are all there, so
    /// the 1/8 decoder gives exactly the clean file's pixels or declines, TurboJPEG gives its
    /// clean pixels too, and the public decode is one of the clean file's two decodes (through
    /// either decoder: at 9×6 the 1/8 scale is the target size, but 67×45 covers only
    /// 8.375×5.625 of those pixels, so both are resampled over that extent).
    @Test(arguments: [("422", restart422), ("420", restart420), ("grey", greyRestart)])
    func junkBeforeARestartMarkerChangesNoPixel(name: String, jpeg: Data) throws {
        let clean = try #require(try Self.eighth(jpeg))
        let turboClean = try Self.turbo(jpeg)
        let options = DecodeOptions(size: .maxPixelSize(9), convertsColorProfile: false)
        var turboOptions = options
        turboOptions.allowsReducedScaleDecoder = false
        let cleanDecode = try ImageDecoder.decode(jpeg, options: options).bitmap
        let turboCleanDecode = try ImageDecoder.decode(jpeg, options: turboOptions).bitmap
        #expect(cleanDecode.width == 9 && cleanDecode.height == 6)
        let bytes = [UInt8](jpeg)
        let scan = try #require(bytes.indices.dropLast().last { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xDA })
        let markers = (scan..<(bytes.count - 1)).filter { bytes[$0] == 0xFF && (0xD0...0xD7).contains(bytes[$0 + 1]) }
        try #require(!markers.isEmpty, "\(name) should have restart markers")
        var decodedByOurs = 0
        for marker in Set([markers[0], markers[markers.count / 2], markers[markers.count - 1]]) {
            for junk in [[0x5A], [0x13, 0xC4, 0x7E], [UInt8](repeating: 0, count: 9)] as [[UInt8]] {
                var damaged = bytes
                damaged.insert(contentsOf: junk, at: marker)
                let context = "\(name): \(junk.count) junk bytes before the marker at \(marker)"
                if let ours = try Self.eighth(Data(damaged)) {
                    #expect(ours == clean, "\(context)")
                    decodedByOurs += 1
                }
                #expect(try Self.turbo(Data(damaged)) == turboClean, "\(context)")
                let decoded = try ImageDecoder.decode(Data(damaged), options: options).bitmap
                #expect(decoded == cleanDecode || decoded == turboCleanDecode, "\(context)")
            }
        }
        // Junk already taken into the bit buffer is dropped at the marker, not declined.
        #expect(decodedByOurs > 0)
    }

    @Test func declinesWhatItDoesNotHandle() throws {
        let photo = CorpusJPEG.photoLike(width: 200, height: 120)
        let progressive = try photo.encode(as: .jpeg(quality: 85, progressive: true))
        #expect(try Self.eighth(progressive) == nil)
        #expect(try Self.eighth(try CorpusJPEG.data("real-world/pil_sample_cmyk.jpg")) == nil)
        let baseline = try photo.encode(as: .jpeg(quality: 85))
        #expect(try Self.eighth(baseline.prefix(baseline.count * 2 / 3)) == nil)  // cut short
        // The decode then goes through TurboJPEG and gives exactly its pixels.
        let decoded = try ImageDecoder.decode(progressive, options: DecodeOptions(size: .maxPixelSize(25)))
        #expect(decoded.statistics.codecWidth == 25)
    }

    /// Through the public API a 1/8 thumbnail gives the same image either way, to within the
    /// chroma rounding above.
    @Test func decodeUsesItAndMatchesTheTurboJPEGThumbnail() throws {
        let jpeg = try CorpusJPEG.photoLike(width: 2400, height: 1600).encode(as: .jpeg(quality: 88))
        var options = DecodeOptions(size: .maxPixelSize(256))
        let ours = try ImageDecoder.decode(jpeg, options: options)
        options.allowsReducedScaleDecoder = false
        let theirs = try ImageDecoder.decode(jpeg, options: options)
        #expect(ours.statistics == theirs.statistics)
        #expect(ours.statistics.codecScale == 0.125)
        #expect(CorpusJPEG.meanAbsoluteDifference(ours.bitmap, theirs.bitmap) < 0.25)
    }

    /// Damaged data anywhere (headers, tables, entropy-coded bytes): the C decoder returns or
    /// declines, never reads or writes out of bounds (a crash here fails the whole run), and
    /// `ImageDecoder.decode` answers with an image or a typed error.
    @Test func damagedDataNeverCrashes() throws {
        // The 1/8 sizes of the undamaged images. 1024×800 (12 800 blocks) is large enough for
        // the multi-symbol look-up table; the others take the symbol-at-a-time path.
        let sources: [(Data, Int, Int, Int)] = [
            (try CorpusJPEG.photoLike(width: 96, height: 64).encode(as: .jpeg(quality: 80)), 12, 8, 300),
            (try CorpusJPEG.photoLike(width: 1024, height: 800).encode(as: .jpeg(quality: 80)), 128, 100, 60),
            (Self.restart422, 9, 6, 300), (Self.greyRestart, 9, 6, 300),
        ]
        Self.damageAndDecode(sources, denominator: 8, seed: 8) { $0 * 7 / 8 }
    }

    /// Damages each source (data, width, height, rounds) `rounds` times (1–6 random bytes, and half the time a cut) and runs
    /// it through Lumen's reduced-scale decoder at 1/`denominator` (into a buffer of the given
    /// width and height) and through `ImageDecoder.decode` at `.maxPixelSize(size(width))`:
    /// neither may crash, whatever they answer.
    static func damageAndDecode(_ sources: [(Data, Int, Int, Int)], denominator: Int32,
                                seed: UInt64, size: (Int) -> Int) {
        var random = SeededRandom(seed: seed)
        for (source, width, height, rounds) in sources {
            var output = [UInt8](repeating: 0, count: width * height * 3)
            for _ in 0..<rounds {
                var bytes = [UInt8](source)
                for _ in 0..<Int.random(in: 1...6, using: &random) {
                    bytes[Int.random(in: 2..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
                }
                if Bool.random(using: &random) { bytes.removeLast(Int.random(in: 0..<(bytes.count / 2), using: &random)) }
                _ = bytes.withUnsafeBufferPointer { b in
                    output.withUnsafeMutableBufferPointer { o in
                        lumen_jpeg_decode_reduced(b.baseAddress, b.count, denominator, o.baseAddress, Int32(width), Int32(height), nil)
                    }
                }
                _ = try? ImageDecoder.decode(Data(bytes), options: DecodeOptions(size: .maxPixelSize(size(width))))
            }
        }
    }
}
