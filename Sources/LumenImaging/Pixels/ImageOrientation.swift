/// The EXIF orientation of stored pixels (TIFF tag 0x0112, values 1–8).
///
/// The name says where the top of the stored image must go for the picture to be upright,
/// following the common `UIImage.Orientation` naming.
public enum ImageOrientation: Int, Sendable, Hashable, CaseIterable {
    case up = 1, upMirrored = 2, down = 3, downMirrored = 4
    case leftMirrored = 5, right = 6, rightMirrored = 7, left = 8

    /// Whether the upright image has width and height swapped against the stored one.
    public var swapsDimensions: Bool { rawValue >= 5 }
}

extension Bitmap {
    /// This image turned upright from the stored `orientation`.
    ///
    /// - Complexity: O(pixels); `.up` returns `self` without copying.
    public func applying(_ orientation: ImageOrientation) -> Bitmap {
        if orientation == .up { return self }
        let c = format.channels
        let w = width, h = height
        let ow = orientation.swapsDimensions ? h : w
        let oh = orientation.swapsDimensions ? w : h
        return pixels.withUnsafeBufferPointer { src in
            Bitmap(width: ow, height: oh, format: format) { dst in
                for y in 0..<oh {
                    for x in 0..<ow {
                        // Source coordinate that lands at (x, y) of the upright image.
                        let sx: Int, sy: Int
                        switch orientation {
                        case .up: (sx, sy) = (x, y)
                        case .upMirrored: (sx, sy) = (w - 1 - x, y)
                        case .down: (sx, sy) = (w - 1 - x, h - 1 - y)
                        case .downMirrored: (sx, sy) = (x, h - 1 - y)
                        case .leftMirrored: (sx, sy) = (y, x)
                        case .right: (sx, sy) = (y, h - 1 - x)
                        case .rightMirrored: (sx, sy) = (w - 1 - y, h - 1 - x)
                        case .left: (sx, sy) = (w - 1 - y, x)
                        }
                        let s = (sy * w + sx) * c
                        let d = (y * ow + x) * c
                        for k in 0..<c { dst[d + k] = src[s + k] }
                    }
                }
            }
        }
    }
}
