import Foundation

// Progressive decoding (``ImagePipeline/Configuration/isProgressiveDecodingEnabled``).
//
// 1. The fetch stage scans the body as it arrives with a ``ProgressiveJPEGScanner``, which
//    reads each byte once. When a new scan of a progressive JPEG is complete it sends the body
//    so far to its subscribers as a `.preview` event (only when a decode stage asked for
//    previews: data requests never pay for the scan).
// 2. A decode stage decodes those bytes with the decoder's `decodePreview` on the decoding
//    queue, at the request's decode size; a processing stage applies its processor to the
//    preview below on the processing queue. Each stage runs one preview job at a time: input
//    that arrives meanwhile replaces any older pending input (intermediate scans are skipped),
//    so previews never pile up. The job is the stage's `operation` while the stage waits for its
//    final input, so it follows the stage's priority and is cancelled with the stage. The stage
//    keeps the newest preview it sent, for a subscriber's `events` stream opened later.
// 3. The final input supersedes previews: a queued preview job is cancelled, a running one's
//    result is dropped, and nothing new starts. A preview is sent with `send(preview:)`, which
//    does nothing once the stage finished: no preview ever follows the final image.
// 4. Previews travel only as events: `deliver` (the only path that writes the caches) never sees
//    them, and ``ImageTask`` hands them only to its event streams.
// 5. Previews are decoded only while some task's `events` stream is open (the graph counts
//    them). A decode stage that gets a scan while none is open keeps its length (the newest
//    only) and registers with the graph; the first stream to open has them decoded.

/// The progressive previews of one image stage. Guarded by the graph's lock.
final class PreviewState: @unchecked Sendable { // state guarded by graph.lock
    /// The preview job queued or running, if any.
    @exclusivity(unchecked) var item: WorkQueue.Item?
    /// The newest preview job that arrived while another was in flight.
    @exclusivity(unchecked) var pending: (@Sendable () -> ImageResult?)?
    /// The final input arrived: no preview starts or is sent any more.
    @exclusivity(unchecked) var isSuperseded = false
    /// The newest preview sent, until the final input arrives: an `events` stream opened after
    /// it was sent starts with it (its task had no stream then, and the body may be paused).
    @exclusivity(unchecked) var latest: ImageResult?
}

extension ImageStageTask {
    /// Runs `work` (a preview job) on `queue` unless one is in flight, in which case it replaces
    /// the pending job. Must hold the graph's lock.
    final func schedulePreview(on queue: WorkQueue, _ work: @escaping @Sendable () -> ImageResult?) {
        let state: PreviewState
        if let existing = previews {
            state = existing
        } else {
            state = PreviewState()
            previews = state
        }
        guard !isDisposed, !state.isSuperseded else { return }
        if state.item != nil {
            state.pending = work
            return
        }
        startPreview(work, state: state, on: queue)
    }

    private func startPreview(_ work: @escaping @Sendable () -> ImageResult?, state: PreviewState, on queue: WorkQueue) {
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in
            let result = work()
            graph.sync { previewEnded(result, state: state, on: queue) }
        }
        state.item = item
        // While the stage waits for its final input it has no operation of its own: the
        // preview job takes the slot, so priority changes and cancellation reach it.
        if operation == nil { operation = (queue, item) }
    }

    private func previewEnded(_ result: ImageResult?, state: PreviewState, on queue: WorkQueue) {
        if let item = state.item, let operation, operation.item === item { self.operation = nil }
        state.item = nil
        guard !isDisposed, !state.isSuperseded else {
            state.pending = nil
            return
        }
        if let result {
            state.latest = result
            send(preview: result)
        }
        if let next = state.pending {
            state.pending = nil
            startPreview(next, state: state, on: queue)
        }
    }

    /// The final input arrived: cancels a queued preview job and drops any pending one; a
    /// running job's result will be dropped. Must hold the graph's lock.
    final func supersedePreviews() {
        guard let state = previews else { return }
        state.isSuperseded = true
        state.pending = nil
        state.latest = nil
        if let item = state.item, let operation, operation.item === item {
            self.operation = nil
            // At once, so the queue never holds a superseded preview next to the final work
            // (lock order: graph, then queue). A preview job is synchronous work: cancelling
            // it runs no cancellation handler, so nothing foreign runs under the lock.
            operation.queue.cancel(item)
        }
    }
}

