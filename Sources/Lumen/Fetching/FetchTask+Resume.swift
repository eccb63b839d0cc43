import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Resuming a cut download (issue 23): a transfer that ends early after some bytes, when the
/// retry policy retries it, asks for the rest with `Range: bytes=N-` and `If-Range` carrying
/// the validator the first response gave. A `206` whose `Content-Range` continues exactly at
/// byte N of a representation of the same length is appended; a `200` (the server ignores
/// ranges, or the representation changed and `If-Range` did not match) starts the body over; a
/// `206` that does not continue where the bytes stopped, or a `416`, is abandoned and the next
/// attempt loads the whole body again. Either way the bytes handed on are the server's, in order.
///
/// Only plain transfers resume: a `GET` answered `200` with a strong `ETag` or a
/// `Last-Modified`, no `Content-Encoding` (a range counts encoded bytes; the loader hands on
/// decoded ones) and no `Accept-Ranges: none`.
struct PartialBody: Sendable {
    /// The bytes received so far, in order.
    let data: Data
    /// The response that started the body: the whole representation's headers, which the
    /// final bytes are cached and decoded under.
    let response: HTTPURLResponse
    /// The `If-Range` value: the strong `ETag`, else `Last-Modified`.
    let validator: String
    /// The representation's length, when the first response declared it.
    let totalLength: Int64?

    /// The bytes and response of an attempt that failed after receiving `data` under
    /// `response`, when a later attempt can continue them; `nil` when it cannot.
    init?(data: Data, response: URLResponse?, request: URLRequest) {
        guard !data.isEmpty, let http = response as? HTTPURLResponse, http.statusCode == 200,
              (request.httpMethod ?? "GET").uppercased() == "GET"
        else { return nil }
        if let encoding = http.value(forHTTPHeaderField: "Content-Encoding")?.trimmingCharacters(in: .whitespaces),
           !encoding.isEmpty, encoding.lowercased() != "identity" {
            return nil
        }
        if http.value(forHTTPHeaderField: "Accept-Ranges")?.trimmingCharacters(in: .whitespaces).lowercased() == "none" {
            return nil
        }
        let etag = http.value(forHTTPHeaderField: "ETag")?.trimmingCharacters(in: .whitespaces)
        if let etag, etag.hasPrefix("\""), etag.hasSuffix("\""), etag.count >= 2 {
            validator = etag // strong: If-Range needs a strong validator (RFC 9110 §13.1.5)
        } else if let lastModified = http.value(forHTTPHeaderField: "Last-Modified")?.trimmingCharacters(in: .whitespaces),
                  !lastModified.isEmpty {
            validator = lastModified
        } else {
            return nil
        }
        let declared = DataLoader.declaredLength(http)
        if declared > 0, Int64(data.count) >= declared { return nil } // nothing left to ask for
        self.data = data
        self.response = http
        self.totalLength = declared > 0 ? declared : nil
    }

    /// A partial body of the same representation, now `data` (these bytes and more).
    private init(data: Data, response: HTTPURLResponse, validator: String, totalLength: Int64?) {
        self.data = data
        self.response = response
        self.validator = validator
        self.totalLength = totalLength
    }

    /// These bytes grown to `data`, which starts with them: the same representation, further on.
    func grown(to data: Data) -> PartialBody {
        PartialBody(data: data, response: response, validator: validator, totalLength: totalLength)
    }

    /// `request` asking for the rest: `Range` from the first missing byte, `If-Range` with the
    /// validator. Conditional headers of a revalidation are dropped: the answer must be this
    /// representation's rest or a whole new body, never a `304`.
    func rangeRequest(_ request: URLRequest) -> URLRequest {
        var request = request
        request.setValue(nil, forHTTPHeaderField: "If-None-Match")
        request.setValue(nil, forHTTPHeaderField: "If-Modified-Since")
        request.setValue("bytes=\(data.count)-", forHTTPHeaderField: "Range")
        request.setValue(validator, forHTTPHeaderField: "If-Range")
        return request
    }

    /// How a response to ``rangeRequest(_:)`` relates to these bytes.
    enum Answer: Equatable {
        /// `206` continuing exactly at `data.count`: append its body.
        case continues
        /// `200`: the whole body again (ranges ignored, or the representation changed).
        case startsOver
        /// Anything else: a `206` that starts elsewhere, ends before the end, names another
        /// length or none; drop these bytes and load the whole body again.
        case mismatched
    }

    func answer(to response: URLResponse) -> Answer {
        guard let http = response as? HTTPURLResponse else { return .mismatched }
        if http.statusCode == 200 { return .startsOver }
        guard http.statusCode == 206,
              let range = http.value(forHTTPHeaderField: "Content-Range").flatMap(ContentRange.init),
              range.first == Int64(data.count), range.last + 1 == range.complete
        else { return .mismatched }
        if let totalLength, totalLength != range.complete { return .mismatched }
        return .continues
    }
}

/// A `Content-Range: bytes FIRST-LAST/COMPLETE` value (RFC 9110 §14.4) with a known length.
struct ContentRange: Equatable {
    let first: Int64
    let last: Int64
    let complete: Int64

    init?(_ value: String) {
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let bounds = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2,
              let first = Int64(bounds[0]), let last = Int64(bounds[1]), let complete = Int64(halves[1]),
              first >= 0, last >= first, complete > last
        else { return nil }
        (self.first, self.last, self.complete) = (first, last, complete)
    }
}

/// Why a resumed attempt was given up: its answer did not continue the bytes received.
struct ResumeMismatch: Error, CustomStringConvertible {
    let status: Int
    let contentRange: String?
    var description: String {
        "a range request was answered \(status)" + (contentRange.map { " with Content-Range \($0)" } ?? " without a Content-Range")
            + ", which does not continue the bytes received"
    }
}
