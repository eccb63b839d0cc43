import Foundation

extension ImagePipeline {
    /// When a failed download is tried again, and how long the fetch waits before it does.
    ///
    /// Only the fetch stage retries, while the fetch still has subscribers; the subscribers see
    /// one outcome (the last attempt's). Before retry *n* the fetch waits the larger of
    /// ``backoff``'s delay for *n* and the failing response's `Retry-After` (delta-seconds or
    /// an HTTP date), the latter capped at ``maximumRetryAfter``. The wait runs in the fetch's
    /// download slot (a waiting fetch counts against the data-loading queue's limit) and is
    /// cancellable: when the fetch's last subscriber leaves, the wait ends at once and the
    /// fetch is cancelled without another attempt. Retries and waits are counted in
    /// ``ImagePipeline/Metrics/retries``, ``ImagePipeline/Metrics/retryWaitSeconds`` and
    /// ``ImagePipeline/Metrics/retryWaitsCancelled``.
    ///
    /// ```swift
    /// configuration.retryPolicy = .init(maximumAttempts: 4, backoff: .exponential())
    /// ```
    public struct RetryPolicy: Sendable {
        /// Total attempts including the first; 1 means no retries.
        public var maximumAttempts: Int
        /// Whether a failure may be retried. Never asked about cancellation.
        public var shouldRetry: @Sendable (ImagePipeline.Error) -> Bool
        /// The wait before each retry when the failure names none of its own. Default
        /// ``Backoff/immediate``.
        public var backoff: Backoff
        /// The longest wait a response's `Retry-After` can ask for, in seconds: a longer one
        /// waits this long. 0 ignores `Retry-After`. Default 60.
        public var maximumRetryAfter: TimeInterval
        /// Waits the given number of seconds; it must return or throw promptly when the calling
        /// task is cancelled (the fetch checks for cancellation after it, either way). Tests
        /// inject one that records the delays or suspends until released. Default
        /// `Task.sleep(for:)`.
        public var sleep: @Sendable (TimeInterval) async throws -> Void
        /// "Now", for `Retry-After` given as an HTTP date. Default ``CacheClock/system``.
        public var clock: CacheClock

        /// Creates a policy that makes up to `maximumAttempts` attempts, retrying the failures
        /// `shouldRetry` accepts after the waits `backoff` and `Retry-After` give.
        ///
        /// - Parameters:
        ///   - maximumAttempts: total attempts including the first; at least 1.
        ///   - backoff: the wait before each retry; the default, ``Backoff/immediate``, retries
        ///     at once (unless the response asks for a wait with `Retry-After`).
        ///   - maximumRetryAfter: the cap on a `Retry-After` wait, in seconds; 0 ignores
        ///     `Retry-After`. Default 60.
        ///   - shouldRetry: whether a failure may be retried; the default is
        ///     ``isTransient(_:)``: transport errors, bodies cut short, 408, 429 and 5xx —
        ///     never a 404 or 403, nor an error of the caller's own, which a second attempt
        ///     would only repeat.
        public init(
            maximumAttempts: Int,
            backoff: Backoff = .immediate,
            maximumRetryAfter: TimeInterval = 60,
            shouldRetry: @escaping @Sendable (ImagePipeline.Error) -> Bool = RetryPolicy.isTransient
        ) {
            precondition(maximumAttempts >= 1, "RetryPolicy: maximumAttempts must be at least 1")
            precondition(maximumRetryAfter >= 0 && !maximumRetryAfter.isNaN, "RetryPolicy: maximumRetryAfter must not be negative")
            self.maximumAttempts = maximumAttempts
            self.shouldRetry = shouldRetry
            self.backoff = backoff
            self.maximumRetryAfter = maximumRetryAfter
            self.sleep = { seconds in try await Task.sleep(for: .seconds(seconds)) }
            self.clock = .system
        }

        /// No retries.
        public static let none = RetryPolicy(maximumAttempts: 1) { _ in false }

        /// The wait before retry number `retry` (1 for the first retry) after `error`, in
        /// seconds: the larger of ``backoff``'s delay (jittered with `random`, in 0…1) and
        /// `error`'s `Retry-After` as of `now`, capped at ``maximumRetryAfter``.
        public func delay(beforeRetry retry: Int, after error: ImagePipeline.Error, now: Date, random: Double) -> TimeInterval {
            let backoffDelay = backoff.delay(beforeRetry: retry, random: random)
            guard maximumRetryAfter > 0, let header = error.retryAfter,
                  let requested = Self.retryAfterSeconds(header, now: now) else { return backoffDelay }
            return max(backoffDelay, min(requested, maximumRetryAfter))
        }

