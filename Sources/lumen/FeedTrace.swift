import Foundation

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
/// - `fling(to:)` — a fast fling: the prefetches are stopped, and every cell between the old
///   and new window appears and disappears at once, before its loads can finish (its loads
///   are started and cancelled); the landing window is then shown as in a slow scroll.
/// - `openDetail(cell:)` / `closeDetail` — a full-size view of one visible cell's photo, on
///   screen together with its thumbnail; the replay waits until it shows.
///
/// The full trace (seed 42): scroll 0→20 with a detail view of a 3 MP photo on the way, fling
/// to 32, scroll to 44, scroll back up to 36 (cells seen before), fling to 56 (over seen cells
/// and new ones), scroll to 62: 72 cells, 50 of them shown until loaded. Three 12 MP photos
/// are shown in cells, a fourth is flung past. About a quarter of the shown cells repost a
/// photo shown earlier. Avatar 0 appears in about 40% of the cells (twice on the first
/// screen), and every avatar is shown in the opening screens. Cells that are only ever flung
/// past or prefetched get photos of their own (a photo whose download a fling cancelled is not
/// asked for again), so a loader that shares and caches everything makes exactly one network
/// request per distinct URL. The quick trace (tests) has the same shape on 28 cells.
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
    static func make(quick: Bool, photoCount: Int, largePhotos: [Int], detailPhoto: Int, avatarCount: Int, seed: UInt64 = 42) -> FeedTrace {
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
            slow(0, 6, detailAt: 3)
            steps.append(.fling(to: 16))
            slow(16, 18)
            slow(18, 16)
        } else {
            slow(0, 20, detailAt: 10)
            steps.append(.fling(to: 32))
            slow(32, 44)
            slow(44, 36)
            steps.append(.fling(to: 56))
            slow(56, 62)
        }
        var trace = FeedTrace(cells: [], steps: steps, shownCells: [])
        let (shown, touched) = trace.simulate()
        let cellCount = (touched.max() ?? 0) + 1
        trace.shownCells = shown

        // Photos: the detail photo pinned on the detail cell; the 12 MP photos spread over the
        // shown cells, the last one on a flung-past cell; fresh photos for cells never shown;
        // a quarter of the shown cells repost an earlier shown cell's photo.
        var rng = SplitMix(seed: seed)
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
            if shownPhotos.count >= 6 && rng.unit() < 0.25 || fresh.count <= cellCount - shownSet.count {
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
        // Avatars: the opening cells show every avatar, avatar 0 twice on the first screen
        // (0, 1, 2, 0, 3, 4, 0, 5); then avatar 0 in ~40% of the cells.
        var opening: [Int] = []
        for a in 1..<max(1, avatarCount) {
            if a % 2 == 1 { opening.append(0) }
            opening.append(a)
        }
        trace.cells = (0..<cellCount).map { cell in
            let avatar = cell < opening.count ? opening[cell] : rng.unit() < 0.4 ? 0 : Int(rng.next() % UInt64(avatarCount))
            return Cell(photo: photoOf[cell]!, avatar: avatar)
        }
        return trace
    }

    /// The cells shown until loaded (in first-shown order) and every cell the trace touches
    /// (shown, flung past or prefetched).
    func simulate() -> (shown: [Int], touched: Set<Int>) {
        var shown: [Int] = []
        var seen = Set<Int>()
        var touched = Set<Int>()
        var position = 0
        for step in steps {
            switch step {
            case .scroll(let p), .fling(let p):
                if case .fling = step {
                    for c in flungPast(from: position, to: p) { touched.insert(c) }
                }
                let forward = p >= position
                for c in p..<(p + visibleCount) where seen.insert(c).inserted { shown.append(c) }
                for c in prefetchWindow(at: p, forward: forward) { touched.insert(c) }
                position = p
            case .openDetail, .closeDetail:
                break
            }
        }
        return (shown, touched.union(seen))
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
