import Foundation

extension ImagePipeline {
    /// The pipeline's cache layers (decoded images in memory, bytes on disk), looked up and
    /// managed by request, with the same keys the pipeline's stages use.
    ///
    /// (Being wired: until the memory and disk caches are part of the configuration, every
    /// lookup misses and removals do nothing.)
    public struct Cache: Sendable {
        let pipeline: ImagePipeline

        /// The decoded image cached in memory for `request`. Synchronous: no actor hop.
        public subscript(request: ImageRequest) -> ImageContainer? {
            get { nil }
            nonmutating set {}
        }

        /// Whether a decoded image for `request` is in memory.
        public func containsCachedImage(for request: ImageRequest) -> Bool { self[request] != nil }

        /// Whether the bytes `request` would fetch are on disk.
        public func containsData(for request: ImageRequest) -> Bool { false }

        /// Removes `request`'s entries from memory and disk.
        public func removeAll(for request: ImageRequest) {}

        /// Empties both layers.
        public func removeAll() {}

        /// Empties the memory layer and keeps the bytes on disk.
        public func removeAllFromMemory() {}
    }

    /// The pipeline's cache layers.
    public var cache: Cache { Cache(pipeline: self) }
}
