import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Where a response came from when it did not come from the source.
public enum CacheType: Sendable, Hashable {
    /// The memory cache of decoded images.
    case memory
    /// The disk cache of encoded data.
    case disk
}

/// A loaded image and how it was obtained.
public struct ImageResponse: Sendable {
    /// The decoded (and processed) image with its metadata.
    public var container: ImageContainer
    /// The request that produced it.
    public var request: ImageRequest
    /// The response of the download that produced the bytes, when there was one (`nil` for
    /// closure requests and cache hits).
    public var urlResponse: URLResponse?
    /// The cache that served the response; `nil` when it was loaded from the source.
    public var cacheType: CacheType?

    /// Creates a response; each parameter sets the property of the same name.
    public init(container: ImageContainer, request: ImageRequest, urlResponse: URLResponse? = nil, cacheType: CacheType? = nil) {
        self.container = container
        self.request = request
        self.urlResponse = urlResponse
        self.cacheType = cacheType
    }

    /// The pixels.
    public var image: Bitmap { container.image }
    /// The animation's frames (``ImageContainer/frames``), `nil` for a still image.
    public var frames: [AnimationFrame]? { container.frames }
    /// `true` for a progressive preview rather than the final image.
    public var isPreview: Bool { container.isPreview }
}
