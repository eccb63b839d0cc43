import Foundation

extension ImageProcessors {
    /// An sRGB colour with straight alpha, 8 bits per channel.
    public struct Color: Sendable, Hashable {
        /// The red component, 0–255.
        public var red: UInt8
        /// The green component, 0–255.
        public var green: UInt8
        /// The blue component, 0–255.
        public var blue: UInt8
        /// The opacity, from 0 (transparent) to 255 (opaque); not premultiplied into the
        /// components.
        public var alpha: UInt8

        /// Creates a colour from 8-bit components; opaque unless `alpha` says otherwise.
        public init(red: UInt8, green: UInt8, blue: UInt8, alpha: UInt8 = 255) {
            self.red = red
            self.green = green
            self.blue = blue
            self.alpha = alpha
        }

        /// Opaque white.
        public static let white = Color(red: 255, green: 255, blue: 255)
        /// Opaque black.
        public static let black = Color(red: 0, green: 0, blue: 0)

        /// `rrggbbaa` in lowercase hex: the colour's part of processor identifiers.
        public var hex: String {
            [red, green, blue, alpha].map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        }
    }

    /// A border drawn inside a shape's edge.
    public struct Border: Sendable, Hashable {
        /// The border's colour, blended over the image by its alpha.
        public var color: Color
        /// Width in pixels.
        public var width: Double

        /// Creates a border `width` pixels wide in `color`.
        /// - Precondition: `width` is finite and not negative.
        public init(color: Color, width: Double) {
            precondition(width >= 0 && width.isFinite, "Border: width must be finite and not negative, got \(width)")
            self.color = color
            self.width = width
        }

        var identifier: String { "\(width),\(color.hex)" }
    }

    /// Crops the centre square and masks it with an anti-aliased circle, with an optional
    /// border inside the edge. The result is ``PixelFormat/rgba8``, transparent outside.
    public struct Circle: ImageProcessing, Hashable {
        /// The border drawn inside the circle's edge; `nil` for none.
        public var border: Border?

        /// Creates a circle mask, with `border` drawn inside its edge when given.
        public init(border: Border? = nil) {
            self.border = border
        }

        /// The centre square of `image` (as wide as its shorter side) masked to a circle;
        /// never throws.
        public func process(_ image: Bitmap) throws -> Bitmap {
            let side = min(image.width, image.height)
            let square = image.cropped(
                x: (image.width - side) / 2, y: (image.height - side) / 2, width: side, height: side)
            return ShapeMask.apply(to: square, radius: Double(side) / 2, border: border)
        }

        /// `lumen.circle?border=none`, or `border=<width>,<rrggbbaa>` with a border.
        public var identifier: String { "lumen.circle?border=\(border?.identifier ?? "none")" }
    }

    /// Rounds the corners with an anti-aliased arc of `radius` pixels (at most half the
    /// shorter side), with an optional border inside the edge. The result is
    /// ``PixelFormat/rgba8``, transparent outside the rounded rectangle.
    public struct RoundedCorners: ImageProcessing, Hashable {
        /// The corner radius in pixels; at most half the shorter side is used.
        public var radius: Double
        /// The border drawn inside the shape's edge; `nil` for none.
        public var border: Border?

        /// Creates a mask with corners of `radius` pixels, with `border` drawn inside its edge
        /// when given.
        /// - Precondition: `radius` is finite and not negative.
        public init(radius: Double, border: Border? = nil) {
            precondition(radius >= 0 && radius.isFinite, "RoundedCorners: radius must be finite and not negative, got \(radius)")
            self.radius = radius
            self.border = border
        }

        /// `image` at its own size with its corners rounded; never throws.
        public func process(_ image: Bitmap) throws -> Bitmap {
            ShapeMask.apply(to: image, radius: radius, border: border)
        }

        /// `lumen.roundedCorners?radius=<radius>&border=…`, the border as in
        /// ``ImageProcessors/Circle/identifier``.
        public var identifier: String { "lumen.roundedCorners?radius=\(radius)&border=\(border?.identifier ?? "none")" }
    }
}

