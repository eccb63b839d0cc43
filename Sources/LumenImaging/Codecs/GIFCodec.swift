import CGif

/// GIF decoding with giflib, with Lumen's own frame compositing.
///
/// Every call opens its own `GifFileType` over the caller's bytes (a read callback reaching
/// the bytes through `UserData`, no captures) and always closes it, so calls run concurrently.
/// Records are read one at a time (never `DGifSlurp`), so a decode reads only as far as it
/// needs and the frames × area limit is checked before each frame is decoded.
///
/// Behaviour, chosen to match browsers:
/// - **Canvas**: the logical screen, enlarged to contain the first frame when that frame
///   reaches beyond it (as Chromium and Firefox do, for files whose screen size is wrong or
///   zero). The header therefore declares the real cost of the first frame, and a file whose
///   first frame claims a huge rectangle (`decompression_bomb.gif`) is refused as
///   ``ImagingError/tooLarge(width:height:)`` before any pixel is allocated. Later frames are
///   clipped to the canvas; a frame entirely outside it is skipped without decompressing.
/// - **Pixels**: the canvas starts transparent (the background colour is ignored, as browsers
///   do). A frame draws with its local colour map, else the global one; the graphic control
///   extension's transparent index leaves the pixel below untouched, and an index beyond the
///   colour map counts as transparent too. Interlaced frames are de-interlaced.
/// - **Alpha**: the first frame comes out `.rgba8` when it declares a transparent index or
///   does not cover the canvas, `.rgb8` otherwise (decided from the records, so the header's
///   `hasAlpha` agrees with the decode). All frames from ``decodeFrames(_:header:options:)``
///   share one format: `.rgba8` when the first frame has alpha or any composited frame has a
///   non-opaque pixel.
/// - **Disposal**: none/keep leave the frame, restore-to-background clears its rectangle to
///   transparent, restore-to-previous puts back the canvas as it was before the frame.
/// - **Durations**: the delay in hundredths of a second; 0 or 1 (10 ms or less) means 0.1 s,
///   as browsers do for GIFs that ask to play "as fast as possible".
/// - **End of data**: data that ends inside a frame is ``ImagingError/truncated``; an
///   animation whose data ends between frames (no trailer byte) keeps the frames it has.
enum GIFCodec: ImageCodec {
    static func readHeader(_ data: UnsafeRawBufferPointer, options: DecodeOptions) throws(ImagingError) -> ImageHeader {
        try withGIF(data) { reader throws(ImagingError) in
            var control = GraphicControl()
            guard let frame = try reader.nextFrame(control: &control, allowingDescriptorFailure: true) else {
                throw .corrupted(reason: "GIF has no image")
            }
            let canvas = reader.canvas(containing: frame)
            var header = ImageHeader(
                format: .gif, width: canvas.width, height: canvas.height,
                hasAlpha: control.transparentIndex >= 0 || !frame.covers(canvas))
            // Counted from the block structure, so that frames × canvas is checked against the
            // pixel limit before any frame is decompressed or composited.
            header.frameCount = max(1, countFrames(data))
            return header
        }
    }

    /// The image descriptors in `data`, found by walking the GIF's blocks without decompressing
    /// any: extensions and image data are skipped sub-block by sub-block. Stops at the trailer,
    /// at a byte that starts no block, or where the data ends (counting a descriptor that
    /// started there).
    static func countFrames(_ data: UnsafeRawBufferPointer) -> Int {
        let count = data.count
        guard count >= 13 else { return 0 }
        var i = 13
        if data[10] & 0x80 != 0 { i += 3 << (Int(data[10] & 7) + 1) }  // the global colour table
        /// Skips the sub-blocks from `i` (each a length byte and that many bytes, then a 0).
        func skipSubBlocks(_ i: inout Int) {
            while i < count {
                let length = Int(data[i])
                i += 1 + length
                if length == 0 { return }
            }
        }
        var frames = 0
        while i < count {
            switch data[i] {
            case 0x21:  // an extension: its label, then sub-blocks
                i += 2
                skipSubBlocks(&i)
            case 0x2C:  // an image: the descriptor, a local colour table, the LZW code size, data
                frames += 1
                guard i + 10 <= count else { return frames }
                let packed = data[i + 9]
                i += 10
                if packed & 0x80 != 0 { i += 3 << (Int(packed & 7) + 1) }
                i += 1
                skipSubBlocks(&i)
            default:  // the trailer (0x3B), or not a block
                return frames
            }
        }
        return frames
    }

