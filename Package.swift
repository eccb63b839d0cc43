// swift-tools-version:6.2
import PackageDescription
import Foundation

/// HEIC/AVIF support through libheif is optional: build with `LUMEN_HEIF=1` in the
/// environment (and `libheif-dev` installed) to turn it on. Without it the package builds
/// and HEIC/AVIF input is reported as `unsupportedFormat(.heic)` or `unsupportedFormat(.avif)`,
/// whose message says that HEIC/AVIF support is not built in and how to build it.
let heifEnabled = ProcessInfo.processInfo.environment["LUMEN_HEIF"] == "1"

var imagingDependencies: [Target.Dependency] = [
    "CTurboJPEG", "CSpng", "CWebP", "CGif", "CLcms2", "CLumenShim", "LumenConcurrency",
]
var imagingSettings: [SwiftSetting] = []
var extraTargets: [Target] = []
if heifEnabled {
    imagingDependencies.append("CHeif")
    imagingSettings.append(.define("LUMEN_HEIF"))
    extraTargets.append(
        .systemLibrary(name: "CHeif", pkgConfig: "libheif", providers: [.apt(["libheif-dev"])])
    )
}

let package = Package(
    name: "Lumen",
    // Apple platforms: `Synchronization.Mutex` and `@Observable` need these versions.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "Lumen", targets: ["Lumen"]),
        .library(name: "LumenUI", targets: ["LumenUI"]),
        .library(name: "LumenTestSupport", targets: ["LumenTestSupport"]),
        .library(name: "LumenServer", targets: ["LumenServer"]),
        .executable(name: "lumen", targets: ["lumen"]),
    ],
    targets: [
        // System libraries (Debian packages, found through pkg-config).
        .systemLibrary(name: "CTurboJPEG", pkgConfig: "libturbojpeg", providers: [.apt(["libturbojpeg0-dev"])]),
        .systemLibrary(name: "CSpng", pkgConfig: "spng", providers: [.apt(["libspng-dev"])]),
        .systemLibrary(name: "CWebP", pkgConfig: "libwebpdemux", providers: [.apt(["libwebp-dev"])]),
        .systemLibrary(name: "CGif", pkgConfig: "libgif", providers: [.apt(["libgif-dev"])]),
        .systemLibrary(name: "CLcms2", pkgConfig: "lcms2", providers: [.apt(["liblcms2-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CIsal", pkgConfig: "libisal", providers: [.apt(["libisal-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        // hiredis: the fleet's shared second level (`lumen serve --redis`), through
        // redisCommandArgv only (binary-safe, never the printf-style call).
        // (No pkgConfig: hiredis's .pc adds -D_FILE_OFFSET_BITS=64, which SwiftPM refuses with a
        // warning; the headers need no flags and the library is in the default path.)
        .systemLibrary(name: "CHiredis", providers: [.apt(["libhiredis-dev"])]),
        // Small C shim for what Swift cannot call directly (function-like macros), and the
        // C loops that libraries leave to their callers (PNG rows inflated with ISA-L).
        .target(name: "CLumenShim", dependencies: ["CTurboJPEG", "CSpng", "CWebP", "CGif", "CLcms2", "CIsal"]),
        // Typed wrappers for libcurl's variadic setters and getters (CurlDataLoader, Linux).
        .target(name: "CLumenCurl", dependencies: ["CCurl"]),
        // A TLS front for the loopback test server, for the loaders' https tests (Lumen's own
        // tests only, Linux): OpenSSL's libssl from `libssl-dev`.
        .target(name: "CLumenTLSProxy", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        // Concurrency helpers every module shares (`package` access, in no product): the lock
        // ThreadSanitizer builds use in place of `Synchronization.Mutex`.
        .target(name: "LumenConcurrency"),
        // The Linux imaging engine: the only Swift target that imports the C libraries.
        .target(name: "LumenImaging", dependencies: imagingDependencies, swiftSettings: imagingSettings),
        // The pipeline: work graph, caches, loading, prefetching.
        // `CurlDataLoader` (libcurl) is built on Linux only, so the package resolves elsewhere.
        .target(name: "Lumen", dependencies: [
            "LumenImaging", "CCrypto", "LumenConcurrency",
            .target(name: "CCurl", condition: .when(platforms: [.linux])),
            .target(name: "CLumenCurl", condition: .when(platforms: [.linux])),
        ]),
        // The UI model and view over the pipeline, apart from it as NukeUI is from Nuke:
        // `FetchImage` (and `LumenImage` for SwiftUI on Apple platforms).
        .target(name: "LumenUI", dependencies: ["Lumen"]),
        // Typed wrappers for libmicrohttpd's variadic calls (the server's HTTP layer).
        .target(name: "CLumenHTTPD", dependencies: ["CMicroHTTPD"]),
        // `lumen serve` as a library: signed image URLs over one shared pipeline, served
        // through libmicrohttpd behind a small internal protocol.
        .target(name: "LumenServer", dependencies: ["Lumen", "CCrypto", "CMicroHTTPD", "CLumenHTTPD", "CHiredis", "LumenConcurrency"]),
        // Test doubles shipped for Lumen's users: fake data loader, loopback HTTP server.
        .target(name: "LumenTestSupport", dependencies: ["Lumen", "LumenConcurrency"]),
        // The command-line tool: demo, thumbnail, bench. A thin client of the public API.
        .executableTarget(name: "lumen", dependencies: ["Lumen", "LumenServer", "LumenTestSupport", "CLumenShim", "LumenConcurrency"]),
        // A second process for the disk cache's cross-process tests.
        .executableTarget(name: "lumen-cache-probe", dependencies: ["Lumen", "LumenTestSupport", "LumenConcurrency"]),
        .testTarget(name: "LumenImagingTests", dependencies: ["LumenImaging", "LumenConcurrency"], swiftSettings: imagingSettings),
        .testTarget(name: "LumenTests", dependencies: [
            "Lumen", "LumenUI", "LumenTestSupport", "lumen-cache-probe", "lumen", "LumenConcurrency",
            .target(name: "CLumenTLSProxy", condition: .when(platforms: [.linux])),
        ]),
        .testTarget(name: "LumenServerTests", dependencies: ["LumenServer", "Lumen", "LumenTestSupport", "lumen"]),
    ] + extraTargets
)
