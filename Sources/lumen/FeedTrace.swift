import Foundation
import LumenTestSupport

/// A deterministic scroll trace through a feed of cells, replayed by `lumen demo` and
/// `lumen bench feed` against every loader.
///
/// **Shape.** The feed is a column of cells, each showing one photo (a thumbnail decoded at
/// 256 px) and one avatar (64 px). The screen shows ``visibleCount`` cells (4) starting at a
/// window position; the ``prefetchCount`` cells (6) beyond the window in the scroll direction
/// are prefetched. The steps are:
/// - `scroll(to:)` — slow scrolling, one cell at a time: the cells entering the window start
///   loading, the cells leaving it are cancelled, the prefetch window moves, and the replay
///   waits until every visible cell shows its photo and avatar (the user is reading).
/// - `fling(to:)` — a fast fling: every cell between the old and new window appears and
///   disappears at once, before its loads can finish (its loads are started — joining its
///   prefetch if one runs — and cancelled; it leaves the prefetch window as it appears); the
///   landing window is then shown as in a slow scroll, and the prefetch window moves on.
/// - `openDetail(cell:)` / `closeDetail` — a full-size view of one visible cell's photo, on
///   screen together with its thumbnail; the replay waits until it shows.
///
/// The full trace (seed 42): scroll 0→16 with a detail view of a 3 MP photo on the way, fling
/// to 28, scroll to 40, fling to 52, scroll to 68, then back up to 58 over cells seen before:
/// 78 cells, 56 of them shown until loaded. Three 12 MP photos are shown in cells, a fourth
/// is flung past. At least a quarter of the shown cells repost a photo shown earlier (more
/// when the catalogue runs short of fresh photos). Avatar 0 appears in about 40% of the cells
/// (in the first two), and every avatar is shown in the opening screens. Cells that
/// are only ever flung past or prefetched get photos of their own, and no cell is loaded
/// again once its loads may have been cancelled (``simulate()`` checks it), so a loader that
/// shares and caches everything makes exactly one network request per distinct URL. The
/// quick trace (tests) has the same shape on 32 cells, with the detail view on its largest
/// photo (1.9 MP).
struct FeedTrace: Sendable {
    struct Cell: Sendable, Hashable {
        /// Index into the catalogue's photos.
        var photo: Int
        /// Index into the catalogue's avatars.
        var avatar: Int
    }

    enum Step: Sendable, Hashable {
        case scroll(to: Int)
        case fling(to: Int)
        case openDetail(cell: Int)
        case closeDetail
    }

    /// The seed of the embedded default trace.
    static let defaultSeed: UInt64 = 42

    let visibleCount = 4
    let prefetchCount = 6
    let thumbnailPixels = 256
    let avatarPixels = 64

    var cells: [Cell]
    var steps: [Step]
    /// Cells shown until loaded (slow scrolls and fling landings), in the order they were first shown.
    var shownCells: [Int]

