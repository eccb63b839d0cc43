import Foundation
import Lumen

extension ImageServer {
    /// Everything `lumen serve` can be told, with its defaults. Each maps to one flag and one
    /// `LUMEN_*` environment variable (see `lumen serve --help`).
    public struct Configuration: Sendable {
        /// Where to listen (an IP address; `[::1]` for IPv6). Default `127.0.0.1`.
        public var host = "127.0.0.1"
        /// The port; 0 picks a free one (read ``ImageServer/port``). Default 8080.
        public var port = 8080
        /// Signing keys: a signature valid under any of them is accepted (rotation).
        public var signers: [URLSigner] = []
        /// Accept `_` as the signature segment. Without signers the server refuses to start
        /// unless this is set. Default `false`.
        public var allowsUnsigned = false
        /// `a.example` or `*.a.example`; empty allows every host. Default empty.
        public var allowedHosts: [String] = []
        /// Address ranges allowed although special-purpose (loopback, private, link-local…).
        /// Default none.
        public var allowedSourceAddresses: [IPAddressRange] = []
        /// The directory `local:///path` sources come from; `nil` refuses them. Default `nil`.
        public var localRoot: URL?
        /// The largest `w` or `h` in pixels (after `dpr`). Default 4096.
        public var maximumOutputSide = 4096
        /// The largest source in bytes (from `Content-Length`, then while streaming): 413.
        /// Default 50 MB.
        public var maximumSourceBytes = 50_000_000
        /// The largest source in pixels (frames × area), checked before pixels are
        /// allocated: 413. Default 50 MP.
        public var maximumSourcePixels = 50_000_000
        /// The most requests waiting for work (not answered from a cache); more get 429.
        /// Default 256.
        public var maximumQueue = 256
        /// The longest one origin load may take, start to end, in seconds: 504. Default 10.
        public var sourceTimeout: Double = 10
        /// Seconds a client connection may stay idle, a request sent too slowly included,
        /// before it is closed. Default 10.
        public var clientTimeout = 10
        /// The most client connections at once. Default 1024.
        public var maximumConnections = 1024
        /// Seconds in-flight requests get to finish after SIGTERM/SIGINT. Default 10.
        public var drainTimeout: Double = 10
        /// `Cache-Control: public, max-age=N` on every image. Default 86400.
        public var maxAge = 86400
        /// Encoded results kept in memory, in bytes. Default 256 MB.
        public var memoryCacheBytes = 256 * 1024 * 1024
        /// Original bytes and encoded results on disk; `nil` for none. Default `nil`.
        public var cacheDirectory: URL?
        /// The disk cache's budget in bytes. Default 1 GB.
        public var cacheSizeBytes = 1024 * 1024 * 1024
        /// Where `/metrics` is served instead of the main listener (`host:port`); `nil` keeps it
        /// on the main one. Default `nil`.
        public var metricsListen: (host: String, port: Int)?
        /// Decode and encode workers. Default: one per core.
        public var workers = ProcessInfo.processInfo.activeProcessorCount
        /// HTTP threads (libmicrohttpd's epoll pool). Default: one per core.
        public var httpThreads = ProcessInfo.processInfo.activeProcessorCount
        /// The fleet's shared second level (`--redis redis://HOST:PORT[/DB]`): encoded results
        /// and original bytes shared with the other nodes, and one origin fetch per source
        /// across them. `nil` for none. Default `nil`.
        public var redis: RedisAddress?
        /// Seconds a value stored in Redis lives. Default 86400.
        public var redisTTL = 86400
        /// The largest value stored in Redis, in bytes. Default 4 MB.
        public var redisMaximumValueBytes = 4 * 1024 * 1024
        /// The longest a Redis connect or command may take before Redis counts as down, in
        /// seconds. Default 0.5.
        public var redisTimeout: Double = 0.5
        /// Receives one access-log line per request; `nil` for none. Default `nil`.
        public var accessLog: (@Sendable (String) -> Void)?
        /// The access log's form. Default `.text`.
        public var logFormat: LogFormat = .text
        /// Receives one line per notable event (Redis state, cache problems, a stage that
        /// failed), without the user part or query of any URL in it; with ``logFormat`` `.json`,
        /// each line is a JSON object (`message`, `time`). `nil` for none.
        public var logger: (@Sendable (String) -> Void)?
        /// The origin loader; `nil` builds a `CurlDataLoader` with the source timeout, five
        /// redirects and the connection policy. Tests give their own.
        public var dataLoader: (any DataLoading)?

        public enum LogFormat: String, Sendable { case text, json }

        public init() {}
    }

    /// Whether `f:avif` can be served (built with `LUMEN_HEIF=1`).
    public static var isAVIFAvailable: Bool {
        #if LUMEN_HEIF
        true
        #else
        false
        #endif
    }
}

/// Why a server did not start.
public enum ServerError: Error, Sendable, CustomStringConvertible {
    case invalidListenAddress(String)
    case cannotListen(String, errno: Int32)
    case unsigned
    case invalidConfiguration(String)

    public var description: String {
        switch self {
        case .invalidListenAddress(let address): "not an IP address and port: \(address)"
        case .cannotListen(let address, let code): "cannot listen on \(address): \(String(cString: strerror(code)))"
        case .unsigned: "no signing key: give --key and --salt (or LUMEN_KEY, LUMEN_SALT), or --allow-unsigned"
        case .invalidConfiguration(let reason): reason
        }
    }
}
