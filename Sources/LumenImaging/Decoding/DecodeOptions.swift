import CLumenShim

/// How a target size is filled.
public enum ContentMode: String, Sendable, Hashable {
    /// Scale so the whole image fits inside the target; the result may be smaller on one side.
    case aspectFit
    /// Scale so the image covers the target, then crop the centre: the result is exactly the
    /// target size (unless upscaling is off and the image is smaller).
    case aspectFill
}

/// The size an image should be decoded at.
public enum DecodeSize: Sendable, Hashable {
    /// The longest side at most `n` pixels, aspect ratio kept.
    case maxPixelSize(Int)
    /// A target size in pixels with a content mode.
    case size(width: Int, height: Int, contentMode: ContentMode)
}

/// How hard the decoder shrinks while decoding (JPEG DCT scaling, WebP scaled decode, PNG block
/// averaging by a whole factor) before the resampler produces the exact size.
///
/// The decoder picks the smallest codec scale whose output is at least `factor` times the
/// target on both sides. `1` is the hardest pre-shrink (fastest; the codec's own downscale
/// does most of the work); `2` keeps twice the target for the resampler (sharper, slower).
public struct Preshrink: Sendable, Hashable {
    /// Minimum ratio between the codec's output and the target size, at least 1.
    public var factor: Double

    /// Creates a rule that keeps at least `factor` times the target size for the resampler.
    /// - Precondition: `factor` is at least 1.
    public init(factor: Double) {
        precondition(factor >= 1, "Preshrink: factor must be at least 1, got \(factor)")
        self.factor = factor
    }

    /// Fastest: decode at the smallest scale that still covers the target.
    public static let fastest = Preshrink(factor: 1)
    /// Keeps at least 1.5× the target for the resampler.
    public static let balanced = Preshrink(factor: 1.5)
    /// Keeps at least 2× the target for the resampler.
    public static let sharpest = Preshrink(factor: 2)
}

/// Options for ``ImageDecoder``.
public struct DecodeOptions: Sendable, Hashable {
    /// The size to decode at; `nil` decodes at full size. Default `nil`.
    public var size: DecodeSize?
    /// Whether a target larger than the image scales it up. Default `false`.
    public var allowsUpscaling: Bool
    /// The pre-shrink rule. Default ``Preshrink/fastest``.
    public var preshrink: Preshrink
    /// The largest decoded image allowed, in pixels, checked from the header before pixels are
    /// allocated. For animations decoded frame by frame the limit applies to frames × area.
    /// Default 100 megapixels.
    public var maximumPixelCount: Int
    /// Whether EXIF orientation is applied so that the output is upright. Default `true`.
    public var appliesOrientation: Bool
    /// Whether an embedded ICC profile is converted to sRGB. Default `true`.
    public var convertsColorProfile: Bool
    /// The most scans a progressive JPEG may have before it is refused as hostile. Default 100.
    public var maximumProgressiveScans: Int
    /// Whether a 1/8- or 1/4-scale JPEG decode may use Lumen's own reduced-scale decoder
    /// (`lumen_jpeg_decode_reduced`) instead of TurboJPEG. Off only for
    /// ``ImageDecoder/decodeAtCodecScale(_:options:)`` (TurboJPEG's floor) and for tests that
    /// compare the two.
    var allowsReducedScaleDecoder = true
    /// Whether a PNG that ISA-L's row reader can read (8-bit, non-interlaced RGB or RGBA) is
    /// inflated with it instead of libspng's zlib. Off only for tests that compare the two.
    var allowsFastPNGRows = true
    /// Stops the decode part-way once cancelled: the decoder then throws
    /// ``ImagingError/cancelled``. Default `nil` (the decode always runs to its end).
    public var cancellation: DecodeCancellation?

    /// Creates options; each parameter sets the property of the same name, and the defaults
    /// are the ones documented there (full size, no upscaling, ``Preshrink/fastest``,
    /// 100 megapixels, orientation and colour conversion on, 100 progressive scans).
    public init(
        size: DecodeSize? = nil,
        allowsUpscaling: Bool = false,
        preshrink: Preshrink = .fastest,
        maximumPixelCount: Int = 100_000_000,
        appliesOrientation: Bool = true,
        convertsColorProfile: Bool = true,
        maximumProgressiveScans: Int = 100
    ) {
        self.size = size
        self.allowsUpscaling = allowsUpscaling
        self.preshrink = preshrink
        self.maximumPixelCount = maximumPixelCount
        self.appliesOrientation = appliesOrientation
        self.convertsColorProfile = convertsColorProfile
        self.maximumProgressiveScans = maximumProgressiveScans
    }
}

/// A flag that stops a decode part-way, for work nobody waits for any more.
///
/// Cancel it from any thread while a decode with these ``DecodeOptions`` runs. The decoder
/// looks at it before it starts, before it resamples, and as it goes where the codec decodes
/// in steps: Lumen's reduced-scale JPEG decoder before each row of blocks, the PNG row readers
/// (ISA-L's and libspng's) before each row. TurboJPEG's full-scale decodes, libspng's
/// whole-image decodes, libwebp, GIF and HEIF decodes run to their end once started. A
/// decode that sees it throws ``ImagingError/cancelled``. Two options are equal only when
/// they hold the same flag (or none).
public final class DecodeCancellation: @unchecked Sendable, Hashable { // the flag is only read and written atomically
    /// The flag, in memory the C decoders can read (`lumen_flag_is_set`).
    let flag: UnsafeMutablePointer<CInt>

    /// A flag that is not set.
    public init() {
        flag = .allocate(capacity: 1)
        flag.initialize(to: 0)
    }

    deinit { flag.deallocate() }

    /// Sets the flag; decodes watching it stop at their next look. Idempotent.
    public func cancel() { lumen_flag_set(flag) }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { lumen_flag_is_set(flag) != 0 }

    /// Throws ``ImagingError/cancelled`` once the flag is set.
    func check() throws(ImagingError) {
        if isCancelled { throw .cancelled }
    }

    public static func == (a: DecodeCancellation, b: DecodeCancellation) -> Bool { a === b }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
