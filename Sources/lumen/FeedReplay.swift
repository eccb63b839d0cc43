import Foundation
import Lumen

/// An image the replay asks for: a URL at a decode size (`nil`: full size).
struct FeedImageRef: Sendable, Hashable {
    var url: URL
    var maxPixelSize: Int?
}

/// One running load, as a cell sees it.
protocol FeedLoad: Sendable {
    /// Cancels the load (the cell disappeared); returns whether it was still running.
    func cancel() -> Bool
    /// The image, or why there is none (cancellation included).
    func value() async -> Result<Bitmap, any Error>
}

/// A loader under test, as the replay drives it: visible loads, and a prefetch window.
protocol FeedLoading: Sendable {
    /// Starts loading `ref` for a visible cell (or the detail view) at `priority`.
    func load(_ ref: FeedImageRef, priority: ImageRequest.Priority) -> any FeedLoad
    /// Whether the loader prefetches at all.
    var prefetches: Bool { get }
    /// Starts prefetching `refs` (loaders without prefetching ignore it).
    func startPrefetching(_ refs: [FeedImageRef])
    /// Stops prefetching `refs`.
    func stopPrefetching(_ refs: [FeedImageRef])
    /// Waits until nothing the loader started is still running (prefetches included), after
    /// the replay stopped everything.
    func drain() async
}

/// What the replay itself counted.
struct FeedReplayOutcome: Sendable {
    /// Loads for visible cells and detail views.
    var requests = 0
    /// Prefetches asked for (0 for loaders without prefetching).
    var prefetches = 0
    /// Loads cancelled while still running (their cell disappeared).
    var cancelledRequests = 0
    /// Loads awaited that failed (none expected).
    var failures: [String] = []
    /// Cells shown until loaded.
    var shownCells = 0
    /// Bytes of the largest image the detail view held (its decoded pixels; 0 without one).
    var detailImageBytes = 0
    /// Photo thumbnail and avatar of the first shown cells, for the contact sheet.
    var sheet: [(photo: Bitmap, avatar: Bitmap)] = []
}

/// Plays a ``FeedTrace`` through a loader: cells appear (their loads start) and disappear
/// (their loads are cancelled); the prefetch window follows the visible window; a slow
/// scroll waits until the visible cells show their images, which they keep while visible
/// (as a view keeps what it displays).
struct FeedReplayer: Sendable {
    let trace: FeedTrace
    let photos: [URL]
    let avatars: [URL]
    let loader: any FeedLoading
    /// How many shown cells to keep for the contact sheet.
    var sheetLimit = 0
    /// Told after each step: (steps done, steps in all).
    var onStep: (@Sendable (Int, Int) -> Void)?

    private final class CellState {
        let photo: any FeedLoad
        let avatar: any FeedLoad
        var photoImage: Bitmap?
        var avatarImage: Bitmap?
        init(photo: any FeedLoad, avatar: any FeedLoad) {
            self.photo = photo
            self.avatar = avatar
        }
    }

    func photoRef(_ cell: Int) -> FeedImageRef {
        FeedImageRef(url: photos[trace.cells[cell].photo], maxPixelSize: trace.thumbnailPixels)
    }

    func avatarRef(_ cell: Int) -> FeedImageRef {
        FeedImageRef(url: avatars[trace.cells[cell].avatar], maxPixelSize: trace.avatarPixels)
    }

