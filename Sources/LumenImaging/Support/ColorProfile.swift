import CLcms2
import CLumenShim

/// Embedded ICC profiles, converted to sRGB with lcms2.
///
/// Every call creates its own lcms2 context, profiles and transform and frees them before
/// returning; nothing is cached, so calls may run concurrently from any thread. Each context
/// may hold at most ``memoryBudget`` bytes: a hostile profile whose LUT declares a huge table
/// fails to open (the image keeps its colours unconverted) instead of making lcms2 allocate
/// and zero-fill what the header declares.
enum ColorProfile {
    /// The most bytes one conversion's lcms2 context may hold at once. The largest tables
    /// real profiles carry (a 16-bit CMYK CLUT with 33 points per axis) are about 7 MB, and
    /// a JPEG can embed at most a 16 MB profile, which lcms2 copies once.
    static let memoryBudget = 64 << 20

    /// Resets the count behind ``lcmsPeakBytes`` for the calling thread.
    static func resetLcmsPeakBytes() { lumen_lcms_reset_peak() }

    /// The most bytes one conversion's lcms2 context held at once on the calling thread since
    /// the last reset.
    static var lcmsPeakBytes: Int { lumen_lcms_peak_bytes() }

    /// `image` converted from the colour space described by the ICC `profile` to sRGB.
    ///
    /// - RGB profiles convert RGB and RGBA images (alpha is passed through unchanged).
    /// - Gray profiles convert only gray-expanded images (every pixel has R = G = B), which is
    ///   how grayscale sources reach Lumen's RGB layout; a colour image is left alone.
    /// - Returns `image` unchanged when the profile cannot be opened, describes itself as sRGB
    ///   (the conversion would be the identity), or its colour space does not match the pixels
    ///   (a CMYK or Lab profile on RGB data, …).
    static func convertToSRGB(_ image: Bitmap, profile: UnsafeRawBufferPointer) -> Bitmap {
        guard let session = Session(profile: profile) else { return image }
        defer { session.close() }
        switch session.colorSpace {
        case cmsSigRgbData:
            if session.isSRGB { return image }
            let type = image.format == .rgba8 ? lumen_lcms_type_rgba_8() : lumen_lcms_type_rgb_8()
            let flags: UInt32 = image.format == .rgba8 ? UInt32(cmsFLAGS_COPY_ALPHA) : 0
            guard let transform = session.transform(from: type, to: type, flags: flags) else { return image }
            defer { cmsDeleteTransform(transform) }
            var out = image
            image.pixels.withUnsafeBytes { src in
                out.pixels.withUnsafeMutableBytes { dst in
                    run(transform, src: src, dst: dst, pixels: image.pixelCount, srcStride: image.format.channels, dstStride: image.format.channels)
                }
            }
            return out
        case cmsSigGrayData:
            guard isGrayExpanded(image) else { return image }
            guard let transform = session.transform(from: lumen_lcms_type_gray_8(), to: lumen_lcms_type_rgb_8(), flags: 0)
            else { return image }
            defer { cmsDeleteTransform(transform) }
            let c = image.format.channels
            let n = image.pixelCount
            // Gather the gray plane, convert it to sRGB RGB, then put alpha back if any.
            let gray = [UInt8](unsafeUninitializedCapacity: n) { buffer, initialized in
                image.pixels.withUnsafeBufferPointer { p in
                    for i in 0..<n { buffer[i] = p[i * c] }
                }
                initialized = n
            }
            var rgb = [UInt8](repeating: 0, count: n * 3)
            gray.withUnsafeBytes { src in
                rgb.withUnsafeMutableBytes { dst in
                    run(transform, src: src, dst: dst, pixels: n, srcStride: 1, dstStride: 3)
                }
            }
            if image.format == .rgb8 {
                return Bitmap(width: image.width, height: image.height, format: .rgb8, pixels: rgb)
            }
            var out = image
            out.pixels.withUnsafeMutableBufferPointer { dst in
                for i in 0..<n {
                    dst[i * 4] = rgb[i * 3]; dst[i * 4 + 1] = rgb[i * 3 + 1]; dst[i * 4 + 2] = rgb[i * 3 + 2]
                }
            }
            return out
        default:
            return image
        }
    }

