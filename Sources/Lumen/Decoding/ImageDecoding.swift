import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a decoder is told about one decode.
public struct ImageDecodingContext: Sendable {
    /// The request that asked for the image (the first of the requests sharing this decode).
    public var request: ImageRequest
    /// The response the bytes came with, when there was one.
    public var urlResponse: URLResponse?
    /// Decode size and limits, derived from the request (``ImageRequest/thumbnail``) and the
    /// configuration (``ImagePipeline/Configuration/maximumDecodedPixelCount``).
    public var options: DecodeOptions

    /// Whether nobody wants this decode any more (its last subscriber left while it ran). A
    /// decoder may stop then by throwing; the default decoder stops part-way by itself (see
    /// ``LumenImaging/DecodeCancellation``), through ``DecodeOptions/cancellation``.
    public var isCancelled: Bool { options.cancellation?.isCancelled ?? false }

    /// Creates a context; each parameter sets the property of the same name.
    public init(request: ImageRequest, urlResponse: URLResponse? = nil, options: DecodeOptions) {
        self.request = request
        self.urlResponse = urlResponse
        self.options = options
    }
}

/// Turns encoded bytes into an ``ImageContainer``: the pipeline's decode stage.
///
/// Called on a decoding worker thread (never on the graph's owner, never on the cooperative
/// pool), possibly from several threads at once.
public protocol ImageDecoding: Sendable {
    /// Decodes `data` at the size `context.options` asks for.
    /// - Throws: any error; the pipeline reports it as ``ImagePipeline/Error/Code/decodingFailed``.
    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer

    /// Decodes a progressive preview from the first bytes of a download that is still
    /// running, at the size `context.options` asks for; `nil` when these bytes make no preview.
    ///
    /// Called only with ``ImagePipeline/Configuration/isProgressiveDecodingEnabled`` on, when
    /// a new scan of a progressive JPEG has arrived, on a decoding worker thread, at most once
    /// at a time per decode stage. The pipeline marks the result as a preview
    /// (``ImageContainer/isPreview``) and never caches it. A failure only means no preview:
    /// the download goes on. The default implementation returns `nil` (no previews), so a
    /// custom decoder produces previews only if it implements this.
    func decodePreview(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer?
}

extension ImageDecoding {
    /// No previews: the final image only.
    public func decodePreview(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer? { nil }
}

/// Namespace for the built-in decoders.
public enum ImageDecoders {
    /// Lumen's imaging engine (``LumenImaging/ImageDecoder``): JPEG, PNG, WebP, GIF (the
    /// first frame, or every frame with ``ImageRequest/Options/decodeAllFrames``), and
    /// HEIC/AVIF when built with libheif.
    public struct Default: ImageDecoding {
        /// Creates the default decoder; it holds no state.
        public init() {}

        /// A final result is never a partial image: bytes that decode only partially (a
        /// truncated progressive JPEG) fail as ``LumenImaging/ImagingError/truncated``, so a cut
        /// download or a damaged cache entry can never pass for the image.
        public func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
            if context.request.options.contains(.decodeAllFrames),
               let info = try? ImageDecoder.info(for: data), info.frameCount > 1 {
                let frames = try ImageDecoder.decodeFrames(data, options: context.options)
                return ImageContainer(frames: frames, format: info.format)
            }
            let decoded = try ImageDecoder.decode(data, options: context.options)
            if decoded.isPartial { throw ImagingError.truncated }
            var container = ImageContainer(image: decoded.bitmap, isPreview: false, format: decoded.statistics.format)
            // The header the decode read counted the frames: no second pass over the file.
            let statistics = decoded.statistics
            if statistics.frameCount > 1, statistics.format == .gif || statistics.format == .webp {
                container.sourceFrameCount = statistics.frameCount
            }
            return container
        }

        /// The partial decode of a truncated progressive JPEG: every scan that arrived, as a
        /// complete, coarser frame at the requested size. `nil` when the bytes decode as a whole
        /// image (the final decode will give it); a cut baseline JPEG fails as
        /// ``LumenImaging/ImagingError/truncated``, so it makes no preview.
        public func decodePreview(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer? {
            let decoded = try ImageDecoder.decode(data, options: context.options)
            guard decoded.isPartial else { return nil }
            return ImageContainer(image: decoded.bitmap, isPreview: true, format: decoded.statistics.format)
        }
    }
}
