import CCrypto
import Foundation

/// SHA-256 through OpenSSL's libcrypto (a maintained implementation; Lumen never writes a
/// cryptographic hash by hand). Used for disk-cache file names and credential fingerprints
/// (entry checksums, which only need to catch corruption, use the faster ``EntryChecksum``).
struct SHA256Digest: ~Copyable {
    private var context: OpaquePointer?

    init() {
        context = EVP_MD_CTX_new()
        if let context {
            if EVP_DigestInit_ex(context, EVP_sha256(), nil) != 1 {
                EVP_MD_CTX_free(context)
                self.context = nil
            }
        }
    }

    /// Feeds `bytes` into the digest.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let context, bytes.count > 0 else { return }
        if EVP_DigestUpdate(context, bytes.baseAddress, bytes.count) != 1 {
            EVP_MD_CTX_free(context)
            self.context = nil
        }
    }

    mutating func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    mutating func update(_ string: String) {
        var string = string
        string.withUTF8 { update(UnsafeRawBufferPointer($0)) }
    }

    deinit {
        if let context { EVP_MD_CTX_free(context) }
    }

    /// The 32-byte digest, or `nil` when libcrypto failed (out of memory).
    func finalize() -> [UInt8]? {
        guard let context else { return nil }
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = output.withUnsafeMutableBufferPointer {
            EVP_DigestFinal_ex(context, $0.baseAddress, &length)
        }
        guard ok == 1, length == 32 else { return nil }
        return Array(output.prefix(32))
    }

    /// The SHA-256 of `data` in one call.
    static func hash(_ data: Data) -> [UInt8]? {
        var digest = SHA256Digest()
        digest.update(data)
        return digest.finalize()
    }

    /// The lowercase hex SHA-256 of the UTF-8 bytes of `string`.
    static func hexHash(_ string: String) -> String {
        var digest = SHA256Digest()
        digest.update(string)
        // A failure here means libcrypto could not allocate 200 bytes: nothing sensible is left.
        guard let bytes = digest.finalize() else { preconditionFailure("SHA-256: libcrypto failed") }
        return hex(bytes)
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