    /// Converts packed 8-bit CMYK pixels to an sRGB bitmap through a CMYK ICC `profile`;
    /// `inverted` marks Adobe-style CMYK (255 = no ink, as Photoshop writes it).
    /// - Returns: `nil` when the profile cannot be opened or is not a CMYK profile; the caller
    ///   then falls back to a naive conversion.
    static func convertCMYKToSRGB(
        _ cmyk: UnsafeRawBufferPointer, width: Int, height: Int, inverted: Bool, profile: UnsafeRawBufferPointer
    ) -> Bitmap? {
        guard let session = Session(profile: profile) else { return nil }
        defer { session.close() }
        guard session.colorSpace == cmsSigCmykData else { return nil }
        let type = inverted ? lumen_lcms_type_cmyk_8_rev() : lumen_lcms_type_cmyk_8()
        guard let transform = session.transform(from: type, to: lumen_lcms_type_rgb_8(), flags: 0) else { return nil }
        defer { cmsDeleteTransform(transform) }
        let n = width * height
        guard cmyk.count >= n * 4 else { return nil }
        return Bitmap(width: width, height: height, format: .rgb8) { dst in
            run(transform, src: cmyk, dst: UnsafeMutableRawBufferPointer(dst), pixels: n, srcStride: 4, dstStride: 3)
        }
    }

    // MARK: - Internals

    /// One call's lcms2 state: a private context and the opened source profile.
    private struct Session {
        let context: cmsContext
        let profile: cmsHPROFILE
        let colorSpace: cmsColorSpaceSignature

        init?(profile bytes: UnsafeRawBufferPointer) {
            guard let base = bytes.baseAddress, bytes.count >= 132, bytes.count <= Int(UInt32.max) else { return nil }
            guard let context = lumen_lcms_context_new(ColorProfile.memoryBudget) else { return nil }
            guard let profile = cmsOpenProfileFromMemTHR(context, base, UInt32(bytes.count)) else {
                lumen_lcms_context_free(context)
                return nil
            }
            self.context = context
            self.profile = profile
            self.colorSpace = cmsGetColorSpace(profile)
        }

        /// Whether the profile calls itself sRGB ("sRGB IEC61966-2.1" and its relatives), in
        /// which case converting would only cost time.
        var isSRGB: Bool {
            var buffer = [CChar](repeating: 0, count: 128)
            let n = cmsGetProfileInfoASCII(profile, cmsInfoDescription, "en", "US", &buffer, UInt32(buffer.count))
            guard n > 0 else { return false }
            let description = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return description.hasPrefix("sRGB")
        }

        /// A transform from the profile to lcms2's built-in sRGB, perceptual intent.
        func transform(from input: UInt32, to output: UInt32, flags: UInt32) -> cmsHTRANSFORM? {
            guard let srgb = cmsCreate_sRGBProfileTHR(context) else { return nil }
            defer { cmsCloseProfile(srgb) }
            return cmsCreateTransformTHR(context, profile, input, srgb, output, UInt32(INTENT_PERCEPTUAL), flags)
        }

        func close() {
            cmsCloseProfile(profile)
            lumen_lcms_context_free(context)
        }
    }

    /// Runs `transform` over `pixels` pixels in chunks (cmsDoTransform counts in UInt32).
    private static func run(
        _ transform: cmsHTRANSFORM, src: UnsafeRawBufferPointer, dst: UnsafeMutableRawBufferPointer,
        pixels: Int, srcStride: Int, dstStride: Int
    ) {
        guard let s = src.baseAddress, let d = dst.baseAddress else { return }
        let chunk = 1 << 20
        var start = 0
        while start < pixels {
            let n = min(chunk, pixels - start)
            cmsDoTransform(transform, s + start * srcStride, d + start * dstStride, UInt32(n))
            start += n
        }
    }

    private static func isGrayExpanded(_ image: Bitmap) -> Bool {
        let c = image.format.channels
        return image.pixels.withUnsafeBufferPointer { p in
            var i = 0
            while i < p.count {
                if p[i] != p[i + 1] || p[i] != p[i + 2] { return false }
                i += c
            }
            return true
        }
    }
}
