import Foundation
import Lumen
import Observation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Loads one image for a piece of UI — a cell, a thumbnail, a detail view — and publishes its
/// ``phase`` for SwiftUI (through Observation) or any other UI code.
///
/// **Loading model.** Fetching and decoding are separate so that the download never waits
/// for layout and layout never causes a second download:
/// 1. ``load(_:)`` starts fetching the original bytes at once (``ImagePipeline/dataTask(with:)``:
///    the pipeline's shared fetch stage, so it joins a running prefetch or another cell's
///    download of the same image).
/// 2. ``displaySize(width:height:scale:contentMode:)`` tells the model how big the image is
///    shown, and whether it fits the size or fills it. The decode size covers the displayed
///    side — the longest for a fit, both for a fill — in pixels rounded up to 64-pixel buckets
///    (see ``DisplaySize/decodeSize``), and is never above the image's natural size once that
///    is known.
/// 3. Once both the bytes and the size are in hand, the image is decoded — once — through the
///    pipeline's decode stage (shared with other models showing the same image at the same
///    bucket, and stored in the memory cache). A decode of the image at that size already
///    running for someone else (a prefetch at the cell's size, a plain request) is joined
///    instead: one decode for both.
///
/// **Joining a decode instead of downloading.** When the model has no bytes and nothing
/// fetching them, and the pipeline is decoding the image already for someone else — a
/// prefetch, say, whose decode is queued behind others — the model joins that decode rather
/// than downloading the bytes again, and raises it to its own priority: at its size, whose
/// image is then the model's; else, when that decode's bytes are in, at full size (the URL
/// prefetched without a size), from whose image its size is then resampled (with the default
/// decoder). A full-size decode still waiting for its download is not joined: the model's
/// fetch joins that download instead.
///
/// When it fetched the bytes, the model keeps them while it lives, so a size change after
/// success re-decodes without downloading again; a size change after success never cancels a
/// download.
/// Before anything is shown, a size that the memory cache already holds the image at, or
/// that someone is decoding the image at, is shown from there, and the model's download is
/// dropped, whichever of ``load(_:)`` and the first display size came first. The old image
/// stays in ``phase`` until the new one is ready.
///
/// **Without the bytes.** When the memory cache already holds the image, the model shows it
/// and fetches nothing: an entry at the display size's bucket is shown at once; with the
/// default decoder, the full-size image (a prefetch of the URL leaves it there) is resampled
/// to the bucket by the pipeline (``ImagePipeline/Metrics/resampledFromMemory``), so a
/// prefetched image is downloaded once. A later size change that the image shown covers (a
/// smaller bucket, or anything at or above the image's natural size) is made from it the same
/// way; only a larger size than any decode in memory needs the bytes again — from the disk
/// cache when the pipeline has one, else downloaded.
///
/// A request with its own ``ImageRequest/thumbnail``, or a model with
/// ``decodesAtDisplaySize`` off, decodes as soon as the bytes arrive without waiting for a
/// display size. With processors, the decode size is not capped by the natural size (the
/// processors decide the final size).
///
/// **Visibility.** ``onDisappear()`` cancels the model's own fetch and decode subscriptions
/// (shared work goes on while others need it; a download nobody else needs stops);
/// ``onAppear()`` resumes what is missing. The phase and the bytes already fetched are kept.
///
/// Main-actor isolated; the pipeline's work runs elsewhere.
@MainActor @Observable
public final class FetchImage {
    /// Where loading is.
    public private(set) var phase: ImagePhase = .empty
    /// The response whose image ``phase`` shows: the request at the size decoded, the cache
    /// type, the URL response. `nil` unless the phase is `.success`.
    public private(set) var response: ImageResponse?
    /// The frames of the animation ``phase`` shows, when its request asked for every frame
    /// (``ImageRequest/Options/decodeAllFrames``) and the image has more than one; `nil`
    /// otherwise (a still image: the phase's image is all there is).
    public var frames: [AnimationFrame]? { response?.container.frames }
    /// Whether a fetch or a decode is running for the model.
    public private(set) var isLoading = false
    /// The request being shown, `nil` when none.
    public private(set) var request: ImageRequest?
    /// The latest display size, `nil` until one is given.
    public private(set) var currentDisplaySize: DisplaySize?
    /// The longest side of the image's natural size, once a decode revealed it.
    public internal(set) var naturalMaxPixelSize: Int?
    /// The image's natural size (width and height), once a decode revealed the whole image.
    @ObservationIgnored var naturalPixelSize: (width: Int, height: Int)?

