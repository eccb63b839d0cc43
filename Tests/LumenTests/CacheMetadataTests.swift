import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import Lumen
import LumenTestSupport

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
        #expect(CacheControl(header: "max-age=99999999999999999999999").maxAge == 2_147_483_648)
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

    /// The other ways a response states its freshness (headers, age in seconds, expected
    /// freshness), TTL one day, received at `t0`. They were ignored: an entry the server said
    /// had expired (`Expires` past or `0`, `Age` beyond `max-age`, `Vary: *`) was served from
    /// disk for the whole TTL without asking.
    static let otherFreshnessCases: [([String: String], TimeInterval, Bool)] = {
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let date = LoopbackServer.httpDate(t0)
        return [
            (["Expires": "Thu, 01 Jan 1970 00:00:00 GMT"], 0, false),
            (["Expires": "0"], 0, false),  // invalid: already expired
            (["Expires": "Sunday, 06-Nov-94 08:49:37 GMT"], 0, false),  // not IMF-fixdate: counted as past
            (["Expires": LoopbackServer.httpDate(t0 + 600), "Date": date], 599, true),
            (["Expires": LoopbackServer.httpDate(t0 + 600), "Date": date], 600, false),
            (["Expires": LoopbackServer.httpDate(t0 + 600)], 599, true),  // no Date: from arrival
            (["Expires": "Thu, 01 Jan 2099 00:00:00 GMT"], 86_399, true),  // never past the TTL
            (["Expires": "0", "Cache-Control": "max-age=600"], 10, true),  // max-age wins
            (["Cache-Control": "max-age=60", "Age": "3600"], 0, false),
            (["Cache-Control": "max-age=600", "Age": "100"], 499, true),
            (["Cache-Control": "max-age=600", "Age": "100"], 500, false),
            (["Cache-Control": "max-age=600", "Age": "junk"], 599, true),
            (["Cache-Control": "max-age=600", "Vary": "*"], 0, false),
            (["Cache-Control": "max-age=600", "Vary": "Accept-Encoding"], 599, true),
            (["Cache-Control": "max-age=99999999999999999999999"], 3600, true),  // overflow: 2^31 s
        ]
    }()

    @Test(arguments: otherFreshnessCases)
    func freshnessFromOtherHeaders(headers: [String: String], age: TimeInterval, fresh: Bool) {
        let m = CacheMetadata(headers: headers, now: t0)
        #expect(m.isFresh(now: t0 + age, ttl: day) == fresh)
    }

    @Test func a304WithAPastExpiresLeavesTheEntryStale() {
        let m = CacheMetadata(headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60"], now: t0)
        let renewed = m.renewed(withHeaders: ["Expires": "0"], now: t0 + 120)
        #expect(!renewed.isFresh(now: t0 + 120, ttl: day))
        // A 304 stating no freshness keeps the stored directives.
        #expect(m.renewed(withHeaders: ["ETag": "\"v1\""], now: t0 + 120).isFresh(now: t0 + 150, ttl: day))
    }

    @Test func parsesIMFFixdateOnly() {
        #expect(CacheMetadata.parseHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT") == Date(timeIntervalSince1970: 784_111_777))
        #expect(CacheMetadata.parseHTTPDate(LoopbackServer.httpDate(t0)) == t0)
        for text in ["", "0", "-1", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
                     "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun Nov  6 08:49:37 1994"] {
            #expect(CacheMetadata.parseHTTPDate(text) == nil, "\(text)")
        }
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