    static func decode(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, minimumSize: PixelSize?, options: DecodeOptions
    ) throws(ImagingError) -> CodecOutput {
        try withGIF(data) { reader throws(ImagingError) in
            var control = GraphicControl()
            guard let frame = try reader.nextFrame(control: &control, allowingDescriptorFailure: false) else {
                throw .corrupted(reason: "GIF has no image")
            }
            let canvas = reader.canvas(containing: frame)
            try checkLimit(frames: 1, canvas: canvas, options: options)
            try checkLimit(frames: 1, frame: frame, options: options)
            var pixels = [UInt8](repeating: 0, count: canvas.width * canvas.height * 4)
            try reader.draw(frame, control: control, onto: &pixels, canvas: canvas)
            let hasAlpha = control.transparentIndex >= 0 || !frame.covers(canvas)
            let bitmap = Bitmap(width: canvas.width, height: canvas.height, format: .rgba8, pixels: pixels)
            return CodecOutput(bitmap: hasAlpha ? bitmap : bitmap.converted(to: .rgb8))
        }
    }

    static func decodeFrames(
        _ data: UnsafeRawBufferPointer, header: ImageHeader, options: DecodeOptions
    ) throws(ImagingError) -> [AnimationFrame] {
        try withGIF(data) { reader throws(ImagingError) in
            var control = GraphicControl()
            var canvas: Canvas?
            var firstHasAlpha = false
            var anyTransparent = false
            var pixels: [UInt8] = []
            var saved: [UInt8]?  // the canvas before a restore-to-previous frame
            var previous: (disposal: Int32, rect: Canvas.Rect)?
            var frames: [(pixels: [UInt8], duration: Double)] = []
            while let frame = try reader.nextFrame(control: &control, allowingDescriptorFailure: false, allowingEnd: !frames.isEmpty) {
                let size = canvas ?? reader.canvas(containing: frame)
                // Refuse before this frame's pixels (its copy of the canvas) exist.
                try checkLimit(frames: frames.count + 1, canvas: size, options: options)
                try checkLimit(frames: frames.count + 1, frame: frame, options: options)
                if canvas == nil {
                    canvas = size
                    firstHasAlpha = control.transparentIndex >= 0 || !frame.covers(size)
                    pixels = [UInt8](repeating: 0, count: size.width * size.height * 4)
                }
                switch previous?.disposal {
                case DISPOSE_BACKGROUND:
                    if let rect = previous?.rect { clear(rect, in: &pixels, canvas: size) }
                case DISPOSE_PREVIOUS:
                    if let saved { pixels = saved }
                default:
                    break
                }
                saved = control.disposal == DISPOSE_PREVIOUS ? pixels : nil
                try reader.draw(frame, control: control, onto: &pixels, canvas: size)
                if !anyTransparent { anyTransparent = hasTransparentPixel(pixels) }
                frames.append((pixels, control.duration))
                previous = (control.disposal, size.clip(frame))
                control = GraphicControl()
            }
            guard let canvas else { throw .corrupted(reason: "GIF has no image") }
            let format: PixelFormat = firstHasAlpha || anyTransparent ? .rgba8 : .rgb8
            return frames.map { frame in
                let bitmap = Bitmap(width: canvas.width, height: canvas.height, format: .rgba8, pixels: frame.pixels)
                return AnimationFrame(bitmap: bitmap.converted(to: format), duration: frame.duration)
            }
        }
    }

    // MARK: - Internals

    private static func checkLimit(frames: Int, canvas: Canvas, options: DecodeOptions) throws(ImagingError) {
        let (area, o1) = canvas.width.multipliedReportingOverflow(by: canvas.height)
        let (total, o2) = area.multipliedReportingOverflow(by: frames)
        if o1 || o2 || total > options.maximumPixelCount {
            throw .tooLarge(width: canvas.width, height: canvas.height)
        }
    }

    /// Every row of a frame is decompressed, even rows outside the canvas, so a frame's
    /// declared area costs CPU whatever the canvas: a 1×1 canvas with a 16384×16384 frame is
    /// refused here rather than spending seconds decoding rows that are thrown away.
    private static func checkLimit(frames: Int, frame: FrameRect, options: DecodeOptions) throws(ImagingError) {
        let (area, o1) = frame.width.multipliedReportingOverflow(by: frame.height)
        let (total, o2) = area.multipliedReportingOverflow(by: frames)
        if o1 || o2 || total > options.maximumPixelCount {
            throw .tooLarge(width: frame.width, height: frame.height)
        }
    }

    private static func clear(_ rect: Canvas.Rect, in pixels: inout [UInt8], canvas: Canvas) {
        guard !rect.isEmpty else { return }
        pixels.withUnsafeMutableBufferPointer { p in
            for y in rect.y0..<rect.y1 {
                let start = (y * canvas.width + rect.x0) * 4
                (p.baseAddress! + start).update(repeating: 0, count: (rect.x1 - rect.x0) * 4)
            }
        }
    }

    private static func hasTransparentPixel(_ pixels: [UInt8]) -> Bool {
        var i = 3
        while i < pixels.count {
            if pixels[i] != 255 { return true }
            i += 4
        }
        return false
    }