    /// The pipeline that loads the images.
    @ObservationIgnored public let pipeline: ImagePipeline

    /// Whether decoding waits for a display size (see ``displaySize(width:height:scale:contentMode:)``).
    /// When `false`, the request's own ``ImageRequest/thumbnail`` (or the full size) is
    /// decoded as soon as the bytes arrive. Default `true`.
    @ObservationIgnored public var decodesAtDisplaySize = true

    /// The priority of the model's requests. A change reaches the running fetch and decode at
    /// once (shared work runs at the highest priority among its subscribers). Default
    /// `.normal`.
    @ObservationIgnored public var priority: ImageRequest.Priority = .normal {
        didSet {
            fetchTask?.data.priority = priority
            decoding?.task.priority = priority
            fullSizeWait?.priority = priority
        }
    }

    /// The URL being shown. Setting a different URL loads it (``load(_:)``); setting the same
    /// one does nothing.
    @ObservationIgnored public var url: URL? {
        get { request?.url }
        set {
            guard newValue != request?.url || (newValue == nil && request != nil) else { return }
            load(newValue.map { ImageRequest(url: $0) })
        }
    }

    /// What the model decodes at: the request's own size (`size` as given) or a display size.
    struct DecodeTarget: Equatable {
        var size: DecodeSize?
    }

    @ObservationIgnored private var isHidden = false
    @ObservationIgnored private var fetched: (data: Data, response: URLResponse?)?
    /// The running fetch: the pipeline's data task, and the Swift task awaiting it.
    @ObservationIgnored private var fetchTask: (data: DataTask, waiter: Task<Void, Never>)?
    @ObservationIgnored private var fetchGeneration = 0
    @ObservationIgnored private var decoding: (target: DecodeTarget, task: ImageTask)?
    /// A decode of the full-size image, running for someone else (a prefetch of the URL), that
    /// the model joined instead of downloading the bytes: once it ends, the model's size is
    /// made from the image it made (``fullSizeSource``).
    @ObservationIgnored private var fullSizeWait: ImageTask?
    /// The image that joined full-size decode made, kept until the model made its own size
    /// from it (it need not be in the memory cache: too large for it, or evicted).
    @ObservationIgnored private var fullSizeSource: ImageContainer?
    /// The target of the image in ``phase``.
    @ObservationIgnored private var shownTarget: DecodeTarget?

    /// Creates a model loading through `pipeline`. Default ``ImagePipeline/shared``.
    public init(pipeline: ImagePipeline = .shared) {
        self.pipeline = pipeline
    }

    deinit {
        fetchTask?.data.cancel()
        decoding?.task.cancel()
        fullSizeWait?.cancel()
    }

    // MARK: - Loading

    /// Shows `request`: cancels the previous request's work, resets ``phase`` to `.empty` and
    /// starts fetching at once (unless the model is hidden; then on ``onAppear()``). `nil`
    /// clears the model.
    public func load(_ request: ImageRequest?) {
        cancelWork()
        fetched = nil
        fullSizeSource = nil
        shownTarget = nil
        naturalMaxPixelSize = nil
        naturalPixelSize = nil
        show(.empty)
        self.request = request
        resume()
    }

    /// Loads `request` unless it shows the same image as the current request (same source,
    /// credentials, image ID, decode size and processors; see
    /// ``ImageRequest/ShownImageIdentity``): what a view calls whenever its request may have
    /// changed. A request that differs only in priority or options keeps what is shown.
    func loadIfChanged(_ request: ImageRequest?) {
        guard request.map(\.shownImageIdentity) != self.request.map(\.shownImageIdentity) else { return }
        load(request)
    }

    /// The view appeared: starts whatever is missing (fetch, decode).
    public func onAppear() {
        isHidden = false
        resume()
    }

    /// The view disappeared: cancels the model's fetch and decode. Shared work goes on while
    /// other requests need it. The phase and any bytes already fetched are kept.
    public func onDisappear() {
        isHidden = true
        cancelWork()
        fullSizeSource = nil // a full-size image is too much to hold for a hidden view
    }