/// Masks an image with an anti-aliased rounded rectangle (a circle when the radius is half the
/// side of a square), drawing an optional border inside its edge.
///
/// Coverage comes from the shape's signed distance at each pixel centre: a pixel whose centre
/// is at distance `d` outside the edge (negative inside) is covered `clamp(0.5 − d, 0, 1)`,
/// the area a straight edge would cover. Only the pixels near the edge are shaded; each row's
/// interior span is copied.
enum ShapeMask {
    static func apply(to image: Bitmap, radius: Double, border: ImageProcessors.Border?) -> Bitmap {
        let w = image.width, h = image.height
        let halfW = Double(w) / 2, halfH = Double(h) / 2
        let r = min(radius, halfW, halfH)
        let innerW = halfW - r, innerH = halfH - r
        let borderWidth = border?.width ?? 0
        // Pixels deeper inside than this are untouched (full coverage, no border).
        let interior = -(borderWidth + 0.5)
        let bc = border?.color ?? .black
        let borderAlpha = Float(bc.alpha) / 255
        let borderPremultiplied = SIMD4<Float>(
            Float(bc.red) * borderAlpha, Float(bc.green) * borderAlpha, Float(bc.blue) * borderAlpha, Float(bc.alpha))
        let c = image.format.channels

        @inline(__always) func distance(_ x: Int, _ y: Int) -> Double {
            let qx = abs(Double(x) + 0.5 - halfW) - innerW
            let qy = abs(Double(y) + 0.5 - halfH) - innerH
            let outside = (max(qx, 0) * max(qx, 0) + max(qy, 0) * max(qy, 0)).squareRoot()
            return outside + min(max(qx, qy), 0) - r
        }

        return image.pixels.withUnsafeBufferPointer { srcBuffer in
            Bitmap(width: w, height: h, format: .rgba8) { dstBuffer in
                let src = srcBuffer.baseAddress!, dst = dstBuffer.baseAddress!

                @inline(__always) func copy(_ x: Int, _ y: Int) {
                    let s = src + (y * w + x) * c, d = dst + (y * w + x) * 4
                    d[0] = s[0]; d[1] = s[1]; d[2] = s[2]; d[3] = c == 4 ? s[3] : 255
                }

                @inline(__always) func shade(_ x: Int, _ y: Int, _ sd: Double) {
                    let coverage = Float(min(max(0.5 - sd, 0), 1))
                    let d = dst + (y * w + x) * 4
                    if coverage == 0 {
                        d[0] = 0; d[1] = 0; d[2] = 0; d[3] = 0
                        return
                    }
                    let s = src + (y * w + x) * c
                    let a = c == 4 ? Float(s[3]) : 255
                    let f = a / 255
                    var p = SIMD4<Float>(Float(s[0]) * f, Float(s[1]) * f, Float(s[2]) * f, a)
                    if borderWidth > 0 {
                        // Border over image, the border's presence ramping over one pixel.
                        let beta = Float(min(max(sd + borderWidth + 0.5, 0), 1))
                        p = borderPremultiplied * beta + p * (1 - borderAlpha * beta)
                    }
                    p *= coverage
                    let alpha = p.w
                    if alpha < 0.5 {
                        d[0] = 0; d[1] = 0; d[2] = 0; d[3] = 0
                        return
                    }
                    let u = 255 / alpha
                    d[0] = Resampler.byte(p.x * u); d[1] = Resampler.byte(p.y * u); d[2] = Resampler.byte(p.z * u)
                    d[3] = Resampler.byte(alpha)
                }

                for y in 0..<h {
                    // The shape is convex, so each row's interior is one span: shade inwards
                    // from both ends until it starts, copy the rest.
                    var left = 0
                    while left < w {
                        let sd = distance(left, y)
                        if sd <= interior { break }
                        shade(left, y, sd)
                        left += 1
                    }
                    var right = w - 1
                    while right >= left {
                        let sd = distance(right, y)
                        if sd <= interior { break }
                        shade(right, y, sd)
                        right -= 1
                    }
                    if left <= right {
                        if c == 4 {
                            (dst + (y * w + left) * 4).initialize(from: src + (y * w + left) * 4, count: (right - left + 1) * 4)
                        } else {
                            for x in left...right { copy(x, y) }
                        }
                    }
                }
            }
        }
    }
}

extension ImageProcessing where Self == ImageProcessors.Circle {
    /// ``ImageProcessors/Circle``.
    public static func circle(border: ImageProcessors.Border? = nil) -> Self {
        ImageProcessors.Circle(border: border)
    }
}

extension ImageProcessing where Self == ImageProcessors.RoundedCorners {
    /// ``ImageProcessors/RoundedCorners``.
    public static func roundedCorners(radius: Double, border: ImageProcessors.Border? = nil) -> Self {
        ImageProcessors.RoundedCorners(radius: radius, border: border)
    }
}
