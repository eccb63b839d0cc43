import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The parsed `Cache-Control` directives that matter to a private image cache.
public struct CacheControl: Sendable, Hashable, Codable {
    /// `max-age`, in seconds; an unparsable or conflicting value counts as 0 (stale at once),
    /// one too large to represent as 2³¹ (RFC 9111 §1.2.2). In metadata read from a response
    /// (``CacheMetadata/init(headers:now:)``) it is the freshness the response had left when it
    /// arrived: without `max-age`, the lifetime its `Expires` gives, and less its `Age`.
    public var maxAge: Int?
    /// `no-store`: the response must not be written to any cache.
    public var noStore: Bool
    /// `no-cache`: a stored response must be revalidated before every use.
    public var noCache: Bool
    /// `immutable`: the representation never changes while fresh.
    public var immutable: Bool

    /// Creates directives; each parameter sets the property of the same name. The defaults
    /// are an empty header: no `max-age`, no flags.
    public init(maxAge: Int? = nil, noStore: Bool = false, noCache: Bool = false, immutable: Bool = false) {
        self.maxAge = maxAge
        self.noStore = noStore
        self.noCache = noCache
        self.immutable = immutable
    }

    /// What a delta-seconds value too large to represent counts as (RFC 9111 §1.2.2).
    static let overflowingDeltaSeconds = 2_147_483_648

    /// Parses a `Cache-Control` header value; unknown directives are ignored, directive names
    /// compare case-insensitively, quoted values are unquoted.
    public init(header: String?) {
        self.init()
        guard let header else { return }
        for part in header.split(separator: ",") {
            let directive = part.trimmingCharacters(in: .whitespaces)
            let pieces = directive.split(separator: "=", maxSplits: 1)
            guard let first = pieces.first else { continue }
            let name = first.trimmingCharacters(in: .whitespaces).lowercased()
            var value = pieces.count > 1 ? pieces[1].trimmingCharacters(in: .whitespaces) : nil
            if let v = value, v.count >= 2, v.hasPrefix("\""), v.hasSuffix("\"") {
                value = String(v.dropFirst().dropLast())
            }
            switch name {
            case "max-age":
                var parsed = value.flatMap { Int($0) }.map { max(0, $0) } ?? 0
                if let value, !value.isEmpty, value.utf8.allSatisfy({ (48...57).contains($0) }), Int(value) == nil {
                    parsed = Self.overflowingDeltaSeconds
                }
                // Two different max-age values: RFC 9111 says treat the response as stale.
                if let existing = maxAge, existing != parsed { maxAge = 0 } else { maxAge = parsed }
            case "no-store": noStore = true
            case "no-cache": noCache = true  // the qualified form (`no-cache="field"`) too: conservative
            case "immutable": immutable = true
            default: continue
            }
        }
    }
}

/// What a disk-cache entry remembers about the response its bytes came from: the validators
/// for a conditional request, the freshness directives, the content type and when it was
/// stored.
public struct CacheMetadata: Sendable, Hashable, Codable {
    /// The `ETag` validator, verbatim.
    public var etag: String?
    /// The `Last-Modified` validator, verbatim.
    public var lastModified: String?
    /// The parsed `Cache-Control` header.
    public var cacheControl: CacheControl
    /// The `Content-Type` header, verbatim.
    public var contentType: String?
    /// When the entry was stored or last renewed by a 304: the origin of its age.
    public var storedAt: Date

    /// Creates metadata; each parameter sets the property of the same name.
    public init(
        etag: String? = nil,
        lastModified: String? = nil,
        cacheControl: CacheControl = CacheControl(),
        contentType: String? = nil,
        storedAt: Date
    ) {
        self.etag = etag
        self.lastModified = lastModified
        self.cacheControl = cacheControl
        self.contentType = contentType
        self.storedAt = storedAt
    }

