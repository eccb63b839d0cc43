import Foundation
import Lumen

/// Where an image being loaded for display is: the counterpart of SwiftUI's `AsyncImagePhase`.
public enum ImagePhase: Sendable {
    /// Nothing to show yet (not started, loading, or waiting for the display size).
    case empty
    /// The image, decoded for the current display size (``FetchImage/response`` has the rest
    /// of the response: cache type, URL response).
    case success(Bitmap)
    /// Loading failed. Cancellation is never a failure: a cancelled load leaves the phase as
    /// it was.
    case failure(ImagePipeline.Error)

    /// The image, in ``success(_:)``.
    public var image: Bitmap? {
        if case .success(let image) = self { return image }
        return nil
    }

    /// The error, in ``failure(_:)``.
    public var error: ImagePipeline.Error? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
