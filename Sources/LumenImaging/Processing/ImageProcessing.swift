/// A step that turns one decoded image into another (resize, crop, blur, …).
///
/// Two identities make processors cacheable: ``identifier`` is a stable string that goes into
/// disk-cache keys (it must be the same across launches and machines), ``hashableIdentifier``
/// is a cheap hashable value for memory keys and for matching shared work.
public protocol ImageProcessing: Sendable {
    /// Returns the processed image. Called off the pipeline's owner, on a processing worker.
    func process(_ image: Bitmap) throws -> Bitmap
    /// A stable string identity, e.g. `"lumen.resize?width=160&height=160&contentMode=aspectFit&crop=0&upscale=0"`.
    var identifier: String { get }
    /// A cheap hashable identity; equal values mean equal output for equal input.
    var hashableIdentifier: AnyHashable { get }
}

extension ImageProcessing where Self: Hashable {
    /// The processor itself: a `Hashable` processor is its own hashable identity.
    public var hashableIdentifier: AnyHashable { self }
}
