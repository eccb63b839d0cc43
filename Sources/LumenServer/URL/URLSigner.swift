import CCrypto
import Foundation

/// Signs and checks image paths: the signature segment is the unpadded base64url of
/// HMAC-SHA256, keyed with ``key``, over ``salt`` followed by the path after the signature
/// segment exactly as sent (`/{options}/{source}`).
///
/// ```swift
/// let signer = try URLSigner(keyHex: "736563726574", saltHex: "68656c6c6f")
/// let path = signer.path(options: "w:256,h:256", source: URL(string: "https://a.example/p.jpg")!)
/// // "/<signature>/w:256,h:256/plain/https%3A%2F%2Fa.example%2Fp.jpg"
/// ```
public struct URLSigner: Sendable, Hashable {
    /// The HMAC key and the salt, as bytes. Never printed: `description` hides them.
    public let key: [UInt8]
    public let salt: [UInt8]

    public struct InvalidHex: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// A signer from hex text (`--key`, `--salt`). An empty key is refused.
    public init(keyHex: String, saltHex: String) throws(InvalidHex) {
        guard let key = Self.bytes(hex: keyHex), !key.isEmpty else {
            throw InvalidHex(description: "the key must be non-empty hex (an even number of 0-9, a-f)")
        }
        guard let salt = Self.bytes(hex: saltHex) else {
            throw InvalidHex(description: "the salt must be hex (an even number of 0-9, a-f)")
        }
        self.key = key
        self.salt = salt
    }

    /// The signature segment for `signedPath` (`/{options}/{source}`).
    public func signature(for signedPath: String) -> String {
        var message = salt
        message.append(contentsOf: Array(signedPath.utf8))
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        _ = key.withUnsafeBufferPointer { k in
            message.withUnsafeBufferPointer { m in
                HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), m.baseAddress, m.count, &digest, &length)
            }
        }
        return Base64URL.encode(Array(digest.prefix(Int(length))))
    }

    /// Whether `signature` is this signer's for `signedPath`, compared in constant time.
    public func isValid(_ signature: String, for signedPath: String) -> Bool {
        Self.constantTimeEqual(Array(self.signature(for: signedPath).utf8), Array(signature.utf8))
    }

    /// The whole path to request: signature, options, and `source` as `plain/` +
    /// percent-encoded (or `b64/` + unpadded base64url with `base64`).
    public func path(options: String, source: String, base64: Bool = false) -> String {
        let signed = "/" + options + "/" + Self.sourceSegment(source, base64: base64)
        return "/" + signature(for: signed) + signed
    }

    /// The unsigned path (signature segment `_`), for a server run with `--allow-unsigned`.
    public static func unsignedPath(options: String, source: String, base64: Bool = false) -> String {
        "/_/" + options + "/" + sourceSegment(source, base64: base64)
    }

    /// `plain/` + every byte but unreserved characters percent-encoded, or `b64/` + base64url.
    public static func sourceSegment(_ source: String, base64: Bool) -> String {
        if base64 { return "b64/" + Base64URL.encode(Array(source.utf8)) }
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return "plain/" + (source.addingPercentEncoding(withAllowedCharacters: unreserved) ?? source)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in a.indices { difference |= a[i] ^ b[i] }
        return difference == 0
    }

    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var i = 0
        while i < digits.count {
            guard let high = nibble(digits[i]), let low = nibble(digits[i + 1]) else { return nil }
            bytes.append(high << 4 | low)
            i += 2
        }
        return bytes
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension URLSigner: CustomStringConvertible {
    public var description: String { "URLSigner(key: <\(key.count) bytes>, salt: <\(salt.count) bytes>)" }
}

/// Unpadded base64url (RFC 4648 §5).
enum Base64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// `nil` for padding, characters outside the alphabet, or an impossible length.
    static func decode(_ text: String) -> [UInt8]? {
        guard text.utf8.allSatisfy({ c in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(c) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(c)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
        }), text.utf8.count % 4 != 1 else { return nil }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        return Data(base64Encoded: standard).map(Array.init)
    }
}
