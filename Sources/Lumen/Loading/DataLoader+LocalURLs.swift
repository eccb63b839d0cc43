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

/// `file:` and `data:` URLs, loaded without the network.
extension DataLoader {
    /// Loads `url` when it is local — a `file:` URL (refused with ``Error/localFileAccessDenied(_:)``
    /// unless `allowsFiles`) or a `data:` URL — and returns its response; nil for any other
    /// scheme, which the caller loads over the network. Both loaders' local branch.
    static func loadLocally(
        _ url: URL, allowsFiles: Bool,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse? {
        switch url.scheme?.lowercased() {
        case "file":
            guard allowsFiles else { throw Error.localFileAccessDenied(url) }
            return try await loadFile(url, didReceive: didReceive)
        case "data":
            return try loadDataURL(url, didReceive: didReceive)
        default:
            return nil
        }
    }

    /// Reads a file in chunks of `fileChunkSize` bytes, checking for cancellation between
    /// chunks. The response is a plain `URLResponse` with the file's size and a MIME type
    /// guessed from its extension. The reads are blocking but short (one chunk each).
    static func loadFile(
        _ url: URL,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) async throws -> URLResponse {
        try Task.checkCancellation()
        // `file://host/path` names a file on `host` (RFC 8089): only this machine's files are
        // read — no host, or `localhost` — never a local file of the same path.
        if let host = url.host, !host.isEmpty, host.lowercased() != "localhost" {
            throw Error.fileUnreadable(url, reason: "names a file on another host (\(host)), not on this machine")
        }
        let path = url.path
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw Error.fileNotFound(url)
        }
        guard !isDirectory.boolValue else { throw Error.fileUnreadable(url, reason: "is a directory") }
        // Opened without blocking and checked on the descriptor: a FIFO would make the open wait
        // for a writer (forever), and it, a socket or a device is no file to read an image from.
        let fd = POSIXFile.openForReading(path)
        guard fd >= 0 else { throw Error.fileUnreadable(url, reason: String(cString: strerror(errno))) }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw Error.fileUnreadable(url, reason: String(cString: strerror(errno))) }
        guard !POSIXFile.isSpecial(st) else {
            throw Error.fileUnreadable(url, reason: "not a regular file (a FIFO, socket or device)")
        }
        let size = Int64(st.st_size)
        let response = URLResponse(
            url: url, mimeType: mimeType(forPathExtension: url.pathExtension),
            expectedContentLength: Int(size), textEncodingName: nil
        )
        while true {
            try Task.checkCancellation()
            let chunk: Data?
            do {
                chunk = try handle.read(upToCount: fileChunkSize)
            } catch {
                throw Error.fileUnreadable(url, reason: String(describing: error))
            }
            guard let chunk, !chunk.isEmpty else { break }
            try didReceive(chunk, response)
        }
        return response
    }

    /// Decodes a `data:[<media type>][;base64],<payload>` URL (RFC 2397) and hands the bytes
    /// to `didReceive` in one chunk (none when empty).
    static func loadDataURL(
        _ url: URL,
        didReceive: @Sendable (Data, URLResponse) throws -> Void
    ) throws -> URLResponse {
        try Task.checkCancellation()
        let decoded = try decodeDataURL(url.absoluteString)
        let response = URLResponse(
            url: url, mimeType: decoded.mimeType,
            expectedContentLength: decoded.data.count, textEncodingName: decoded.charset
        )
        if !decoded.data.isEmpty { try didReceive(decoded.data, response) }
        return response
    }

    /// The parts of a `data:` URL.
    struct DecodedDataURL: Equatable {
        var data: Data
        var mimeType: String
        var charset: String?
    }

    /// Parses a `data:` URL string. The payload may be percent-encoded in both forms; base64
    /// may omit its padding and contain whitespace.
    static func decodeDataURL(_ string: String) throws -> DecodedDataURL {
        guard string.lowercased().hasPrefix("data:"), let comma = string.firstIndex(of: ",") else {
            throw Error.invalidDataURL
        }
        let header = string[string.index(string.startIndex, offsetBy: 5)..<comma]
        var parameters = header.split(separator: ";", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        var isBase64 = false
        if let last = parameters.last, last.lowercased() == "base64" {
            isBase64 = true
            parameters.removeLast()
        }
        var mimeType = "text/plain"
        var charset: String? = "US-ASCII"
        if let type = parameters.first, !type.isEmpty {
            guard type.contains("/") else { throw Error.invalidDataURL }
            mimeType = type.lowercased()
            charset = nil
        }
        for parameter in parameters.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            if pair.count == 2, pair[0].lowercased() == "charset" { charset = String(pair[1]) }
        }
        guard let payload = percentDecode(string[string.index(after: comma)...].utf8) else {
            throw Error.invalidDataURL
        }
        guard isBase64 else { return DecodedDataURL(data: payload, mimeType: mimeType, charset: charset) }

        var base64 = payload.filter { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) }
        if base64.count % 4 != 0 { base64.append(contentsOf: repeatElement(UInt8(ascii: "="), count: 4 - base64.count % 4)) }
        guard let data = Data(base64Encoded: base64) else { throw Error.invalidDataURL }
        return DecodedDataURL(data: data, mimeType: mimeType, charset: charset)
    }

    /// Decodes `%XX` escapes into bytes; nil on a malformed escape.
    private static func percentDecode(_ bytes: Substring.UTF8View) -> Data? {
        var output = Data()
        output.reserveCapacity(bytes.count)
        var iterator = bytes.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                output.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            output.append(high << 4 | low)
        }
        return output
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// A MIME type for common image (and a few other) file extensions.
    static func mimeType(forPathExtension pathExtension: String) -> String {
        switch pathExtension.lowercased() {
        case "jpg", "jpeg", "jpe": "image/jpeg"
        case "png": "image/png"
        case "gif": "image/gif"
        case "webp": "image/webp"
        case "avif": "image/avif"
        case "heic": "image/heic"
        case "heif": "image/heif"
        case "bmp": "image/bmp"
        case "tif", "tiff": "image/tiff"
        case "ico": "image/x-icon"
        case "svg": "image/svg+xml"
        case "json": "application/json"
        case "txt": "text/plain"
        default: "application/octet-stream"
        }
    }
}