    /// Opens `data` with giflib, runs `body`, and always closes the handle.
    private static func withGIF<T>(
        _ data: UnsafeRawBufferPointer, _ body: (Reader) throws(ImagingError) -> T
    ) throws(ImagingError) -> T {
        guard let base = data.baseAddress, data.count > 0 else { throw .truncated }
        let source = UnsafeMutablePointer<Source>.allocate(capacity: 1)
        source.initialize(to: Source(base: base.assumingMemoryBound(to: UInt8.self), count: data.count))
        defer { source.deallocate() }
        var error: Int32 = 0
        let handle = DGifOpen(source, { gif, buffer, length in
            // giflib's read callback: copy up to `length` bytes from the Source in UserData.
            guard let gif, let buffer, length > 0,
                  let source = gif.pointee.UserData?.assumingMemoryBound(to: Source.self)
            else { return 0 }
            let available = source.pointee.count - source.pointee.offset
            let n = min(Int(length), available)
            if n < Int(length) { source.pointee.hitEnd = true }
            if n > 0 {
                buffer.update(from: source.pointee.base + source.pointee.offset, count: n)
                source.pointee.offset += n
            }
            return Int32(n)
        }, &error)
        guard let handle else { throw Reader.failure(error, source: source.pointee) }
        defer {
            var closeError: Int32 = 0
            DGifCloseFile(handle, &closeError)
        }
        return try body(Reader(gif: handle, source: source))
    }
}

/// The caller's bytes and how far giflib has read them.
private struct Source {
    var base: UnsafePointer<UInt8>
    var count: Int
    var offset = 0
    /// Whether a read asked for more bytes than were left.
    var hitEnd = false
}

/// What the graphic control extension before a frame says.
private struct GraphicControl {
    var disposal: Int32 = DISPOSAL_UNSPECIFIED
    var delay: Int32 = 0
    var transparentIndex: Int = -1

    /// Seconds; 0 or 1 hundredths mean 0.1 s, as browsers play them.
    var duration: Double { delay <= 1 ? 0.1 : Double(delay) / 100 }
}

/// A frame's rectangle as declared (may reach outside the canvas).
private struct FrameRect {
    var left: Int, top: Int, width: Int, height: Int
    var interlaced: Bool

    func covers(_ canvas: Canvas) -> Bool {
        left <= 0 && top <= 0 && left + width >= canvas.width && top + height >= canvas.height
    }
}

/// The composited image's size.
private struct Canvas: Equatable {
    var width: Int, height: Int

    /// A half-open rectangle inside the canvas.
    struct Rect {
        var x0: Int, y0: Int, x1: Int, y1: Int
        var isEmpty: Bool { x0 >= x1 || y0 >= y1 }
    }

    func clip(_ frame: FrameRect) -> Rect {
        Rect(
            x0: min(max(frame.left, 0), width), y0: min(max(frame.top, 0), height),
            x1: min(max(frame.left + frame.width, 0), width), y1: min(max(frame.top + frame.height, 0), height))
    }
}

/// One open giflib handle, read record by record.
private struct Reader {
    let gif: UnsafeMutablePointer<GifFileType>
    let source: UnsafeMutablePointer<Source>

    static func failure(_ code: Int32, source: Source) -> ImagingError {
        if code == D_GIF_ERR_EOF_TOO_SOON || source.hitEnd { return .truncated }
        let message = GifErrorString(code).map { String(cString: $0) } ?? "error \(code)"
        return .corrupted(reason: "giflib: \(message)")
    }

    private func check(_ status: Int32) throws(ImagingError) {
        if status == GIF_ERROR { throw Self.failure(gif.pointee.Error, source: source.pointee) }
    }

    /// The logical screen enlarged to contain `frame` (browser behaviour for the first frame).
    func canvas(containing frame: FrameRect) -> Canvas {
        Canvas(
            width: max(Int(gif.pointee.SWidth), frame.left + frame.width),
            height: max(Int(gif.pointee.SHeight), frame.top + frame.height))
    }