    /// Reads the metadata from response headers (names compare case-insensitively), stored at
    /// `now`.
    ///
    /// The freshness directives are `Cache-Control`'s, with the other ways a response states
    /// its freshness folded in (RFC 9111): without `max-age`, `Expires` gives the lifetime,
    /// from the response's `Date` (else `now`), and an invalid one (`0`, say) is already past;
    /// a response `Age` seconds old on arrival has that much less left; `Vary: *` is
    /// `no-cache` (the response depends on more than the request says: always revalidate).
    public init(headers: [String: String], now: Date) {
        let lookup = Self.caseInsensitive(headers)
        self.init(
            etag: lookup["etag"],
            lastModified: lookup["last-modified"],
            cacheControl: Self.freshness(lookup, now: now) ?? CacheControl(),
            contentType: lookup["content-type"],
            storedAt: now
        )
    }

    /// Reads the metadata from an HTTP response, stored at `now`.
    public init(response: HTTPURLResponse, now: Date) {
        self.init(headers: Self.headers(of: response), now: now)
    }

    /// `max-age` in seconds, if the response stated one.
    public var maxAge: Int? { cacheControl.maxAge }

    /// `false` when the response said `no-store`: such a response is never written to disk.
    public var isStorable: Bool { !cacheControl.noStore }

    /// Whether the entry may be used without asking the server.
    ///
    /// With `respectsHTTPCaching` (the default): `no-cache` is never fresh (always revalidate);
    /// `immutable` is fresh until the TTL; otherwise `max-age`, when present, bounds freshness
    /// (never past the TTL, which bounds how long anything stays on disk). Without `max-age`,
    /// an entry with a `Last-Modified` (an IMF-fixdate before `storedAt`) is fresh for
    /// RFC 9111 §4.2.2's heuristic: `heuristicFraction` of its age when stored
    /// (`storedAt - lastModified`), at most `maximumHeuristicLifetime` and the TTL; one with no
    /// usable `Last-Modified` follows the TTL alone. Without `respectsHTTPCaching`, the TTL
    /// alone decides. The age is `now - storedAt`, clamped at 0 if the clock went backwards.
    public func isFresh(
        now: Date, ttl: TimeInterval, respectsHTTPCaching: Bool = true,
        heuristicFraction: Double = 0.1, maximumHeuristicLifetime: TimeInterval = 86_400
    ) -> Bool {
        let age = max(0, now.timeIntervalSince(storedAt))
        guard respectsHTTPCaching else { return age < ttl }
        if cacheControl.noCache { return false }
        if cacheControl.immutable { return age < ttl }
        if let maxAge = cacheControl.maxAge { return age < min(TimeInterval(maxAge), ttl) }
        if let lifetime = heuristicLifetime(fraction: heuristicFraction, maximum: maximumHeuristicLifetime) {
            return age < min(lifetime, ttl)
        }
        return age < ttl
    }

    /// The heuristic freshness lifetime from ``lastModified``: `fraction` of the time from it
    /// to ``storedAt``, at most `maximum`; `nil` when there is no parsable `Last-Modified`.
    func heuristicLifetime(fraction: Double, maximum: TimeInterval) -> TimeInterval? {
        guard let lastModified, let modified = Self.parseHTTPDate(lastModified.trimmingCharacters(in: .whitespaces)) else {
            return nil
        }
        let sinceModified = max(0, storedAt.timeIntervalSince(modified))
        return min(max(0, fraction) * sinceModified, max(0, maximum))
    }

    /// The headers that turn a request into a conditional one: `If-None-Match` from the ETag,
    /// `If-Modified-Since` from Last-Modified; empty when the entry has no validator.
    public var conditionalHeaders: [String: String] {
        var headers: [String: String] = [:]
        if let etag { headers["If-None-Match"] = etag }
        if let lastModified { headers["If-Modified-Since"] = lastModified }
        return headers
    }

    /// The metadata after a `304 Not Modified`: validators and directives the 304 carries
    /// replace the stored ones (RFC 9111 §4.3.4; directives read as ``init(headers:now:)``
    /// reads them), and the entry's age restarts at `now`.
    public func renewed(withHeaders headers: [String: String], now: Date) -> CacheMetadata {
        let lookup = Self.caseInsensitive(headers)
        var copy = self
        if let etag = lookup["etag"] { copy.etag = etag }
        if let lastModified = lookup["last-modified"] { copy.lastModified = lastModified }
        if let cacheControl = Self.freshness(lookup, now: now) { copy.cacheControl = cacheControl }
        if let contentType = lookup["content-type"] { copy.contentType = contentType }
        copy.storedAt = now
        return copy
    }