    /// The trace for the catalogue: `photoCount` photos, `largePhotos` (12 MP) among them,
    /// `detailPhoto` shown in the detail view, `avatarCount` avatars.
    static func make(quick: Bool, photoCount: Int, largePhotos: [Int], detailPhoto: Int, avatarCount: Int, seed: UInt64 = defaultSeed) -> FeedTrace {
        var steps: [Step] = [.scroll(to: 0)]
        var detailCells: [Int] = []
        func slow(_ from: Int, _ to: Int, detailAt: Int? = nil) {
            let stride = from < to ? 1 : -1
            var p = from
            while p != to {
                p += stride
                steps.append(.scroll(to: p))
                if p == detailAt {
                    steps.append(.openDetail(cell: p + 1))
                    steps.append(.closeDetail)
                    detailCells.append(p + 1)
                }
            }
        }
        if quick {
            slow(0, 4, detailAt: 2)
            steps.append(.fling(to: 14))
            slow(14, 22)
            slow(22, 20)
        } else {
            slow(0, 16, detailAt: 8)
            steps.append(.fling(to: 28))
            slow(28, 40)
            steps.append(.fling(to: 52))
            slow(52, 68)
            slow(68, 58)
        }
        var trace = FeedTrace(cells: [], steps: steps, shownCells: [])
        let (shown, touched, retouched) = trace.simulate()
        precondition(retouched.isEmpty, "FeedTrace: cells \(retouched.sorted()) are loaded again after their loads may have been cancelled")
        let cellCount = (touched.max() ?? 0) + 1
        trace.shownCells = shown

        // Photos: the detail photo pinned on the detail cell; the 12 MP photos spread over the
        // shown cells, the last one on a flung-past cell; fresh photos for cells never shown;
        // a quarter of the shown cells repost an earlier shown cell's photo.
        var rng = SplitMix64(seed: seed)
        var photoOf = [Int?](repeating: nil, count: cellCount)
        for cell in detailCells { photoOf[cell] = detailPhoto }
        let shownSet = Set(shown)
        var large = largePhotos
        if large.count > 1 {
            let slots = large.count - 1
            for k in 0..<slots {
                let index = shown.count * (k + 1) / (slots + 1)
                if let cell = shown.dropFirst(index).first(where: { photoOf[$0] == nil }) { photoOf[cell] = large.removeFirst() }
            }
        }
        if let last = large.first, let cell = (0..<cellCount).first(where: { !shownSet.contains($0) }) {
            photoOf[cell] = last
        }
        let pinned = Set(photoOf.compactMap { $0 })
        var fresh = (0..<photoCount).filter { !pinned.contains($0) && !largePhotos.contains($0) && $0 != detailPhoto }[...]
        var shownPhotos: [Int] = []
        for cell in shown {
            if let photo = photoOf[cell] {
                shownPhotos.append(photo)
                continue
            }
            let photo: Int
            // Fresh photos are kept for the cells never shown (they must not share one).
            let mustRepost = fresh.count <= cellCount - shownSet.count && !shownPhotos.isEmpty
            if shownPhotos.count >= 6 && rng.unit() < 0.25 || mustRepost {
                photo = shownPhotos[Int(rng.next() % UInt64(shownPhotos.count))]
            } else {
                photo = fresh.removeFirst()
            }
            photoOf[cell] = photo
            shownPhotos.append(photo)
        }
        for cell in 0..<cellCount where photoOf[cell] == nil {
            precondition(!fresh.isEmpty, "FeedTrace: the catalogue has too few photos for this trace")
            photoOf[cell] = fresh.removeFirst()
        }
        // Avatars: the opening cells show every avatar, avatar 0 in the first two cells (a
        // user's thread) — 0, 0, 1, 2, 3, 0, 4, 5 —, then avatar 0 in ~40% of the cells.
        var opening = [0, 0]
        for a in 1..<max(1, avatarCount) {
            opening.append(a)
            if a == 3 { opening.append(0) }
        }
        trace.cells = (0..<cellCount).map { cell in
            let avatar = cell < opening.count ? opening[cell] : rng.unit() < 0.4 ? 0 : Int(rng.next() % UInt64(avatarCount))
            return Cell(photo: photoOf[cell]!, avatar: avatar)
        }
        return trace
    }

    /// The cells shown until loaded (in first-shown order), every cell the trace touches
    /// (shown, flung past or prefetched), and the cells touched again after their loads may
    /// have been cancelled (flung past, or dropped from the prefetch window unseen) — a trace
    /// built by ``make`` has none, so that sharing and caching leave one download per URL.
    func simulate() -> (shown: [Int], touched: Set<Int>, retouched: Set<Int>) {
        var shown: [Int] = []
        var seen = Set<Int>()
        var touched = Set<Int>()
        var abandoned = Set<Int>()
        var retouched = Set<Int>()
        var prefetching = Set<Int>()
        var position = 0
        func touch(_ c: Int) {
            if abandoned.contains(c) { retouched.insert(c) }
            touched.insert(c)
        }
        for step in steps {
            switch step {
            case .scroll(let p), .fling(let p):
                if case .fling = step {
                    for c in flungPast(from: position, to: p) {
                        touch(c)
                        prefetching.remove(c)
                        if !seen.contains(c) { abandoned.insert(c) }
                    }
                }
                let forward = p >= position
                let window = p..<(p + visibleCount)
                for c in window {
                    touch(c)
                    if seen.insert(c).inserted { shown.append(c) }
                }
                let ahead = Set(prefetchWindow(at: p, forward: forward))
                for c in prefetching.subtracting(ahead) where !window.contains(c) && !seen.contains(c) { abandoned.insert(c) }
                for c in ahead.subtracting(prefetching) { touch(c) }
                prefetching = ahead
                position = p
            case .openDetail, .closeDetail:
                break
            }
        }
        return (shown, touched.union(seen), retouched)
    }

    /// The cells that appear and disappear during a fling from window position `from` to `to`
    /// (forward only; empty for short flings).
    func flungPast(from: Int, to: Int) -> Range<Int> {
        let first = from + visibleCount
        return first < to ? first..<to : to..<to
    }

    /// The cells prefetched when the window is at `position`, scrolling forward or back.
    func prefetchWindow(at position: Int, forward: Bool) -> Range<Int> {
        forward ? (position + visibleCount)..<(position + visibleCount + prefetchCount)
            : max(0, position - prefetchCount)..<position
    }

    /// Distinct photos and avatars the trace refers to.
    var distinctImages: Int {
        Set(cells.map(\.photo)).count + Set(cells.map(\.avatar)).count
    }
}

extension Arguments {
    /// `--seed N` (`lumen demo`, `lumen bench feed`): the trace's seed, ``FeedTrace/defaultSeed``
    /// when not given.
    func traceSeed() throws -> UInt64 {
        try int("seed", range: 0...Int.max).map(UInt64.init) ?? FeedTrace.defaultSeed
    }
}
