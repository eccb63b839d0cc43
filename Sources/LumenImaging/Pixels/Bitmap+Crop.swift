extension Bitmap {
    /// The rectangle (`x`, `y`, `width`, `height`) of this image. The rectangle must lie inside
    /// the image.
    /// - Complexity: O(width × height) of the result.
    public func cropped(x: Int, y: Int, width w: Int, height h: Int) -> Bitmap {
        precondition(x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= width && y + h <= height,
                     "Bitmap.cropped: (\(x), \(y), \(w)x\(h)) is outside \(width)x\(height)")
        if x == 0 && y == 0 && w == width && h == height { return self }
        let c = format.channels
        let srcRow = bytesPerRow
        return pixels.withUnsafeBufferPointer { src in
            Bitmap(width: w, height: h, format: format) { dst in
                if w == width {
                    // Full rows are contiguous: one copy.
                    UnsafeMutableRawPointer(dst.baseAddress!)
                        .copyMemory(from: src.baseAddress! + y * srcRow, byteCount: h * srcRow)
                    return
                }
                for row in 0..<h {
                    let s = (y + row) * srcRow + x * c
                    let d = row * w * c
                    UnsafeMutableRawPointer(dst.baseAddress! + d)
                        .copyMemory(from: src.baseAddress! + s, byteCount: w * c)
                }
            }
        }
    }
}