    /// The metadata after a `304 Not Modified` response (see ``renewed(withHeaders:now:)``).
    public func renewed(with response: HTTPURLResponse, now: Date) -> CacheMetadata {
        renewed(withHeaders: Self.headers(of: response), now: now)
    }

    /// Whether a `304 Not Modified` speaks of the stored bytes, so that it may renew them: it
    /// carries no ETag, or the entry has none, or the two match under weak comparison
    /// (`W/"x"` and `"x"` match). A 304 naming another ETag says that the current
    /// representation is another one: RFC 9111 §4.3.4 forbids renewing the stored one with it.
    func isConfirmed(byNotModified response: URLResponse?) -> Bool {
        guard let etag, let newTag = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "ETag") else { return true }
        func opaque(_ tag: String) -> Substring {
            let trimmed = tag.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("W/") ? trimmed.dropFirst(2) : Substring(trimmed)
        }
        return opaque(etag) == opaque(newTag)
    }

    /// The freshness directives of headers `lookup` (lowercased names) received at `now`, or
    /// `nil` when they state none (no `Cache-Control`, `Expires` or `Vary`). See
    /// ``init(headers:now:)``.
    private static func freshness(_ lookup: [String: String], now: Date) -> CacheControl? {
        let expires = lookup["expires"]
        let vary = lookup["vary"]
        guard lookup["cache-control"] != nil || expires != nil || vary != nil else { return nil }
        var directives = CacheControl(header: lookup["cache-control"])
        if directives.maxAge == nil, let expires {
            let origin = lookup["date"].flatMap(parseHTTPDate) ?? now
            let lifetime = parseHTTPDate(expires).map { $0.timeIntervalSince(origin) } ?? 0
            directives.maxAge = Int(min(max(0, lifetime), Double(CacheControl.overflowingDeltaSeconds)).rounded(.down))
        }
        if let maxAge = directives.maxAge,
           let age = lookup["age"].flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }), age > 0 {
            directives.maxAge = max(0, maxAge - age)
        }
        if let vary, vary.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == "*" }) {
            directives.noCache = true
        }
        return directives
    }

    /// Parses an HTTP date in its preferred format (IMF-fixdate: `Sun, 06 Nov 1994 08:49:37
    /// GMT`); `nil` for anything else, which an `Expires` then counts as already past.
    static func parseHTTPDate(_ text: String) -> Date? {
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
              parts[1].count == 2, let day = Int(parts[1]), (1...31).contains(day),
              let month = months.firstIndex(where: { $0 == parts[2] }),
              parts[3].count == 4, let year = Int(parts[3]) else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 }),
              let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second) else { return nil }
        var fields = tm()
        fields.tm_year = Int32(year - 1900)
        fields.tm_mon = Int32(month)
        fields.tm_mday = Int32(day)
        fields.tm_hour = Int32(hour)
        fields.tm_min = Int32(minute)
        fields.tm_sec = Int32(second)
        return Date(timeIntervalSince1970: TimeInterval(timegm(&fields)))
    }

    private static func caseInsensitive(_ headers: [String: String]) -> [String: String] {
        var lookup: [String: String] = [:]
        for (name, value) in headers { lookup[name.lowercased()] = value }
        return lookup
    }

    private static func headers(of response: HTTPURLResponse) -> [String: String] {
        var headers: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return headers
    }
}

/// What the pipeline writes to the disk cache.
///
/// `data(for:)` never encodes: it returns the original bytes, and under every policy the
/// original bytes are what it reads and writes. Encoding happens only when a processed image
/// is produced under `.storeEncodedImages` or `.storeAll`.
public enum DataCachePolicy: Sendable, Hashable {
    /// The original downloaded bytes only (the default): one download backs every size and
    /// processing an image is shown with; decoding and processing run again on a disk hit.
    case storeOriginalData
    /// Processed images, encoded, under a key that includes the processors, instead of the
    /// original bytes.
    case storeEncodedImages
    /// Both the original bytes and the encoded processed images.
    case storeAll
}
