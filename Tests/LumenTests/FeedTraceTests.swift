import Foundation
import Testing
@testable import lumen

/// The demo's scroll traces: every seed gives the same scroll over other reposts and avatars,
/// and keeps the property the demo's one-request-per-URL claim rests on.
@Suite(.timeLimit(.minutes(1)))
struct FeedTraceTests {
    static func trace(quick: Bool, seed: UInt64) -> FeedTrace {
        let (photos, avatars) = FeedAssets.catalogue(quick: quick)
        return FeedRunner.trace(quick: quick, seed: seed, photos: photos, avatars: avatars)
    }

    @Test(arguments: [false, true])
    func seedsChangeTheCellsNotTheScroll(quick: Bool) {
        let embedded = Self.trace(quick: quick, seed: FeedTrace.defaultSeed)
        #expect(Self.trace(quick: quick, seed: FeedTrace.defaultSeed).cells == embedded.cells) // deterministic
        var differing = 0
        for seed: UInt64 in [1, 7, 99, 12345] {
            let other = Self.trace(quick: quick, seed: seed)
            #expect(other.steps == embedded.steps && other.shownCells == embedded.shownCells)
            #expect(other.cells.count == embedded.cells.count)
            if other.cells != embedded.cells { differing += 1 }
            // No cell is loaded again after its loads may have been cancelled, so a loader that
            // shares and caches everything makes one request per distinct URL.
            #expect(other.simulate().retouched.isEmpty)
        }
        #expect(differing == 4)
    }
}
