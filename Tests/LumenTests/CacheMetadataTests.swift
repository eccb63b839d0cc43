import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import Lumen

@Suite(.timeLimit(.minutes(1)))
struct CacheMetadataTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let day: TimeInterval = 24 * 3600

    @Test func parsesCacheControlDirectives() {
        let c = CacheControl(header: "public, MAX-AGE=\"600\", immutable, no-cache, no-store, x-unknown=1")
        #expect(c == CacheControl(maxAge: 600, noStore: true, noCache: true, immutable: true))
        #expect(CacheControl(header: nil) == CacheControl())
        #expect(CacheControl(header: "max-age=abc").maxAge == 0)
        #expect(CacheControl(header: "max-age=-5").maxAge == 0)
        #expect(CacheControl(header: "max-age=60, max-age=120").maxAge == 0)
        #expect(CacheControl(header: "max-age=60, max-age=60").maxAge == 60)
        #expect(CacheControl(header: "no-cache=\"Set-Cookie\"").noCache)
    }

    @Test func readsAResponse() throws {
        let url = try #require(URL(string: "https://example.com/a.jpg"))
        let response = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: [
            "ETag": "\"abc\"",
            "Last-Modified": "Wed, 21 Oct 2015 07:28:00 GMT",
            "Cache-Control": "max-age=3600",
            "Content-Type": "image/jpeg",
        ]))
        let m = CacheMetadata(response: response, now: t0)
        #expect(m.etag == "\"abc\"")
        #expect(m.lastModified == "Wed, 21 Oct 2015 07:28:00 GMT")
        #expect(m.maxAge == 3600)
        #expect(m.contentType == "image/jpeg")
        #expect(m.storedAt == t0)
        #expect(m.isStorable)
        #expect(m.conditionalHeaders == ["If-None-Match": "\"abc\"", "If-Modified-Since": "Wed, 21 Oct 2015 07:28:00 GMT"])
    }

    @Test func noStoreIsNotStorable() {
        #expect(!CacheMetadata(headers: ["cache-control": "no-store"], now: t0).isStorable)
    }

    @Test func noValidatorsMeansNoConditionalHeaders() {
        #expect(CacheMetadata(storedAt: t0).conditionalHeaders.isEmpty)
        #expect(CacheMetadata(etag: "\"e\"", storedAt: t0).conditionalHeaders == ["If-None-Match": "\"e\""])
    }

    /// (Cache-Control, age in seconds, respects HTTP caching, expected freshness) with a TTL of
    /// one day.
    static let freshnessCases: [(String?, TimeInterval, Bool, Bool)] = [
        (nil, 0, true, true),
        (nil, 86_399, true, true),
        (nil, 86_400, true, false),  // TTL alone without max-age
        ("max-age=60", 59, true, true),
        ("max-age=60", 60, true, false),
        ("max-age=60", 3600, false, true),  // HTTP semantics off: TTL only
        ("max-age=31536000", 86_400, true, false),  // never past the TTL
        ("max-age=0", 0, true, false),
        ("no-cache", 0, true, false),  // always revalidate
        ("no-cache, max-age=600", 1, true, false),
        ("no-cache", 10, false, true),
        ("immutable, max-age=60", 3600, true, true),  // immutable: fresh until the TTL
        ("immutable", 86_400, true, false),
    ]

    @Test(arguments: freshnessCases)
    func freshness(cacheControl: String?, age: TimeInterval, respectsHTTP: Bool, fresh: Bool) {
        var headers: [String: String] = [:]
        if let cacheControl { headers["Cache-Control"] = cacheControl }
        let m = CacheMetadata(headers: headers, now: t0)
        #expect(m.isFresh(now: t0 + age, ttl: day, respectsHTTPCaching: respectsHTTP) == fresh)
    }

    @Test func clockGoingBackwardsCountsAsAgeZero() {
        let m = CacheMetadata(headers: ["Cache-Control": "max-age=60"], now: t0)
        #expect(m.isFresh(now: t0 - 1000, ttl: day))
    }

    @Test func renewalTakesHeadersFromThe304AndRestartsTheAge() {
        let m = CacheMetadata(headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60", "Content-Type": "image/png"], now: t0)
        let later = t0 + 120
        #expect(!m.isFresh(now: later, ttl: day))
        let renewed = m.renewed(withHeaders: ["etag": "\"v2\"", "Cache-Control": "max-age=600"], now: later)
        #expect(renewed.etag == "\"v2\"")
        #expect(renewed.maxAge == 600)
        #expect(renewed.contentType == "image/png")  // kept: the 304 did not send it
        #expect(renewed.storedAt == later)
        #expect(renewed.isFresh(now: later + 599, ttl: day))
        #expect(m.renewed(withHeaders: [:], now: later).etag == "\"v1\"")
    }

    @Test func metadataRoundTripsThroughCodable() throws {
        let m = CacheMetadata(etag: "\"x\"", lastModified: "lm", cacheControl: CacheControl(maxAge: 5, immutable: true), contentType: "image/webp", storedAt: t0 + 0.123)
        let decoded = try JSONDecoder().decode(CacheMetadata.self, from: JSONEncoder().encode(m))
        #expect(decoded == m)
    }
}
