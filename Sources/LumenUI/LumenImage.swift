#if canImport(SwiftUI)
import SwiftUI
import CoreGraphics
import Lumen

/// A SwiftUI view that loads and shows an image through an ``ImagePipeline``, with
/// `AsyncImage`'s initializers: moving from `AsyncImage` is a rename.
///
/// Unlike `AsyncImage`, it downloads through the pipeline (shared with prefetches and other
/// views of the same image, cached), decodes at the size it is laid out at (bucketed, see
/// ``DisplaySize``), and cancels its work when it disappears. It is a thin wrapper: everything
/// it does is ``FetchImage``, which is tested on its own.
///
/// For downsampling to help, lay the image out at the size you want (a `resizable()` image in a
/// frame, or a placeholder that fills the frame): the view's laid-out size is the display size.
/// Say how the content shows the image: `contentMode: .fill` for `scaledToFill()` content, so
/// that both sides of the frame are covered (the default, `.fit`, covers the longest side).
///
/// ```swift
/// LumenImage(url: photo.url, contentMode: .fill) { image in
///     image.resizable().scaledToFill()
/// } placeholder: {
///     Color.gray.opacity(0.2)
/// }
/// .frame(width: 120, height: 120)
/// .clipped()
/// ```
@available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, visionOS 1.0, *)
@MainActor
public struct LumenImage<Content: View>: View {
    @State private var model: FetchImage
    @Environment(\.displayScale) private var displayScale
    private let request: ImageRequest?
    private let scale: CGFloat
    private let contentMode: SwiftUI.ContentMode
    private let transaction: Transaction
    private let content: (AsyncImagePhase) -> Content

    /// Loads `request` through `pipeline` and shows each phase with `content` (the designated
    /// initializer; the others mirror `AsyncImage`'s). `contentMode` says how `content` shows
    /// the image in the laid-out size (`.fill` for `scaledToFill()`); it sets the decode size.
    public init(
        request: ImageRequest?,
        pipeline: ImagePipeline = .shared,
        scale: CGFloat = 1,
        contentMode: SwiftUI.ContentMode = .fit,
        transaction: Transaction = Transaction(),
        @ViewBuilder content: @escaping (AsyncImagePhase) -> Content
    ) {
        _model = State(initialValue: FetchImage(pipeline: pipeline))
        self.request = request
        self.scale = scale
        self.contentMode = contentMode
        self.transaction = transaction
        self.content = content
    }

    /// Loads the image at `url` and shows each phase with `content`; `transaction` animates
    /// phase changes (`AsyncImage(url:scale:transaction:content:)`).
    public init(
        url: URL?,
        scale: CGFloat = 1,
        contentMode: SwiftUI.ContentMode = .fit,
        transaction: Transaction = Transaction(),
        @ViewBuilder content: @escaping (AsyncImagePhase) -> Content
    ) {
        self.init(
            request: url.map { ImageRequest(url: $0) }, scale: scale, contentMode: contentMode,
            transaction: transaction, content: content)
    }

    /// Loads the image at `url` and shows it with `content`, or `placeholder` until it is
    /// loaded and after a failure (`AsyncImage(url:scale:content:placeholder:)`).
    public init<I: View, P: View>(
        url: URL?,
        scale: CGFloat = 1,
        contentMode: SwiftUI.ContentMode = .fit,
        @ViewBuilder content: @escaping (Image) -> I,
        @ViewBuilder placeholder: @escaping () -> P
    ) where Content == _ConditionalContent<I, P> {
        self.init(url: url, scale: scale, contentMode: contentMode) { phase in
            if let image = phase.image {
                content(image)
            } else {
                placeholder()
            }
        }
    }

    /// The current phase drawn by `content`. The load starts when the view appears (and again
    /// when the request changes), decodes at the laid-out size, and is cancelled when the view
    /// disappears.
    public var body: some View {
        content(asyncImagePhase)
            .onGeometryChange(for: CGSize.self) { proxy in
                proxy.size
            } action: { size in
                model.displaySize(
                    width: Double(size.width), height: Double(size.height), scale: Double(displayScale),
                    contentMode: contentMode == .fill ? .aspectFill : .aspectFit)
            }
            .onAppear {
                loadIfChanged()
                model.onAppear()
            }
            .onDisappear {
                model.onDisappear()
            }
            .onChange(of: requestIdentity) {
                loadIfChanged()
            }
            .animation(transaction.animation, value: phaseKind)
    }

    // MARK: - Internals

    /// What identifies the request for change detection: the image it shows, credentials
    /// included (see `ImageRequest.ShownImageIdentity`).
    private var requestIdentity: ImageRequest.ShownImageIdentity? { request?.shownImageIdentity }

    private func loadIfChanged() {
        model.loadIfChanged(request)
    }

    private var asyncImagePhase: AsyncImagePhase {
        switch model.phase {
        case .empty:
            return .empty
        case .success(let image):
            guard let cgImage = image.makeCGImage() else { return .empty }
            return .success(Image(decorative: cgImage, scale: scale))
        case .failure(let error):
            return .failure(error)
        }
    }

    /// 0 empty, 1 success, 2 failure: what the transaction animates between.
    private var phaseKind: Int {
        switch model.phase {
        case .empty: 0
        case .success: 1
        case .failure: 2
        }
    }
}

@available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, visionOS 1.0, *)
extension LumenImage where Content == LumenImageDefaultContent {
    /// Loads the image at `url` and shows it, or a gray placeholder until it is loaded and after
    /// a failure (`AsyncImage(url:scale:)`).
    public init(url: URL?, scale: CGFloat = 1) {
        self.init(url: url, scale: scale) { phase in
            LumenImageDefaultContent(phase: phase)
        }
    }
}

/// What ``LumenImage/init(url:scale:)`` shows: the image, or a gray placeholder.
@available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, visionOS 1.0, *)
public struct LumenImageDefaultContent: View {
    let phase: AsyncImagePhase

    /// The loaded image, else a gray placeholder (`Color.gray` at 20% opacity).
    public var body: some View {
        if let image = phase.image {
            image
        } else {
            Color.gray.opacity(0.2)
        }
    }
}

extension Bitmap {
    /// The pixels as a `CGImage` (sRGB, 8 bits per channel; straight alpha when present).
    /// Copies the pixel bytes once. `nil` only if CoreGraphics refuses the layout.
    func makeCGImage() -> CGImage? {
        guard let space = CGColorSpace(name: CGColorSpace.sRGB),
              let provider = CGDataProvider(data: Data(pixels) as CFData)
        else { return nil }
        let alpha: CGImageAlphaInfo = format.hasAlpha ? .last : .none
        return CGImage(
            width: width,
            height: height,
            bitsPerComponent: 8,
            bitsPerPixel: 8 * format.channels,
            bytesPerRow: bytesPerRow,
            space: space,
            bitmapInfo: CGBitmapInfo(rawValue: alpha.rawValue),
            provider: provider,
            decode: nil,
            shouldInterpolate: true,
            intent: .defaultIntent
        )
    }
}
#endif
