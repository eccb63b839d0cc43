extension Bitmap {
    /// The image composited over an opaque `background` colour: an RGB bitmap whose every
    /// pixel is `colour × alpha + background × (1 − alpha)`, rounded. An image without alpha
    /// is returned as it is.
    ///
    /// For formats without alpha: ``encode(as:)`` writes a JPEG from the colour channels alone,
    /// so a transparent pixel shows whatever colour it stores (often black); flatten first to
    /// show the background there instead.
    public func flattened(onto background: (red: UInt8, green: UInt8, blue: UInt8)) -> Bitmap {
        guard format.hasAlpha else { return self }
        let back = [Int(background.red), Int(background.green), Int(background.blue)]
        return pixels.withUnsafeBufferPointer { source in
            Bitmap(width: width, height: height, format: .rgb8) { destination in
                for pixel in 0..<(width * height) {
                    let s = pixel * 4, d = pixel * 3
                    let alpha = Int(source[s + 3])
                    for channel in 0..<3 {
                        let mixed = Int(source[s + channel]) * alpha + back[channel] * (255 - alpha)
                        destination[d + channel] = UInt8((mixed + 127) / 255)
                    }
                }
            }
        }
    }
}