    /// Sets the display size in points, the display scale (pixels per point) and how the view
    /// fills it (`.aspectFit` by default; `.aspectFill` for a view that is `scaledToFill`).
    /// Decodes (or re-decodes) once the bytes are in hand if the bucketed size differs from the
    /// image shown; an empty size is ignored. See ``DisplaySize`` for the bucket rule.
    public func displaySize(width: Double, height: Double, scale: Double = 1, contentMode: ContentMode = .aspectFit) {
        displaySize(DisplaySize(width: width, height: height, scale: scale, contentMode: contentMode))
    }

    /// Sets the display size (see ``displaySize(width:height:scale:contentMode:)``).
    public func displaySize(_ size: DisplaySize) {
        guard !size.isEmpty, size != currentDisplaySize else { return }
        currentDisplaySize = size
        // A failed download is retried by `onAppear()` or `load(_:)`, never by layout; what the
        // memory cache holds at the new size is still shown.
        if case .failure = phase, fetched == nil {
            if !isHidden, let target = currentTarget() { _ = showCachedImage(for: target) }
            return
        }
        resume() // decodes the bytes held, or fetches them if the shown image came from memory
    }

    /// Cancels everything and forgets the request, the bytes and the image.
    public func reset() {
        load(nil)
    }

    // MARK: - Internals

    private func resume() {
        guard !isHidden, request != nil else { return }
        if fetched == nil && fetchTask == nil {
            // Without bytes, a decode running for another size (made from memory) is stale
            // once the image shown fits or the bytes are on their way: it must not replace it.
            let target = currentTarget()
            if let target, shownTarget != target, showCachedImage(for: target) {
                cancelDecoding()
                cancelFullSizeWait()
                return // the bytes are fetched later, if a size change needs them
            }
            if shownTarget == nil || shownTarget != target {
                if fullSizeWait != nil || makeWithoutBytes() || joinRunningDecode(for: target) { return }
                // A stage stores its image in memory before it leaves its pool: one that
                // finished between the first look and the join is found by a second look.
                if let target, showCachedImage(for: target) { return }
                if makeWithoutBytes() { return }
                cancelDecoding()
                startFetch()
            } else {
                cancelDecoding()
                cancelFullSizeWait()
            }
        } else if fetched == nil, let target = currentTarget(), shownTarget != target {
            // The size came while the bytes are on their way. Before anything is shown (`load`
            // before layout), an image the memory cache has at that size is shown at once, as
            // when the size came first, and a decode of the image at that size running for
            // someone else is joined; the download is then dropped (the model's subscription
            // only; the bytes are fetched later, if a size change needs them). After a success,
            // a size change never cancels the download.
            let showedImage = shownTarget != nil
            if showCachedImage(for: target) {
                if showedImage { cancelDecoding() } else { cancelWork() }
                return
            }
            if !showedImage, decoding?.target != target, let sized = sizedRequest(target),
               let joined = pipeline.imageTaskJoiningRunningWork(for: sized) {
                cancelWork()
                follow(joined, target: target)
                return
            }
        }
        decodeIfNeeded()
    }

    /// Without the bytes, joins a decode of the image running for someone else (a prefetch, a
    /// visible request) rather than downloading them: at `target`'s size, whose image is then
    /// the model's; else at full size, when `target`'s can be made from that by resampling
    /// (or the size is not known yet). Answers whether it joined one.
    private func joinRunningDecode(for target: DecodeTarget?) -> Bool {
        guard var request else { return false }
        request.priority = priority
        if let target {
            if decoding?.target == target { return true }
            if let sized = sizedRequest(target), let joined = pipeline.imageTaskJoiningRunningWork(for: sized) {
                follow(joined, target: target)
                return true
            }
            guard target.size != nil else { return false }
        } else if !decodesAtDisplaySize {
            return false
        }
        guard pipeline.resamplesDerivationSources else { return false }
        request.thumbnail = nil
        request.processors = []
        guard let joined = pipeline.imageTaskJoiningRunningWork(for: request, requiringInput: true) else { return false }
        cancelDecoding()
        fullSizeWait = joined
        Task { [weak self] in
            let container = try? await joined.response.container
            self?.didWaitForFullSize(joined, container: container)
        }
        updateIsLoading()
        return true
    }

