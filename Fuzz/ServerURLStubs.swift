// Stands in for the part of LumenServer that Sources/LumenServer/URL uses from the rest of
// the module, so that scripts/fuzz.sh can build that folder alone for the server-url target
// (without the HTTP, Redis and image C libraries). Not part of the package.

/// `ImageServer.isAVIFAvailable` as a build without HEIF support answers it.
enum ImageServer {
    static var isAVIFAvailable: Bool { false }
}
