import Foundation

/// A decoded image with what the pipeline knows about it: the value stored in the memory
/// cache and handed to processors.
public struct ImageContainer: Sendable {
    /// The pixels.
    public var image: Bitmap
    /// `true` for a progressive preview (a partial decode) rather than the final image.
    public var isPreview: Bool
    /// The encoded format the image was decoded from, when known.
    public var format: ImageFormat?
    /// The original encoded bytes, when the decoder kept them (never for processed images).
    public var data: Data?

    /// Creates a container; each parameter sets the property of the same name. By default the
    /// image is final, of unknown format, without its encoded data.
    public init(image: Bitmap, isPreview: Bool = false, format: ImageFormat? = nil, data: Data? = nil) {
        self.image = image
        self.isPreview = isPreview
        self.format = format
        self.data = data
    }

    /// The memory cache's cost of this entry: bytes of pixel memory plus the kept encoded data, if any.
    public var cost: Int { image.byteCount + (data?.count ?? 0) }
}
