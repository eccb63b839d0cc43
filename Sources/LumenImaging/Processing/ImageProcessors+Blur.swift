extension ImageProcessors {
    /// Blurs with a separable Gaussian whose standard deviation is `radius` pixels (the kernel
    /// spans ±3 σ).
    ///
    /// ``PixelFormat/rgba8`` is blurred premultiplied, so transparent pixels do not darken
    /// their neighbours; pixels beyond the border repeat the edge pixel, so a flat image stays
    /// flat. A radius of 0 returns the image unchanged.
    /// The radius used on each axis is at most a third of that side's length: past it the
    /// image is blurred to nearly flat anyway, and a hostile radius cannot buy unbounded work.
    /// - Complexity: O(pixels × min(radius, side)).
    public struct GaussianBlur: ImageProcessing, Hashable {
        /// The Gaussian's standard deviation σ, in pixels.
        public var radius: Double

        /// Creates a blur whose standard deviation is `radius` pixels (8 by default).
        /// - Precondition: `radius` is finite and not negative.
        public init(radius: Double = 8) {
            precondition(radius >= 0 && radius.isFinite, "GaussianBlur: radius must be finite and not negative, got \(radius)")
            self.radius = radius
        }

        /// `image` blurred, at the same size and in the same format; never throws.
        public func process(_ image: Bitmap) throws -> Bitmap {
            guard radius > 0 else { return image }
            return Resampler.convolve(
                image,
                horizontal: FilterWeights(gaussian: min(radius, Self.cap(image.width)), count: image.width),
                vertical: FilterWeights(gaussian: min(radius, Self.cap(image.height)), count: image.height))
        }

        private static func cap(_ side: Int) -> Double {
            max(1, Double(side) / 3)
        }

        /// `lumen.gaussianBlur?radius=<radius>`.
        public var identifier: String { "lumen.gaussianBlur?radius=\(radius)" }
    }
}

extension ImageProcessing where Self == ImageProcessors.GaussianBlur {
    /// ``ImageProcessors/GaussianBlur``.
    public static func gaussianBlur(radius: Double = 8) -> Self {
        ImageProcessors.GaussianBlur(radius: radius)
    }
}
