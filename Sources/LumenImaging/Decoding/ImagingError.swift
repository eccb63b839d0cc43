/// Why an image could not be decoded or encoded.
///
/// Codec failures from the C libraries become these cases at the bridge; a hostile or broken
/// image is always an error, never a crash.
public enum ImagingError: Error, Sendable, Hashable {
    /// The bytes are not in a format Lumen decodes (sniffed by magic bytes, never by name).
    ///
    /// `nil`: the bytes are none of the formats Lumen knows. A format: Lumen recognised it but
    /// this build cannot decode or encode it — HEIC and AVIF when Lumen is built without
    /// libheif (the default; `LUMEN_HEIF=1` turns it on), or when libheif has no plugin for
    /// the image's compression. `switch` and `catch` patterns may leave the value out
    /// (`case .unsupportedFormat:` matches both kinds).
    case unsupportedFormat(ImageFormat?)
    /// The data is damaged or violates its format, or goes past one of a codec's own safety
    /// limits other than the pixel limit (a PNG's metadata, libheif's security limits);
    /// `reason` says what the codec found.
    case corrupted(reason: String)
    /// The data ends before the image does and nothing usable could be recovered.
    case truncated
    /// The declared size exceeds the configured limit (checked before pixels are allocated).
    /// For animations `width`×`height` is the canvas and the limit is on frames × area.
    case tooLarge(width: Int, height: Int)
    /// The encoder failed; `reason` says why.
    case encodingFailed(reason: String)
    /// The requested operation's arguments make no sense for this image (an empty crop, …).
    case invalidArgument(reason: String)
    /// The decode stopped part-way: its ``DecodeOptions/cancellation`` was cancelled.
    case cancelled
}

extension ImagingError: CustomStringConvertible {
    /// The case name, then what went wrong, e.g. `corrupted: <reason>`.
    public var description: String {
        switch self {
        case .unsupportedFormat(nil): "unsupportedFormat: not a JPEG, PNG, WebP, GIF, HEIC or AVIF image"
        case .unsupportedFormat(let format?): "unsupportedFormat: \(Self.unavailable(format))"
        case .corrupted(let reason): "corrupted: \(reason)"
        case .truncated: "truncated: the data ends before the image does"
        case .tooLarge(let w, let h): "tooLarge(width: \(w), height: \(h)): over the decoded pixel limit"
        case .encodingFailed(let reason): "encodingFailed: \(reason)"
        case .invalidArgument(let reason): "invalidArgument: \(reason)"
        case .cancelled: "cancelled: the decode was stopped part-way because nobody wanted it any more"
        }
    }

    /// Why `format`, which Lumen recognised, cannot be handled by this build, and for HEIC and
    /// AVIF how to get it.
    private static func unavailable(_ format: ImageFormat) -> String {
        let name = switch format {
        case .jpeg: "JPEG"
        case .png: "PNG"
        case .webp: "WebP"
        case .gif: "GIF"
        case .heic: "HEIC"
        case .avif: "AVIF"
        }
        switch format {
        case .heic, .avif:
            #if LUMEN_HEIF
            return "\(name), but libheif here has no plugin to decode or encode it"
            #else
            return "\(name), but HEIC/AVIF support is not built in (build Lumen with LUMEN_HEIF=1 and libheif-dev installed)"
            #endif
        case .jpeg, .png, .webp, .gif:
            return "\(name), which this build of Lumen does not support"
        }
    }
}
