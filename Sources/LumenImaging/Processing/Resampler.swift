/// Resizes bitmaps. (Placeholder nearest-neighbour sampling; the Lanczos-3 resampler replaces it.)
public enum Resampler {
    /// `image` resampled to exactly `width`×`height`.
    public static func resample(_ image: Bitmap, width: Int, height: Int) -> Bitmap {
        let c = image.format.channels
        return image.pixels.withUnsafeBufferPointer { src in
            Bitmap(width: width, height: height, format: image.format) { dst in
                for y in 0..<height {
                    let sy = min(image.height - 1, y * image.height / height)
                    for x in 0..<width {
                        let sx = min(image.width - 1, x * image.width / width)
                        for k in 0..<c { dst[(y * width + x) * c + k] = src[(sy * image.width + sx) * c + k] }
                    }
                }
            }
        }
    }
}
