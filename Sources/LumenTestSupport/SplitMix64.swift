/// A small, fast, deterministic pseudo-random generator (SplitMix64): one seed, one sequence,
/// on every machine, so that a randomized test's failing seed reproduces and a benchmark's
/// generated images and traces are the same everywhere.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    @usableFromInline var state: UInt64

    /// The generator whose sequence `seed` starts.
    @inlinable public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    @inlinable public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform value in [0, 1).
    @inlinable public mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