    func run() async -> FeedReplayOutcome {
        var outcome = FeedReplayOutcome()
        var visible: [Int: CellState] = [:]
        var prefetching: Set<FeedImageRef> = []
        var shown: Set<Int> = []
        var position = 0

        func show(_ cell: Int) -> CellState {
            outcome.requests += 2
            return CellState(photo: loader.load(photoRef(cell), priority: .normal),
                             avatar: loader.load(avatarRef(cell), priority: .normal))
        }
        func hide(_ state: CellState) {
            if state.photo.cancel() { outcome.cancelledRequests += 1 }
            if state.avatar.cancel() { outcome.cancelledRequests += 1 }
        }
        /// Moves the prefetch window to `refs` (nearest first): stops what left it, starts what
        /// entered it.
        func movePrefetchWindow(to refs: [FeedImageRef]) {
            let wanted = Set(refs)
            let stopped = prefetching.filter { !wanted.contains($0) }
            var started: [FeedImageRef] = []
            for ref in refs where !prefetching.contains(ref) && !started.contains(ref) { started.append(ref) }
            if !stopped.isEmpty { loader.stopPrefetching(Array(stopped)) }
            if !started.isEmpty {
                if loader.prefetches { outcome.prefetches += started.count }
                loader.startPrefetching(started)
            }
            prefetching = wanted
        }
        func moveWindow(to p: Int, forward: Bool) async {
            let window = Set(p..<(p + trace.visibleCount))
            for (cell, state) in visible where !window.contains(cell) {
                hide(state)
                visible[cell] = nil
            }
            for cell in window.sorted() where visible[cell] == nil {
                visible[cell] = show(cell)
            }
            var refs: [FeedImageRef] = []
            let ahead = trace.prefetchWindow(at: p, forward: forward)
            for cell in forward ? Array(ahead) : ahead.reversed() where cell < trace.cells.count {
                refs.append(photoRef(cell))
                refs.append(avatarRef(cell))
            }
            movePrefetchWindow(to: refs)
            position = p
            // The user reads: wait until every visible cell shows its photo and avatar.
            for cell in window.sorted() {
                guard let state = visible[cell] else { continue }
                if state.photoImage == nil { state.photoImage = record(await state.photo.value(), cell, "photo") }
                if state.avatarImage == nil { state.avatarImage = record(await state.avatar.value(), cell, "avatar") }
                if shown.insert(cell).inserted {
                    outcome.shownCells += 1
                    if outcome.sheet.count < sheetLimit, let photo = state.photoImage, let avatar = state.avatarImage {
                        outcome.sheet.append((photo, avatar))
                    }
                }
            }
        }
        func record(_ result: Result<Bitmap, any Error>, _ cell: Int, _ what: String) -> Bitmap? {
            switch result {
            case .success(let image): return image
            case .failure(let error):
                outcome.failures.append("cell \(cell) \(what): \(error)")
                return nil
            }
        }

        // The detail view keeps its image while open, as the cells do.
        var detail: Bitmap?
        for (index, step) in trace.steps.enumerated() {
            defer { onStep?(index + 1, trace.steps.count) }
            switch step {
            case .scroll(let p):
                await moveWindow(to: p, forward: p >= position)
            case .fling(let p):
                // The screen empties, and every cell in between passes through it before its
                // loads can finish: it appears (its loads start, joining its prefetch if one
                // runs), leaves the prefetch window, and disappears (its loads are cancelled).
                // No new prefetches start during the fling; the landing moves the window on.
                for (_, state) in visible { hide(state) }
                visible = [:]
                let ahead = trace.prefetchWindow(at: position, forward: true)
                for cell in trace.flungPast(from: position, to: p) {
                    let passing = show(cell)
                    let remaining = ((cell + 1)..<max(cell + 1, ahead.upperBound)).filter { $0 < trace.cells.count }
                        .flatMap { [photoRef($0), avatarRef($0)] }
                    movePrefetchWindow(to: remaining.filter { prefetching.contains($0) })
                    hide(passing)
                }
                await moveWindow(to: p, forward: true)
            case .openDetail(let cell):
                outcome.requests += 1
                let ref = FeedImageRef(url: photos[trace.cells[cell].photo], maxPixelSize: nil)
                detail = record(await loader.load(ref, priority: .high).value(), cell, "detail")
                outcome.detailImageBytes = max(outcome.detailImageBytes, detail?.pixels.count ?? 0)
            case .closeDetail:
                detail = nil
            }
        }
        movePrefetchWindow(to: [])
        for (_, state) in visible { _ = state.photo.cancel(); _ = state.avatar.cancel() }
        visible = [:]
        await loader.drain()
        return outcome
    }
}
