/// Why an image could not be decoded or encoded.
///
/// Codec failures from the C libraries become these cases at the bridge; a hostile or broken
/// image is always an error, never a crash.
public enum ImagingError: Error, Sendable, Hashable {
    /// The bytes are not in a format Lumen decodes (sniffed by magic bytes, never by name).
    case unsupportedFormat
    /// The data is damaged or violates its format; `reason` says what the codec found.
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
        case .unsupportedFormat: "unsupportedFormat: not a JPEG, PNG, WebP, GIF, HEIC or AVIF image"
        case .corrupted(let reason): "corrupted: \(reason)"
        case .truncated: "truncated: the data ends before the image does"
        case .tooLarge(let w, let h): "tooLarge(width: \(w), height: \(h)): over the decoded pixel limit"
        case .encodingFailed(let reason): "encodingFailed: \(reason)"
        case .invalidArgument(let reason): "invalidArgument: \(reason)"
        case .cancelled: "cancelled: the decode was stopped part-way because nobody wanted it any more"
        }
    }
}