extension WorkGraph {
    /// An `ImageTask.events` stream opened. The first one decodes the previews skipped while
    /// none was open. Must hold the lock.
    func addPreviewReader() {
        previewReaders += 1
        guard previewReaders == 1, !skippedPreviews.isEmpty else { return }
        let skipped = skippedPreviews.values.compactMap(\.task)
        skippedPreviews = [:]
        for task in skipped { task.decodeSkippedPreview() }
    }

    /// `count` streams closed. Must hold the lock.
    func removePreviewReaders(_ count: Int = 1) {
        previewReaders -= count
    }

    /// `task` skipped a preview (no stream was open) and keeps it for the first stream to
    /// open. Must hold the lock.
    func previewSkipped(by task: DecodeTask) {
        if skippedPreviews.count >= 64 { skippedPreviews = skippedPreviews.filter { $0.value.task != nil } }
        skippedPreviews[ObjectIdentifier(task)] = WeakDecodeTask(task: task)
    }

    /// `task` no longer keeps a skipped preview. Must hold the lock.
    func previewNoLongerSkipped(by task: DecodeTask) {
        skippedPreviews[ObjectIdentifier(task)] = nil
    }
}

/// A decode stage held without keeping it alive.
struct WeakDecodeTask {
    weak var task: DecodeTask?
}

extension DecodeTask {
    /// Schedules a preview decode of `partial` (the body so far at a new scan boundary) at
    /// the request's decode size. Must hold the graph's lock.
    func decodePreview(_ partial: FetchedData) {
        // Nobody could show it yet: no task has an `events` stream open. Kept (the newest
        // only) for a stream opened before the next scan or the final bytes arrive.
        guard graph.previewReaders > 0 else {
            if skippedPreview == nil { graph.previewSkipped(by: self) }
            skippedPreview = (partial.data.count, partial.urlResponse)
            return
        }
        dropSkippedPreview()
        let configuration = graph.configuration
        let options = DecodeOptions(size: request.thumbnail, maximumPixelCount: configuration.maximumDecodedPixelCount)
        let context = ImageDecodingContext(request: request, urlResponse: partial.urlResponse, options: options)
        let decoder = configuration.decoder
        let graph = self.graph
        let key = keyDescription
        schedulePreview(on: configuration.decodingQueue) {
            graph.metricsStore.withLock { $0.previewDecodes += 1 }
            do {
                guard var container = try decoder.decodePreview(partial.data, context: context) else { return nil }
                container.isPreview = true
                container.data = nil
                return ImageResult(container: container, urlResponse: partial.urlResponse, cacheType: nil)
            } catch {
                // Only a missed preview: the download goes on and the final decode decides.
                if let logger = configuration.logger { logger(LogRedaction.scrub("preview decode failed for \(key): \(error)")) }
                return nil
            }
        }
    }

    /// A stream opened: decodes the preview skipped while none was, unless the final bytes
    /// came meanwhile. Must hold the graph's lock.
    func decodeSkippedPreview() {
        guard let skipped = skippedPreview else { return }
        skippedPreview = nil
        guard !isDisposed, previews?.isSuperseded != true,
              let fetch = (dependency as? SharedTask<FetchedData>.Subscription)?.task as? FetchTask,
              let data = fetch.bodyPrefix(skipped.length) else { return }
        decodePreview(FetchedData(data: data, urlResponse: skipped.urlResponse))
    }

    /// Forgets a skipped preview (a newer one is decoded, or the final bytes came). Must hold
    /// the graph's lock.
    func dropSkippedPreview() {
        guard skippedPreview != nil else { return }
        skippedPreview = nil
        graph.previewNoLongerSkipped(by: self)
    }
}

extension ProcessTask {
    /// Schedules this stage's processor on a preview from the stage below. Must hold the
    /// graph's lock.
    func processPreview(_ input: ImageResult) {
        let processor = request.processors[processorCount - 1]
        let graph = self.graph
        schedulePreview(on: graph.configuration.processingQueue) {
            graph.metricsStore.withLock { $0.previewProcessorApplications += 1 }
            guard let image = try? processor.process(input.container.image) else { return nil }
            var output = input
            output.container.image = image
            output.container.data = nil
            output.container.isPreview = true
            return output
        }
    }
}

