import Testing
@testable import LumenImaging

@Suite(.timeLimit(.minutes(1)))
struct ResizeProcessorTests {
    let landscape = SyntheticImages.pattern(width: 400, height: 300, format: .rgb8)

    @Test func aspectFitFitsInside() throws {
        let out = try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFit).process(landscape)
        #expect((out.width, out.height) == (100, 75))
    }

    @Test func aspectFillCoversAndCropCutsTheCentre() throws {
        let filled = try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill).process(landscape)
        #expect((filled.width, filled.height) == (133, 100))
        let cropped = try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill, crop: true).process(landscape)
        #expect((cropped.width, cropped.height) == (100, 100))
        #expect(cropped == filled.cropped(x: 16, y: 0, width: 100, height: 100))
    }

    @Test func singleSideAndMaxPixelSizeKeepTheAspectRatio() throws {
        let portrait = SyntheticImages.pattern(width: 300, height: 400, format: .rgba8)
        let byWidth = try ImageProcessors.Resize(width: 200).process(landscape)
        #expect((byWidth.width, byWidth.height) == (200, 150))
        let byHeight = try ImageProcessors.Resize(height: 60).process(landscape)
        #expect((byHeight.width, byHeight.height) == (80, 60))
        let byMax = try ImageProcessors.Resize(maxPixelSize: 100).process(portrait)
        #expect((byMax.width, byMax.height) == (75, 100))
        #expect(byMax.format == .rgba8)
        #expect(byMax == Resampler.resample(portrait, width: 75, height: 100))
    }

    @Test func neverUpscalesUnlessAsked() throws {
        let small = SyntheticImages.pattern(width: 50, height: 40, format: .rgb8)
        #expect(try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFit).process(small) == small)
        #expect(try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill, crop: true).process(small) == small)
        #expect(try ImageProcessors.Resize(width: 200).process(small) == small)
        #expect(try ImageProcessors.Resize(maxPixelSize: 60).process(small) == small)
        // Fill + crop on an image larger on one side only: cropped, not upscaled.
        let wide = SyntheticImages.pattern(width: 300, height: 100, format: .rgb8)
        let strip = try ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: true).process(wide)
        #expect((strip.width, strip.height) == (160, 100))

        let fit = try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFit, upscale: true).process(small)
        #expect((fit.width, fit.height) == (100, 80))
        let fill = try ImageProcessors.Resize(size: (100, 100), contentMode: .aspectFill, crop: true, upscale: true).process(small)
        #expect((fill.width, fill.height) == (100, 100))
        let wider = try ImageProcessors.Resize(width: 200, upscale: true).process(small)
        #expect((wider.width, wider.height) == (200, 160))
    }

    @Test func identifierIsStableAndDocumented() {
        let resize = ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: true)
        #expect(resize.identifier == "lumen.resize?width=160&height=160&contentMode=aspectFill&crop=1&upscale=0")
        #expect(resize.identifier == ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: true).identifier)
        let sugar: ImageProcessors.Resize = .resize(size: (160, 160), contentMode: .aspectFill, crop: true)
        #expect(sugar == resize)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ProcessorIdentityTests {
    static let processors: [any ImageProcessing] = [
        ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: true),
        ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: false),
        ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFit),
        ImageProcessors.Resize(size: (160, 120), contentMode: .aspectFit),
        ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFit, upscale: true),
        ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFit, filter: .lanczos2),
        ImageProcessors.Resize(width: 160),
        ImageProcessors.Resize(height: 160),
        ImageProcessors.Crop(x: 0, y: 0, width: 10, height: 10),
        ImageProcessors.Crop(x: 1, y: 0, width: 10, height: 10),
        ImageProcessors.Circle(),
        ImageProcessors.Circle(border: .init(color: .white, width: 2)),
        ImageProcessors.Circle(border: .init(color: .black, width: 2)),
        ImageProcessors.RoundedCorners(radius: 8),
        ImageProcessors.RoundedCorners(radius: 8, border: .init(color: .white, width: 1)),
        ImageProcessors.RoundedCorners(radius: 9),
        ImageProcessors.GaussianBlur(radius: 2),
        ImageProcessors.GaussianBlur(radius: 3),
        ImageProcessors.Grayscale(),
        ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.GaussianBlur(radius: 2)]),
        ImageProcessors.Composition([ImageProcessors.GaussianBlur(radius: 2), ImageProcessors.Grayscale()]),
        ImageProcessors.Anonymous(id: "a") { $0 },
        ImageProcessors.Anonymous(id: "b") { $0 },
    ]

    @Test func differentParametersGiveDifferentIdentities() {
        let identifiers = Self.processors.map(\.identifier)
        #expect(Set(identifiers).count == identifiers.count, "\(identifiers)")
        let hashables = Self.processors.map(\.hashableIdentifier)
        #expect(Set(hashables).count == hashables.count)
    }

    @Test func equalParametersGiveEqualIdentities() {
        let again: [any ImageProcessing] = [
            ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFill, crop: true),
            ImageProcessors.Circle(border: .init(color: .white, width: 2)),
            ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.GaussianBlur(radius: 2)]),
            ImageProcessors.Anonymous(id: "a") { _ in throw ImagingError.truncated },
        ]
        for processor in again {
            let twin = Self.processors.first { $0.identifier == processor.identifier }
            #expect(twin != nil, "\(processor.identifier)")
            #expect(twin?.hashableIdentifier == processor.hashableIdentifier)
        }
        #expect(ImageProcessors.Resize(maxPixelSize: 160).identifier == ImageProcessors.Resize(size: (160, 160), contentMode: .aspectFit).identifier)
    }

    @Test func identifiersLookLikeTheDocumentedScheme() {
        #expect(ImageProcessors.Crop(x: 1, y: 2, width: 3, height: 4).identifier == "lumen.crop?x=1&y=2&width=3&height=4")
        #expect(ImageProcessors.Grayscale().identifier == "lumen.grayscale")
        #expect(ImageProcessors.Anonymous(id: "my.sepia") { $0 }.identifier == "my.sepia")
        let composition = ImageProcessors.Composition([ImageProcessors.Grayscale(), ImageProcessors.Crop(x: 1, y: 2, width: 3, height: 4)])
        #expect(composition.identifier == "lumen.composition[15:lumen.grayscale|35:lumen.crop?x=1&y=2&width=3&height=4]")
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ShapeProcessorTests {
    static func alphas(_ image: Bitmap) -> [UInt8] { (0..<image.pixelCount).map { image.pixels[$0 * 4 + 3] } }

    @Test(arguments: [PixelFormat.rgb8, .rgba8])
    func circleIsTransparentOutsideOpaqueInsideAndAntiAliased(_ format: PixelFormat) throws {
        var source = SyntheticImages.pattern(width: 60, height: 40, format: .rgb8).converted(to: format)
        if format == .rgba8 { for i in 0..<source.pixelCount { source.pixels[i * 4 + 3] = 255 } }
        let out = try ImageProcessors.Circle().process(source)
        #expect(out.width == 40 && out.height == 40 && out.format == .rgba8)
        for (x, y) in [(0, 0), (39, 0), (0, 39), (39, 39), (5, 5)] { #expect(out.rgba(x: x, y: y).a == 0) }
        // The centre is the source's centre square, untouched.
        for (x, y) in [(20, 20), (10, 20), (20, 30), (19, 1)] {
            let p = out.rgba(x: x, y: y), s = source.rgba(x: x + 10, y: y)
            #expect(p == (s.r, s.g, s.b, 255), "(\(x), \(y))")
        }
        let alpha = Self.alphas(out)
        #expect(alpha.contains { $0 > 0 && $0 < 255 }, "edge pixels are partially covered")
        // Coverage integrates to the disc's area, π r², within 1 %.
        let area = alpha.reduce(0.0) { $0 + Double($1) / 255 }
        #expect(abs(area - Double.pi * 400) < Double.pi * 4, "area \(area)")
    }

    @Test func circleBorderIsDrawnInsideTheEdge() throws {
        let source = SyntheticImages.flat(width: 40, height: 40, (0, 0, 255, 255), format: .rgb8)
        let out = try ImageProcessors.Circle(border: .init(color: .init(red: 255, green: 255, blue: 0), width: 3.5)).process(source)
        // Just inside the top edge: border; the centre: image.
        #expect(out.rgba(x: 20, y: 1) == (255, 255, 0, 255))
        #expect(out.rgba(x: 20, y: 20) == (0, 0, 255, 255))
        // Where the border's inner edge crosses the pixel centre (distance 16.5 from the
        // centre), half border, half image.
        let inner = out.rgba(x: 20, y: 3)
        #expect(inner.r > 96 && inner.r < 160 && inner.b > 96 && inner.b < 160, "\(inner)")
    }

    @Test func roundedCornersCutOnlyTheCorners() throws {
        let source = SyntheticImages.pattern(width: 50, height: 30, format: .rgb8)
        let out = try ImageProcessors.RoundedCorners(radius: 10).process(source)
        #expect(out.width == 50 && out.height == 30 && out.format == .rgba8)
        for (x, y) in [(0, 0), (49, 0), (0, 29), (49, 29), (1, 1)] { #expect(out.rgba(x: x, y: y).a == 0) }
        // Straight edges and the interior are untouched.
        for (x, y) in [(25, 0), (0, 15), (49, 15), (25, 29), (25, 15), (10, 10)] {
            let s = source.rgba(x: x, y: y)
            #expect(out.rgba(x: x, y: y) == (s.r, s.g, s.b, 255), "(\(x), \(y))")
        }
        let alpha = Self.alphas(out)
        #expect(alpha.contains { $0 > 0 && $0 < 255 }, "the arcs are anti-aliased")
        // Area: the rectangle less four (r² − π r²/4) corners, within 1 %.
        let expected = 50.0 * 30 - 4 * (100 - Double.pi * 25)
        let area = alpha.reduce(0.0) { $0 + Double($1) / 255 }
        #expect(abs(area - expected) < expected / 100, "area \(area), expected \(expected)")

        let square = try ImageProcessors.RoundedCorners(radius: 0).process(source)
        #expect(square == source.converted(to: .rgba8))
    }

    @Test func shapesKeepTransparentSourcesTransparent() throws {
        let clear = SyntheticImages.flat(width: 30, height: 30, (255, 0, 0, 0), format: .rgba8)
        let out = try ImageProcessors.RoundedCorners(radius: 5).process(clear)
        #expect(Self.alphas(out).allSatisfy { $0 == 0 })
    }
}

@Suite(.timeLimit(.minutes(1)))
struct FilterProcessorTests {
    static func variance(_ image: Bitmap, channel: Int) -> Double {
        let c = image.format.channels
        let values = (0..<image.pixelCount).map { Double(image.pixels[$0 * c + channel]) }
        let mean = values.reduce(0, +) / Double(values.count)
        return values.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(values.count)
    }

    @Test func blurReducesVarianceAndKeepsTheSize() throws {
        let noisy = SyntheticImages.pattern(width: 80, height: 60, format: .rgb8)
        let blurred = try ImageProcessors.GaussianBlur(radius: 2).process(noisy)
        #expect(blurred.width == 80 && blurred.height == 60 && blurred.format == .rgb8)
        // Green (stripes, checkerboard) and blue (noise) lose most of their variance; red, a
        // linear ramp, is what a blur leaves alone (bar the clamped edges).
        for channel in 1..<3 {
            #expect(Self.variance(blurred, channel: channel) < Self.variance(noisy, channel: channel) * 0.8, "channel \(channel)")
        }
        #expect(Self.variance(blurred, channel: 0) > Self.variance(noisy, channel: 0) * 0.9)
        let more = try ImageProcessors.GaussianBlur(radius: 5).process(noisy)
        #expect(Self.variance(more, channel: 2) < Self.variance(blurred, channel: 2))
        #expect(try ImageProcessors.GaussianBlur(radius: 0).process(noisy) == noisy)
    }

    @Test(arguments: [PixelFormat.rgb8, .rgba8])
    func blurKeepsAFlatImageFlat(_ format: PixelFormat) throws {
        let flat = SyntheticImages.flat(width: 37, height: 21, (12, 200, 99, 140), format: format)
        #expect(try ImageProcessors.GaussianBlur(radius: 4).process(flat) == flat)
    }

    @Test func blurDoesNotDarkenTransparentEdges() throws {
        let disc = SyntheticImages.disc(size: 40, radius: 12, color: (255, 0, 0), background: (0, 0, 0))
        let blurred = try ImageProcessors.GaussianBlur(radius: 3).process(disc)
        var soft = 0
        for y in 0..<40 {
            for x in 0..<40 {
                let p = blurred.rgba(x: x, y: y)
                guard p.a > 0 else { continue }
                if p.a < 255 { soft += 1 }
                #expect(p.r >= 254 && p.g <= 1 && p.b <= 1, "(\(x), \(y)): \(p)")
            }
        }
        #expect(soft > 0)
    }

    @Test(arguments: [PixelFormat.rgb8, .rgba8])
    func grayscaleMakesChannelsEqualAndKeepsAlpha(_ format: PixelFormat) throws {
        let image = SyntheticImages.pattern(width: 30, height: 20, format: format)
        let gray = try ImageProcessors.Grayscale().process(image)
        #expect(gray.format == format)
        for y in 0..<20 {
            for x in 0..<30 {
                let p = gray.rgba(x: x, y: y)
                #expect(p.r == p.g && p.g == p.b)
                #expect(p.a == image.rgba(x: x, y: y).a)
            }
        }
        // Rec. 709 luma by hand: white 255, pure green 0.7152 × 255 ≈ 182, pure blue ≈ 18.
        let primaries = Bitmap(width: 3, height: 1, format: .rgb8, pixels: [255, 255, 255, 0, 255, 0, 0, 0, 255])
        let luma = try ImageProcessors.Grayscale().process(primaries)
        #expect(luma.pixels[0] == 255)
        #expect(abs(Int(luma.pixels[3]) - 182) <= 1)
        #expect(abs(Int(luma.pixels[6]) - 18) <= 1)
    }

    @Test func cropClipsToTheImageAndRejectsEmptyRectangles() throws {
        let image = SyntheticImages.pattern(width: 20, height: 10, format: .rgba8)
        let clipped = try ImageProcessors.Crop(x: -5, y: 4, width: 10, height: 100).process(image)
        #expect(clipped == image.cropped(x: 0, y: 4, width: 5, height: 6))
        for bad in [
            ImageProcessors.Crop(x: 20, y: 0, width: 5, height: 5), ImageProcessors.Crop(x: -10, y: 0, width: 10, height: 5),
            ImageProcessors.Crop(x: 0, y: 0, width: 0, height: 5), ImageProcessors.Crop(x: 0, y: 0, width: -3, height: 5),
            ImageProcessors.Crop(x: Int.max, y: Int.max, width: Int.max, height: Int.max),
            ImageProcessors.Crop(x: Int.min, y: 0, width: Int.max, height: 5),
        ] {
            #expect(throws: ImagingError.self, "\(bad.identifier)") { try bad.process(image) }
        }
        let huge = try ImageProcessors.Crop(x: 2, y: 2, width: Int.max, height: Int.max).process(image)
        #expect((huge.width, huge.height) == (18, 8))
    }

    @Test func compositionAppliesInOrder() throws {
        let image = SyntheticImages.pattern(width: 40, height: 40, format: .rgb8)
        let cropThenResize = ImageProcessors.Composition([
            ImageProcessors.Crop(x: 0, y: 0, width: 20, height: 10), ImageProcessors.Resize(width: 10),
        ])
        let resizeThenCrop = ImageProcessors.Composition([
            ImageProcessors.Resize(width: 10), ImageProcessors.Crop(x: 0, y: 0, width: 20, height: 10),
        ])
        let a = try cropThenResize.process(image)
        #expect((a.width, a.height) == (10, 5))
        #expect(a == (try ImageProcessors.Resize(width: 10).process(image.cropped(x: 0, y: 0, width: 20, height: 10))))
        let b = try resizeThenCrop.process(image)
        #expect((b.width, b.height) == (10, 10))
        #expect(cropThenResize.hashableIdentifier != resizeThenCrop.hashableIdentifier)
        #expect(try ImageProcessors.Composition([]).process(image) == image)
    }

    @Test func anonymousRunsItsClosureAndPropagatesErrors() throws {
        let image = SyntheticImages.pattern(width: 8, height: 8, format: .rgb8)
        let flip = ImageProcessors.Anonymous(id: "flip") { $0.applying(.upMirrored) }
        #expect(try flip.process(image) == image.applying(.upMirrored))
        let failing = ImageProcessors.Anonymous(id: "fail") { _ in throw ImagingError.invalidArgument(reason: "no") }
        #expect(throws: ImagingError.invalidArgument(reason: "no")) { try failing.process(image) }
        #expect(flip == ImageProcessors.Anonymous(id: "flip") { $0 })
    }
}