    /// The full-size decode the model joined ended: its size is made from that image, or — if
    /// the decode failed — from bytes the model fetches.
    private func didWaitForFullSize(_ task: ImageTask, container: ImageContainer?) {
        guard fullSizeWait === task else { return }
        fullSizeWait = nil
        if let container, pipeline.canResample(container) { fullSizeSource = container }
        updateIsLoading()
        resume()
    }

    private func cancelFullSizeWait() {
        guard let fullSizeWait else { return }
        self.fullSizeWait = nil
        fullSizeWait.cancel()
        updateIsLoading()
    }

    private func cancelDecoding() {
        guard let decoding else { return }
        self.decoding = nil
        decoding.task.cancel()
        updateIsLoading()
    }

    /// Makes the image for the current target without the original bytes when a larger decode
    /// of it is at hand — the full-size image in the memory cache or from a full-size decode
    /// the model joined, else the image shown (the size shrank; resampling it twice may round
    /// a side one pixel differently from a direct decode) — by an image task the pipeline
    /// answers by resampling it. With the size still unknown, waits for it when a full-size
    /// image is at hand. Answers whether no fetch is needed now.
    private func makeWithoutBytes() -> Bool {
        guard let request, fetched == nil else { return false }
        guard let target = currentTarget() else {
            return decodesAtDisplaySize && (fullSizeSource != nil || pipeline.resamplableFullSizeImage(for: request) != nil)
        }
        guard let size = target.size, var sized = sizedRequest(target) else { return false }
        if decoding?.target == target { return true }
        guard let source = pipeline.resamplableFullSizeImage(for: request) ?? fullSizeSource ?? shownImage(covering: size) else { return false }
        sized.derivationSource = source
        startDecoding(sized, target: target)
        return true
    }

    /// The image shown, when a decode at `size` can be made from it: an unprocessed image at
    /// least as large as a `.maxPixelSize` bucket, that the pipeline resamples. With a custom
    /// decoder it would not (the request would download and decode the image without the model
    /// keeping the bytes, so the next size change would download it again): then `nil`, and
    /// the model fetches the bytes itself.
    private func shownImage(covering size: DecodeSize) -> ImageContainer? {
        guard request?.processors.isEmpty == true, let response, case .maxPixelSize(let asked) = size,
              max(response.image.width, response.image.height) >= asked, pipeline.canResample(response.container)
        else { return nil }
        return response.container
    }

    /// Shows the memory cache's image for `target`, if it has one and the request may read it
    /// (not with `.disableMemoryCacheReads` or `.reloadIgnoringCachedData`).
    private func showCachedImage(for target: DecodeTarget) -> Bool {
        guard var sized = sizedRequest(target), sized.readsMemoryCache,
              let container = pipeline.cache[sized] else { return false }
        let target = learnNaturalSize(from: container.image, target: target, request: &sized)
        show(ImageResponse(container: container, request: sized, cacheType: .memory))
        shownTarget = target
        return true
    }

    private func startFetch() {
        guard var request else { return }
        request.priority = priority
        fetchGeneration += 1
        let generation = fetchGeneration
        let data = pipeline.dataTask(with: request)
        let waiter = Task { [weak self] in
            let result: Result<(Data, URLResponse?), ImagePipeline.Error>
            do {
                result = .success(try await data.response)
            } catch {
                result = .failure(error as? ImagePipeline.Error ?? ImagePipeline.Error.dataLoadingFailed(error))
            }
            self?.didFetch(result, generation: generation)
        }
        fetchTask = (data, waiter)
        updateIsLoading()
    }

    private func didFetch(_ result: Result<(Data, URLResponse?), ImagePipeline.Error>, generation: Int) {
        guard generation == fetchGeneration, fetchTask != nil else { return }
        fetchTask = nil
        switch result {
        case .success(let (data, response)):
            fetched = (data, response)
            decodeIfNeeded()
        case .failure(let error):
            if error.code != .cancelled {
                show(.failure(error))
                shownTarget = nil
            }
        }
        updateIsLoading()
    }

    /// Shows `response`'s image.
    private func show(_ response: ImageResponse) {
        self.response = response
        phase = .success(response.image)
    }

    /// Shows an empty or failed phase.
    private func show(_ phase: ImagePhase) {
        response = nil
        self.phase = phase
    }

