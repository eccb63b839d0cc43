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
    /// Every frame of an animation, composited, in order, with durations, when the request
    /// asked for them (``ImageRequest/Options/decodeAllFrames``) and the image has more than
    /// one; ``image`` is then the first. `nil` for a still image.
    public var frames: [AnimationFrame]?
    /// How many frames the source has, when the default decoder found more than one in a GIF
    /// or WebP it decoded as a still image (its first frame): a caller that wants the
    /// animation (the server, for WebP output) can then ask again with
    /// ``ImageRequest/Options/decodeAllFrames``. `nil` otherwise.
    package var sourceFrameCount: Int?

    /// Creates a container; each parameter sets the property of the same name. By default the
    /// image is final, of unknown format, without its encoded data or frames.
    public init(image: Bitmap, isPreview: Bool = false, format: ImageFormat? = nil, data: Data? = nil) {
        self.image = image
        self.isPreview = isPreview
        self.format = format
        self.data = data
    }

    /// Creates the container of an animation: ``image`` is the first of `frames`.
    /// - Precondition: `frames` is not empty.
    public init(frames: [AnimationFrame], format: ImageFormat? = nil) {
        precondition(!frames.isEmpty, "ImageContainer: an animation needs at least one frame")
        self.init(image: frames[0].bitmap, format: format)
        self.frames = frames
    }

    /// The memory cache's cost of this entry: bytes of pixel memory (every frame's, for an
    /// animation) plus the kept encoded data, if any.
    public var cost: Int {
        let pixels = frames.map { $0.reduce(0) { $0 + $1.bitmap.byteCount } } ?? image.byteCount
        return pixels + (data?.count ?? 0)
    }

    /// The animation encoded as WebP (animated when it has frames; a still image otherwise),
    /// at `quality` 0–100 or lossless: how a GIF is served as an animated WebP.
    /// - Throws: ``LumenImaging/ImagingError/encodingFailed(reason:)``.
    public func encodedAsWebP(quality: Int = 80, lossless: Bool = false) throws(ImagingError) -> Data {
        guard let frames, frames.count > 1 else { return try image.encode(as: .webp(quality: quality, lossless: lossless)) }
        return try frames.encode(as: .webp(quality: quality, lossless: lossless))
    }
}
