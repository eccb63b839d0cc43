/// Embedded ICC profiles, converted to sRGB with lcms2. (Being written: passes pixels through.)
enum ColorProfile {
    /// `image` converted from the colour space described by the ICC `profile` to sRGB.
    /// Returns `image` unchanged when the profile is unreadable or already sRGB.
    static func convertToSRGB(_ image: Bitmap, profile: UnsafeRawBufferPointer) -> Bitmap {
        image
    }
}