    /// Reads records up to the next image descriptor, collecting its graphic control
    /// extension into `control`. Returns `nil` at the trailer, or when the data ends cleanly
    /// between records and `allowingEnd` is set. With `allowingDescriptorFailure`, a
    /// descriptor whose rectangle was read in full is returned even if what follows it (colour
    /// map, LZW setup) is broken: enough for a header, and the decode reports the damage.
    func nextFrame(
        control: inout GraphicControl, allowingDescriptorFailure: Bool, allowingEnd: Bool = false
    ) throws(ImagingError) -> FrameRect? {
        while true {
            let recordStart = source.pointee.offset
            var type = UNDEFINED_RECORD_TYPE
            if DGifGetRecordType(gif, &type) == GIF_ERROR {
                if allowingEnd && recordStart == source.pointee.count { return nil }
                try check(GIF_ERROR)
            }
            switch type {
            case IMAGE_DESC_RECORD_TYPE:
                let descriptorStart = source.pointee.offset
                let status = DGifGetImageHeader(gif)
                let image = gif.pointee.Image
                if status == GIF_ERROR {
                    // Left, top, width, height are the descriptor's first 8 bytes.
                    guard allowingDescriptorFailure, source.pointee.offset >= descriptorStart + 8 else {
                        try check(status)
                        return nil
                    }
                }
                return FrameRect(
                    left: Int(image.Left), top: Int(image.Top), width: Int(image.Width), height: Int(image.Height),
                    interlaced: image.Interlace)
            case EXTENSION_RECORD_TYPE:
                var code: Int32 = 0
                var block: UnsafeMutablePointer<GifByteType>?
                try check(DGifGetExtension(gif, &code, &block))
                if code == GRAPHICS_EXT_FUNC_CODE, let block {
                    var gcb = GraphicsControlBlock()
                    // A malformed control block is ignored, as browsers do.
                    if DGifExtensionToGCB(Int(block[0]), block + 1, &gcb) == GIF_OK {
                        control.disposal = Int32(gcb.DisposalMode)
                        control.delay = Int32(gcb.DelayTime)
                        control.transparentIndex = Int(gcb.TransparentColor)
                    }
                }
                while block != nil {
                    try check(DGifGetExtensionNext(gif, &block))
                }
            case TERMINATE_RECORD_TYPE:
                return nil
            default:
                throw .corrupted(reason: "GIF: unknown record")
            }
        }
    }

    /// Decodes the current frame's pixels and draws them onto `pixels` (RGBA, `canvas` size).
    /// A frame entirely outside the canvas is skipped without decompressing.
    func draw(_ frame: FrameRect, control: GraphicControl, onto pixels: inout [UInt8], canvas: Canvas) throws(ImagingError) {
        let rect = canvas.clip(frame)
        if rect.isEmpty || frame.width == 0 || frame.height == 0 {
            try skipImageData()
            return
        }
        guard let map = gif.pointee.Image.ColorMap ?? gif.pointee.SColorMap else {
            throw .corrupted(reason: "GIF frame has no colour map")
        }
        let colorCount = Int(map.pointee.ColorCount)
        guard (1...256).contains(colorCount), let colors = map.pointee.Colors else {
            throw .corrupted(reason: "GIF colour map has \(colorCount) entries")
        }
        // Palette as RGBA, 256 entries: indices past the map and the transparent index are
        // marked with alpha 0 and left undrawn.
        var palette = [UInt8](repeating: 0, count: 256 * 4)
        for i in 0..<colorCount where i != control.transparentIndex {
            palette[i * 4] = colors[i].Red
            palette[i * 4 + 1] = colors[i].Green
            palette[i * 4 + 2] = colors[i].Blue
            palette[i * 4 + 3] = 255
        }
        let rows = frame.interlaced ? Self.interlacedRows(frame.height) : Array(0..<frame.height)
        var line = [GifPixelType](repeating: 0, count: frame.width)
        let width = Int32(frame.width)
        for row in rows {
            try line.withUnsafeMutableBufferPointer { buffer throws(ImagingError) in
                try check(DGifGetLine(gif, buffer.baseAddress, width))
            }
            let y = frame.top + row
            guard y >= rect.y0 && y < rect.y1 else { continue }
            pixels.withUnsafeMutableBufferPointer { out in
                palette.withUnsafeBufferPointer { pal in
                    var o = (y * canvas.width + rect.x0) * 4
                    for x in rect.x0..<rect.x1 {
                        let p = Int(line[x - frame.left]) * 4
                        if pal[p + 3] != 0 {
                            out[o] = pal[p]; out[o + 1] = pal[p + 1]; out[o + 2] = pal[p + 2]; out[o + 3] = 255
                        }
                        o += 4
                    }
                }
            }
        }
    }

    /// Reads past the current frame's compressed data without decoding it.
    private func skipImageData() throws(ImagingError) {
        var codeSize: Int32 = 0
        var block: UnsafeMutablePointer<GifByteType>?
        try check(DGifGetCode(gif, &codeSize, &block))
        while block != nil {
            try check(DGifGetCodeNext(gif, &block))
        }
    }

    /// Stored line i → frame row, for GIF's four-pass interlace.
    static func interlacedRows(_ height: Int) -> [Int] {
        var rows: [Int] = []
        rows.reserveCapacity(height)
        for (start, step) in [(0, 8), (4, 8), (2, 4), (1, 2)] {
            rows.append(contentsOf: stride(from: start, to: height, by: step))
        }
        return rows
    }
}
