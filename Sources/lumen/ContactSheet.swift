import Lumen

/// Lays thumbnails out on a grid over a neutral background, each centred in its cell.
enum ContactSheet {
    static func make(_ images: [Bitmap], cell: Int, columns: Int, padding: Int = 8) -> Bitmap {
        let columns = max(1, min(columns, images.count))
        let rows = max(1, (images.count + columns - 1) / columns)
        let pitch = cell + padding
        let width = columns * pitch + padding
        let height = rows * pitch + padding
        var sheet = [UInt8](repeating: 0x2A, count: width * height * 3)
        for (index, image) in images.enumerated() {
            let ox = padding + (index % columns) * pitch + (cell - min(cell, image.width)) / 2
            let oy = padding + (index / columns) * pitch + (cell - min(cell, image.height)) / 2
            let c = image.format.channels
            for y in 0..<min(cell, image.height) {
                for x in 0..<min(cell, image.width) {
                    let s = (y * image.width + x) * c
                    let d = ((oy + y) * width + ox + x) * 3
                    let a = c == 4 ? Int(image.pixels[s + 3]) : 255
                    for k in 0..<3 {
                        // Blend over the background so transparent images show as such.
                        let bg = Int(sheet[d + k])
                        sheet[d + k] = UInt8((Int(image.pixels[s + k]) * a + bg * (255 - a) + 127) / 255)
                    }
                }
            }
        }
        return Bitmap(width: width, height: height, format: .rgb8, pixels: sheet)
    }
}
