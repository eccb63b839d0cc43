/// The EXIF orientation of stored pixels (TIFF tag 0x0112, values 1–8).
///
/// The name says where the top of the stored image must go for the picture to be upright,
/// following the common `UIImage.Orientation` naming.
public enum ImageOrientation: Int, Sendable, Hashable, CaseIterable {
    /// 1: stored upright; nothing to do.
    case up = 1
    /// 2: stored mirrored left to right; flipped horizontally to be upright.
    case upMirrored = 2
    /// 3: stored upside down; turned 180° to be upright.
    case down = 3
    /// 4: stored mirrored top to bottom; flipped vertically to be upright.
    case downMirrored = 4
    /// 5: stored transposed; mirrored across the top-left to bottom-right diagonal to be
    /// upright (width and height swap).
    case leftMirrored = 5
    /// 6: stored turned a quarter anticlockwise; turned a quarter clockwise to be upright
    /// (width and height swap).
    case right = 6
    /// 7: stored transversed; mirrored across the top-right to bottom-left diagonal to be
    /// upright (width and height swap).
    case rightMirrored = 7
    /// 8: stored turned a quarter clockwise; turned a quarter anticlockwise to be upright
    /// (width and height swap).
    case left = 8

    /// Whether the upright image has width and height swapped against the stored one.
    public var swapsDimensions: Bool { rawValue >= 5 }
}

extension Bitmap {
    /// This image turned upright from the stored `orientation`.
    ///
    /// The upright pixel at (`x`, `y`) comes from the stored pixel at:
    /// `.upMirrored` (w−1−x, y), `.down` (w−1−x, h−1−y), `.downMirrored` (x, h−1−y),
    /// `.leftMirrored` (y, x) (transpose), `.right` (y, h−1−x) (turn clockwise),
    /// `.rightMirrored` (w−1−y, h−1−x) (transverse), `.left` (w−1−y, x) (turn anticlockwise),
    /// where w×h is the stored size.
    ///
    /// - Complexity: O(pixels); `.up` returns `self` without copying. Transposing orientations
    ///   walk the image in tiles to stay cache-friendly.
    public func applying(_ orientation: ImageOrientation) -> Bitmap {
        if orientation == .up { return self }
        let w = width, h = height
        let ow = orientation.swapsDimensions ? h : w
        let oh = orientation.swapsDimensions ? w : h
        // Upright (x, y) reads stored pixel index `base + x * dx + y * dy`.
        let base: Int, dx: Int, dy: Int
        switch orientation {
        case .up: (base, dx, dy) = (0, 1, w)
        case .upMirrored: (base, dx, dy) = (w - 1, -1, w)
        case .down: (base, dx, dy) = ((h - 1) * w + w - 1, -1, -w)
        case .downMirrored: (base, dx, dy) = ((h - 1) * w, 1, -w)
        case .leftMirrored: (base, dx, dy) = (0, w, 1)
        case .right: (base, dx, dy) = ((h - 1) * w, -w, 1)
        case .rightMirrored: (base, dx, dy) = ((h - 1) * w + w - 1, -w, -1)
        case .left: (base, dx, dy) = (w - 1, w, -1)
        }
        let format = self.format
        return pixels.withUnsafeBufferPointer { srcBuffer in
            Bitmap(width: ow, height: oh, format: format) { dstBuffer in
                let src = srcBuffer.baseAddress!, dst = dstBuffer.baseAddress!
                switch format {
                case .rgb8:
                    src.withMemoryRebound(to: Pixel3.self, capacity: w * h) { s in
                        dst.withMemoryRebound(to: Pixel3.self, capacity: ow * oh) { d in
                            remap(s, d, width: ow, height: oh, base: base, dx: dx, dy: dy)
                        }
                    }
                case .rgba8:
                    src.withMemoryRebound(to: Pixel4.self, capacity: w * h) { s in
                        dst.withMemoryRebound(to: Pixel4.self, capacity: ow * oh) { d in
                            remap(s, d, width: ow, height: oh, base: base, dx: dx, dy: dy)
                        }
                    }
                }
            }
        }
    }
}

/// Three bytes moved as one value.
private struct Pixel3 { var r, g, b: UInt8 }
/// Four bytes moved as one value.
private struct Pixel4 { var r, g, b, a: UInt8 }

/// Writes `dst[y * width + x] = src[base + x * dx + y * dy]` for the whole output, in tiles when
/// the source walk is not along rows.
@inline(__always)
private func remap<P>(
    _ src: UnsafePointer<P>, _ dst: UnsafeMutablePointer<P>, width: Int, height: Int, base: Int, dx: Int, dy: Int
) {
    let tile = abs(dx) == 1 ? width : 32
    var tx = 0
    while tx < width {
        let xEnd = min(tx + tile, width)
        for y in 0..<height {
            var s = src + (base + tx * dx + y * dy)
            let d = dst + y * width
            for x in tx..<xEnd {
                d[x] = s.pointee
                s += dx
            }
        }
        tx = xEnd
    }
}