        /// The seconds a `Retry-After` value asks for as of `now`: delta-seconds, or the time
        /// until an HTTP date (0 for one past); `nil` when it is neither.
        static func retryAfterSeconds(_ value: String, now: Date) -> TimeInterval? {
            let trimmed = value.trimmingCharacters(in: .whitespaces)
            if !trimmed.isEmpty, trimmed.utf8.allSatisfy({ (48...57).contains($0) }) {
                return TimeInterval(Int(trimmed) ?? Int.max) // too many digits: longer than any cap
            }
            guard let date = CacheMetadata.parseHTTPDate(trimmed) else { return nil }
            return max(0, date.timeIntervalSince(now))
        }

        /// Exponential backoff with jitter: before retry *n* the wait is
        /// `min(maximum, base × factor^(n-1))`, less a random part of up to `jitter` of it.
        public struct Backoff: Sendable, Hashable {
            /// The wait before the first retry, in seconds, before jitter.
            public var base: TimeInterval
            /// What each later wait is multiplied by; at least 1.
            public var factor: Double
            /// The cap on a wait, in seconds, before jitter.
            public var maximum: TimeInterval
            /// The fraction of each wait that is random, 0…1: with 1 ("full jitter") a wait is
            /// anywhere in (0, w], with 0 it is exactly w. Jitter keeps clients that failed
            /// together from retrying together.
            public var jitter: Double

            /// Creates a backoff; each parameter sets the property of the same name.
            public init(base: TimeInterval, factor: Double = 2, maximum: TimeInterval, jitter: Double = 1) {
                precondition(base >= 0 && maximum >= 0, "RetryPolicy.Backoff: waits must not be negative")
                precondition(factor >= 1, "RetryPolicy.Backoff: factor must be at least 1")
                precondition((0...1).contains(jitter), "RetryPolicy.Backoff: jitter must be in 0...1")
                self.base = base
                self.factor = factor
                self.maximum = maximum
                self.jitter = jitter
            }

            /// No wait: retry at once.
            public static let immediate = Backoff(base: 0, factor: 1, maximum: 0, jitter: 0)

            /// Exponential backoff; by default 0.5 s, 1 s, 2 s … up to 30 s, with full jitter.
            public static func exponential(
                base: TimeInterval = 0.5, factor: Double = 2, maximum: TimeInterval = 30, jitter: Double = 1
            ) -> Backoff {
                Backoff(base: base, factor: factor, maximum: maximum, jitter: jitter)
            }

            /// The wait before retry number `retry` (1 for the first), in seconds, with
            /// `random` (in 0…1, clamped) choosing the jittered part.
            public func delay(beforeRetry retry: Int, random: Double) -> TimeInterval {
                guard base > 0, maximum > 0 else { return 0 }
                let full = min(maximum, base * pow(factor, Double(max(0, retry - 1))))
                return full * (1 - jitter * min(max(random, 0), 1))
            }
        }

        /// Whether `error` is a failure that may pass:
        /// - a transport error: a `URLError` whose code says the network failed on the way
        ///   (timed out, connection refused, lost or not secured, host not found, offline, or
        ///   closed by the server before any answer — FoundationNetworking's
        ///   `badServerResponse` for libcurl's "empty reply"), however the loader or a
        ///   request's data closure threw it;
        /// - a body cut short of its announced length (``DataLoader/Error/incompleteBody(expected:received:)``);
        /// - an HTTP status of 408 (timeout), 429 (too many requests) or 5xx.
        ///
        /// Anything else is final: a 404 or 403, a malformed URL, a missing local file, an
        /// error of the caller's own (from a data closure or a custom loader) — a second
        /// attempt would only repeat it. Pass your own `shouldRetry` to widen it.
        @Sendable public static func isTransient(_ error: ImagePipeline.Error) -> Bool {
            guard error.code == .dataLoadingFailed else { return false }
            if let status = error.statusCode {
                return status == 408 || status == 429 || (500..<600).contains(status)
            }
            switch error.underlyingError {
            case let error as URLError: return transientURLErrorCodes.contains(error.code)
            case let error as DataLoader.Error:
                if case .incompleteBody = error { return true }
                return false
            default: return false
            }
        }

        /// `URLError` codes for failures on the way that a later attempt may not meet.
        static let transientURLErrorCodes: Set<URLError.Code> = [
            .timedOut, .cannotFindHost, .cannotConnectToHost, .networkConnectionLost, .dnsLookupFailed, .badServerResponse,
            .notConnectedToInternet, .secureConnectionFailed, .resourceUnavailable, .internationalRoamingOff,
            .callIsActive, .dataNotAllowed, .backgroundSessionWasDisconnected,
        ]
    }
}