/// Finds the ends of a progressive JPEG's scans in a body that arrives in pieces, reading
/// every byte once: each call goes on from where the last one stopped.
///
/// A scan is complete when the marker after its entropy-coded data has arrived. The scanner
/// stops for good (``isActive`` `false`) at the end-of-image marker, at a baseline frame
/// header (a cut baseline JPEG is no preview), and at anything that is not a well-formed JPEG
/// marker structure — the decoder, not the scanner, judges the bytes.
struct ProgressiveJPEGScanner {
    private enum Phase {
        case start, startMarker, seekMarker, marker, lengthHigh, lengthLow, segment, entropy, entropyMarker, stopped
    }

    /// Scans complete so far, not counting the last one when the image ended after it.
    private(set) var completedScans = 0
    private var phase = Phase.start
    /// Offset of the next byte to read.
    private var position = 0
    private var marker: UInt8 = 0
    private var lengthHigh = 0
    private var remaining = 0
    private var sawProgressiveFrame = false
    private var reachedEnd = false

    /// Whether more bytes could still complete a scan.
    var isActive: Bool { phase != .stopped }

    /// Reads the bytes of `body` after those read before (`body` is the whole body so far, a
    /// prefix of the next call's). Returns whether a new scan was completed and the image has
    /// not ended (complete bytes make the final image, not a preview).
    mutating func advance(over body: UnsafeRawBufferPointer) -> Bool {
        let before = completedScans
        let count = body.count
        var p = position
        guard let base = body.baseAddress else { return false }
        loop: while p < count {
            switch phase {
            case .start:
                guard body[p] == 0xFF else { phase = .stopped; break loop }
                phase = .startMarker
                p += 1
            case .startMarker:
                guard body[p] == 0xD8 else { phase = .stopped; break loop }
                phase = .seekMarker
                p += 1
            case .seekMarker, .entropy:
                // Up to the next 0xFF (in entropy-coded data: a stuffed byte, a restart marker or
                // the marker that ends the scan).
                guard let hit = memchr(base + p, 0xFF, count - p) else {
                    p = count
                    break
                }
                p = base.distance(to: UnsafeRawPointer(hit)) + 1
                phase = phase == .entropy ? .entropyMarker : .marker
            case .marker:
                let byte = body[p]
                p += 1
                if byte != 0xFF { startSegment(byte) } // 0xFF: fill byte
            case .entropyMarker:
                let byte = body[p]
                p += 1
                switch byte {
                case 0xFF: break // fill byte
                case 0x00, 0xD0...0xD7: phase = .entropy // stuffed zero, restart marker
                case 0xD9: // the image is complete: the final decode will show it
                    phase = .stopped
                    reachedEnd = true
                default:
                    completedScans += 1
                    startSegment(byte)
                }
            case .lengthHigh:
                lengthHigh = Int(body[p])
                p += 1
                phase = .lengthLow
            case .lengthLow:
                let length = lengthHigh << 8 | Int(body[p])
                p += 1
                guard length >= 2 else { phase = .stopped; break loop }
                remaining = length - 2
                switch marker {
                case 0xC2, 0xC6, 0xCA, 0xCE:
                    sawProgressiveFrame = true
                case 0xC0, 0xC1, 0xC3, 0xC5, 0xC7, 0xC9, 0xCB, 0xCD, 0xCF:
                    phase = .stopped // baseline, lossless, hierarchical: no previews
                    break loop
                case 0xDA where !sawProgressiveFrame:
                    phase = .stopped
                    break loop
                default:
                    break
                }
                phase = .segment
            case .segment:
                let step = min(remaining, count - p)
                p += step
                remaining -= step
                if remaining == 0 { phase = marker == 0xDA ? .entropy : .seekMarker }
            case .stopped:
                break loop
            }
        }
        position = p
        return completedScans > before && !reachedEnd
    }

    /// Handles the marker code `byte` read after 0xFF outside entropy-coded data.
    private mutating func startSegment(_ byte: UInt8) {
        switch byte {
        case 0xD9, 0xD8, 0x02...0xBF: phase = .stopped // end of image, or not a JPEG we follow
        case 0x00, 0x01, 0xD0...0xD7: phase = .seekMarker // standalone markers
        default:
            marker = byte
            phase = .lengthHigh
        }
    }
}