    /// Decodes the bytes held at the current target, unless the image shown fits it or the
    /// memory cache has it. A decode of the image at that size running for someone else whose
    /// bytes are in too (those of the fetch the model shared, as a rule) is joined rather than
    /// repeated — never one still waiting for a download, which the bytes held would only wait
    /// behind.
    private func decodeIfNeeded() {
        guard !isHidden, fetched != nil, let target = currentTarget() else { return }
        if target == shownTarget {
            // The image shown already fits: drop a decode for another size.
            cancelDecoding()
            updateIsLoading()
            return
        }
        if decoding?.target == target { return }
        cancelDecoding() // a decode only: the bytes are held here
        if showCachedImage(for: target) {
            updateIsLoading()
            return
        }
        // Someone decodes the image at this size already (a prefetch at the cell's size): one
        // decode for both.
        if let sized = sizedRequest(target),
           let joined = pipeline.imageTaskJoiningRunningWork(for: sized, requiringInput: true) {
            follow(joined, target: target)
            return
        }
        guard let decodeRequest = decodeRequest(for: target) else { return }
        startDecoding(decodeRequest, target: target)
    }

    /// Starts the image task for `decodeRequest`, which makes the image for `target`,
    /// replacing any decode running for another target.
    private func startDecoding(_ decodeRequest: ImageRequest, target: DecodeTarget) {
        follow(pipeline.imageTask(with: decodeRequest), target: target)
    }

    /// Makes `task`, started for the model, its decode for `target`, and shows its image when
    /// it ends.
    private func follow(_ task: ImageTask, target: DecodeTarget) {
        cancelDecoding()
        decoding = (target, task)
        Task { [weak self] in
            let result: Result<ImageResponse, ImagePipeline.Error>
            do {
                result = .success(try await task.response)
            } catch {
                result = .failure(error as? ImagePipeline.Error ?? ImagePipeline.Error.decodingFailed(error))
            }
            self?.didDecode(result, task: task)
        }
        updateIsLoading()
    }

    /// The decode reads the bytes this model holds, through a data-closure request whose id
    /// names the image and its credentials: models showing the same image at the same bucket
    /// share the decode, and (without credentials) it lands in the memory-cache entry that the
    /// URL request at that size would use.
    private func decodeRequest(for target: DecodeTarget) -> ImageRequest? {
        guard let original = request, let data = fetched?.data else { return nil }
        let fingerprint = original.credentialFingerprint
        let imageID = original.imageID ?? ""
        var options = original.options.union([.disableDiskCacheReads, .disableDiskCacheWrites])
        options.remove(.returnCacheDataDontLoad)
        var request = ImageRequest(
            id: "lumen.FetchImage:\(imageID)" + (fingerprint.map { "#\($0)" } ?? ""),
            data: { data },
            processors: original.processors, priority: priority, options: options,
            thumbnail: target.size, userInfo: original.userInfo)
        if fingerprint == nil { request.imageID = original.imageID }
        request.isInMemory = true // no download slot: a size change never waits behind downloads
        return request
    }

    private func didDecode(_ result: Result<ImageResponse, ImagePipeline.Error>, task: ImageTask) {
        guard let decoding, decoding.task === task, var sized = sizedRequest(decoding.target) else { return }
        self.decoding = nil
        switch result {
        case .success(let response):
            let target = learnNaturalSize(from: response.image, target: decoding.target, request: &sized)
            shownTarget = target
            fullSizeSource = nil
            show(ImageResponse(container: response.container, request: sized, urlResponse: fetched?.response ?? response.urlResponse, cacheType: response.cacheType))
            decodeIfNeeded() // the size may have changed meanwhile
        case .failure(let error):
            if error.code != .cancelled {
                show(.failure(error))
                shownTarget = nil // nothing shown: the same size may be tried again
            }
        }
        updateIsLoading()
    }

    private func cancelWork() {
        if let fetchTask {
            self.fetchTask = nil
            fetchTask.data.cancel()
        }
        cancelDecoding()
        cancelFullSizeWait()
        updateIsLoading()
    }

    private func updateIsLoading() {
        let loading = fetchTask != nil || decoding != nil || fullSizeWait != nil
        if isLoading != loading { isLoading = loading }
    }
}
