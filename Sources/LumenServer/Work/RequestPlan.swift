import Foundation
import Lumen

/// The output format a request asked for, before the image is known.
enum OutputChoice: Sendable, Hashable {
    /// `f:jpeg`, `f:png`, `f:webp`, `f:avif`, or what `f:auto` found in `Accept`.
    case fixed(ImageOptions.Format)
    /// No `f`: the source's format when there is an encoder for it, else JPEG (PNG for alpha).
    case likeSource
    /// `f:auto` without WebP or AVIF in `Accept`: JPEG, or PNG for alpha.
    case jpegOrPNG

    init(_ options: ImageOptions, accept: String?) {
        switch options.format {
        case nil: self = .likeSource
        case .auto?:
            let accept = (accept ?? "").lowercased()
            if ImageServer.isAVIFAvailable && accept.contains("image/avif") { self = .fixed(.avif) }
            else if accept.contains("image/webp") { self = .fixed(.webp) }
            else { self = .jpegOrPNG }
        case let format?: self = .fixed(format)
        }
    }

    /// The choice in a cache key.
    var token: String {
        switch self {
        case .fixed(let format): "f=\(format.rawValue)"
        case .likeSource: "f=source"
        case .jpegOrPNG: "f=jpeg-or-png"
        }
    }

    /// The format to encode in, and its media type. A JPEG source whose result has alpha (a
    /// circle, rounded corners) is served as PNG: JPEG cannot carry the transparency asked for.
    func resolve(sourceFormat: ImageFormat?, hasAlpha: Bool) -> (ImageOptions.Format, String) {
        let format: ImageOptions.Format
        switch self {
        case .fixed(let fixed): format = fixed
        case .jpegOrPNG: format = hasAlpha ? .png : .jpeg
        case .likeSource:
            switch sourceFormat {
            case .png?: format = .png
            case .webp?: format = .webp
            case .avif? where ImageServer.isAVIFAvailable: format = .avif
            case .jpeg? where !hasAlpha: format = .jpeg
            default: format = hasAlpha ? .png : .jpeg
            }
        }
        return (format, "image/" + format.rawValue)
    }
}

/// How image options become a pipeline request: the decode size (so that equal sizes share
/// one decode) and the processors after it, in a fixed order.
enum RequestPlan {
    /// A side no box constrains: large enough never to bind.
    static let unbounded = 1 << 24

    /// Decoded at the box: `contain` fits inside it, `cover` covers it (then cropped).
    static func thumbnail(for options: ImageOptions) -> DecodeSize? {
        let mode: ContentMode = options.fit == .cover ? .aspectFill : .aspectFit
        switch (options.pixelWidth, options.pixelHeight) {
        case let (w?, h?): return .size(width: w, height: h, contentMode: mode)
        case let (w?, nil): return .size(width: w, height: unbounded, contentMode: .aspectFit)
        case let (nil, h?): return .size(width: unbounded, height: h, contentMode: .aspectFit)
        case (nil, nil): return nil
        }
    }

    static func processors(for options: ImageOptions) -> [any ImageProcessing] {
        var processors: [any ImageProcessing] = []
        switch (options.pixelWidth, options.pixelHeight) {
        case let (w?, h?) where options.fit == .cover:
            // The decode covers the box; this cuts the centre out (and scales up with upscale).
            processors.append(ImageProcessors.Resize(size: (w, h), contentMode: .aspectFill, crop: true, upscale: options.upscale))
        case let (w?, h?) where options.upscale:
            processors.append(ImageProcessors.Resize(size: (w, h), contentMode: .aspectFit, upscale: true))
        case let (w?, nil) where options.upscale:
            processors.append(ImageProcessors.Resize(width: w, upscale: true))
        case let (nil, h?) where options.upscale:
            processors.append(ImageProcessors.Resize(height: h, upscale: true))
        default:
            break
        }
        if options.isGray { processors.append(ImageProcessors.Grayscale()) }
        if let blur = options.blur { processors.append(ImageProcessors.GaussianBlur(radius: blur)) }
        if let radius = options.radius { processors.append(ImageProcessors.RoundedCorners(radius: radius)) }
        if options.isCircle { processors.append(ImageProcessors.Circle()) }
        return processors
    }

    static func encode(_ image: Bitmap, as format: ImageOptions.Format, quality: Int?) throws -> Data {
        switch format {
        case .jpeg:
            let opaque = image.format.hasAlpha ? image.flattened(onto: (255, 255, 255)) : image
            return try opaque.encode(as: .jpeg(quality: quality ?? 85))
        case .png: return try image.encode(as: .png)
        case .webp: return try image.encode(as: .webp(quality: quality ?? 80))
        case .avif: return try image.encode(as: .avif(quality: quality ?? 60))
        case .auto: return try image.encode(as: .jpeg(quality: quality ?? 85)) // resolved before encoding
        }
    }
}

/// Which status a pipeline failure is, with its one-line reason (never the source URL: it
/// may carry credentials).
enum ErrorStatus {
    static func map(_ error: any Error) -> (Int, String) {
        if let error = error as? ImagePipeline.Error {
            switch error.code {
            case .dataTooLarge:
                return (413, "the source is over the largest size accepted")
            case .dataLoadingFailed:
                return loading(error.underlyingError)
            case .dataIsEmpty:
                return (502, "the origin sent an empty body")
            case .decodingFailed:
                return decoding(error.underlyingError)
            case .cancelled, .pipelineInvalidated:
                return (503, "the request was cancelled")
            default:
                return (500, "the image could not be made: \(error.code)")
            }
        }
        if error is CancellationError { return (503, "the request was cancelled") }
        if let error = error as? ImagingError { return decoding(error) }
        return (500, "the image could not be made")
    }

    private static func loading(_ error: (any Error)?) -> (Int, String) {
        switch error {
        case let error as DataLoader.Error:
            switch error {
            case .statusCode(let status, _) where status == 404 || status == 410:
                return (404, "the origin has no such source (HTTP \(status))")
            case .statusCode(let status, _):
                return (502, "the origin answered HTTP \(status)")
            case .fileNotFound:
                return (404, "no such local file")
            case .localFileAccessDenied, .addressRefused:
                return (403, "the source address is not allowed")
            case .incompleteBody:
                return (502, "the origin's body ended before its announced length")
            case .fileUnreadable, .invalidDataURL:
                return (403, "the source cannot be read")
            }
        case let error as URLError where error.code == .timedOut:
            return (504, "the origin was slower than the source timeout")
        case is URLError:
            return (502, "the origin could not be reached or sent a malformed response")
        case let error as ImagePipeline.Error where error.code == .dataTooLarge:
            return (413, "the source is over the largest size accepted")
        default:
            return (502, "the origin failed")
        }
    }

    private static func decoding(_ error: (any Error)?) -> (Int, String) {
        switch error as? ImagingError {
        case .unsupportedFormat(nil)?: return (415, "the source is not an image")
        case .unsupportedFormat(let format?)?: return (415, "\(format) sources are not supported by this build")
        case .tooLarge?: return (413, "the source has more pixels than the largest accepted")
        case .truncated?: return (422, "the source image is cut short")
        case .corrupted?: return (422, "the source image is corrupt")
        default: return (422, "the source image could not be decoded")
        }
    }
}
