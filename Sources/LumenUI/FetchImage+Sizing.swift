import Lumen

/// What ``FetchImage`` decodes at: the display size's decode size (``DisplaySize/decodeSize``)
/// capped at the image's natural size once a decode revealed it, and what a decode tells it
/// about that natural size.
extension FetchImage {
    /// The decode size wanted now; `nil` while waiting for a display size.
    func currentTarget() -> DecodeTarget? {
        guard let request else { return nil }
        if request.thumbnail != nil || !decodesAtDisplaySize {
            return DecodeTarget(size: request.thumbnail)
        }
        guard let size = currentDisplaySize?.decodeSize else { return nil }
        return DecodeTarget(size: cappedAtNaturalSize(size))
    }

    /// `size`, or the whole image when that is no larger than `size` asks for: decodes never
    /// upscale, so every bucket at or above the natural size shares the natural-size decode.
    /// - `.maxPixelSize(n)`: the natural longest side when it is at most `n`.
    /// - An aspect fill: the whole image once it would not be scaled down to cover the target
    ///   (a side of the target at least the image's), which the view then crops.
    private func cappedAtNaturalSize(_ size: DecodeSize) -> DecodeSize {
        switch size {
        case .maxPixelSize(let asked):
            if let natural = naturalMaxPixelSize, natural <= asked { return .maxPixelSize(natural) }
        case .size(let width, let height, _):
            if let natural = naturalPixelSize, width >= natural.width || height >= natural.height {
                return .maxPixelSize(max(natural.width, natural.height))
            }
        }
        return size
    }

    /// The model's request at `target`'s decode size and the model's priority.
    func sizedRequest(_ target: DecodeTarget) -> ImageRequest? {
        guard var request else { return nil }
        request.thumbnail = target.size
        request.priority = priority
        return request
    }

    /// Learns the natural size from `image`, made for `target`: an image that came back
    /// smaller than asked is the whole image (decodes never upscale; an aspect fill smaller
    /// than its target on both sides was not cropped either). Processors change the size, so
    /// not with them; a request's own `.size` thumbnail keeps its target. Returns the target
    /// the image really is (and sets it on `request`).
    func learnNaturalSize(from image: Bitmap, target: DecodeTarget, request: inout ImageRequest) -> DecodeTarget {
        guard request.processors.isEmpty, let size = target.size else { return target }
        switch size {
        case .maxPixelSize(let asked):
            guard max(image.width, image.height) < asked else { return target }
        case .size(let width, let height, _):
            guard self.request?.thumbnail == nil, image.width < width, image.height < height else { return target }
        }
        let longest = max(image.width, image.height)
        naturalMaxPixelSize = longest
        naturalPixelSize = (image.width, image.height)
        request.thumbnail = .maxPixelSize(longest)
        return DecodeTarget(size: .maxPixelSize(longest))
    }
}
