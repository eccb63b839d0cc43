/// An IPv4 or IPv6 address (its bytes), parsed from strict text: what a connection policy
/// compares, never a host name.
///
/// IPv4 is accepted only as a dotted quad of decimal numbers without leading zeros
/// (`"127.0.0.1"`): the spellings `inet_aton` and URL parsers also take (`"2130706433"`,
/// `"0x7f.1"`, `"0177.0.0.1"`) are nil, so that text which one reader takes for one address
/// and another for a different one never gets this far. IPv6 is RFC 4291 text (either case,
/// `::` once, a trailing dotted quad as in `"::ffff:127.0.0.2"`), optionally in brackets
/// (`"[::1]"`); zone indexes (`"fe80::1%eth0"`) are nil.
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// The address: IPv4 as a 32-bit, IPv6 as a 128-bit number, most significant byte first
    /// as on the wire.
    enum Storage: Hashable, Sendable {
        case v4(UInt32)
        case v6(UInt128)
    }

    let storage: Storage

    init(v4 value: UInt32) { storage = .v4(value) }
    init(v6 value: UInt128) { storage = .v6(value) }

    /// An address from its network-order bytes: 4 for IPv4, 16 for IPv6, else nil.
    init?<Bytes: Collection>(bytes: Bytes) where Bytes.Element == UInt8 {
        switch bytes.count {
        case 4: storage = .v4(bytes.reduce(0) { $0 << 8 | UInt32($1) })
        case 16: storage = .v6(bytes.reduce(0) { $0 << 8 | UInt128($1) })
        default: return nil
        }
    }

    /// Parses `text` (see the type's documentation for what is accepted).
    public init?(_ text: String) {
        var utf8 = Substring(text).utf8[...]
        if utf8.first == UInt8(ascii: "[") {
            guard utf8.last == UInt8(ascii: "]"), utf8.count >= 2 else { return nil }
            utf8 = utf8.dropFirst().dropLast()
            // Brackets are for IPv6 only, as in a URL.
            guard let value = Self.parseV6(utf8) else { return nil }
            storage = .v6(value)
        } else if let value = Self.parseV4(utf8) {
            storage = .v4(value)
        } else if let value = Self.parseV6(utf8) {
            storage = .v6(value)
        } else {
            return nil
        }
    }

    /// The IPv4 address itself, for an IPv4 address.
    var v4: UInt32? {
        if case .v4(let value) = storage { return value }
        return nil
    }

    /// The IPv4 address of a v4-mapped IPv6 address (`::ffff:a.b.c.d`).
    var mappedV4: UInt32? {
        guard case .v6(let value) = storage, value >> 32 == 0xffff else { return nil }
        return UInt32(truncatingIfNeeded: value)
    }

    /// Canonical text: a dotted quad, or RFC 5952 IPv6 (lowercase, no leading zeros, the
    /// longest run of two or more zero groups as `::`, the first of equal runs; v4-mapped
    /// addresses end in a dotted quad, `::ffff:127.0.0.2`).
    public var description: String {
        switch storage {
        case .v4(let value):
            return Self.dottedQuad(value)
        case .v6(let value):
            if let mapped = mappedV4 { return "::ffff:" + Self.dottedQuad(mapped) }
            let groups = (0..<8).map { UInt16(truncatingIfNeeded: value >> (112 - 16 * $0)) }
            // The longest run of zero groups, at least two long.
            var best: Range<Int>?
            var start: Int?
            for index in 0...8 {
                if index < 8, groups[index] == 0 {
                    if start == nil { start = index }
                } else if let first = start {
                    if index - first >= 2, index - first > (best?.count ?? 0) { best = first..<index }
                    start = nil
                }
            }
            let hex = groups.map { String($0, radix: 16) }
            guard let best else { return hex.joined(separator: ":") }
            return hex[..<best.lowerBound].joined(separator: ":") + "::" + hex[best.upperBound...].joined(separator: ":")
        }
    }

    private static func dottedQuad(_ value: UInt32) -> String {
        (0..<4).map { String(UInt8(truncatingIfNeeded: value >> (24 - 8 * $0))) }.joined(separator: ".")
    }

    // MARK: Parsing

    /// Four decimal parts 0...255, no leading zeros, no signs or spaces.
    private static func parseV4(_ text: Substring.UTF8View.SubSequence) -> UInt32? {
        let parts = text.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
            guard part.count == 1 || part.first != UInt8(ascii: "0") else { return nil }
            let number = part.reduce(0) { $0 * 10 + UInt32($1 - UInt8(ascii: "0")) }
            guard number <= 255 else { return nil }
            value = value << 8 | number
        }
        return value
    }

    /// RFC 4291 §2.2: eight groups of 1–4 hex digits, `::` standing for one or more zero
    /// groups (once), the last 32 bits optionally a dotted quad.
    private static func parseV6(_ text: Substring.UTF8View.SubSequence) -> UInt128? {
        guard text.count >= 2 else { return nil }
        let colon = UInt8(ascii: ":")
        var head: [UInt16] = []  // groups before `::` (all of them when there is none)
        var tail: [UInt16] = []  // groups after `::`
        var sawDoubleColon = false
        var rest = text[...]
        if rest.starts(with: [colon, colon]) {
            sawDoubleColon = true
            rest = rest.dropFirst(2)
            if rest.isEmpty { return 0 }
        } else if rest.first == colon {
            return nil  // a lone leading colon
        }
        while !rest.isEmpty {
            let end = rest.firstIndex(of: colon) ?? rest.endIndex
            let field = rest[..<end]
            let isLast = end == rest.endIndex
            if isLast, field.contains(UInt8(ascii: ".")) {
                // A trailing dotted quad: the last two groups.
                guard let v4 = parseV4(field) else { return nil }
                sawDoubleColon ? tail.append(UInt16(v4 >> 16)) : head.append(UInt16(v4 >> 16))
                sawDoubleColon ? tail.append(UInt16(v4 & 0xffff)) : head.append(UInt16(v4 & 0xffff))
                break
            }
            guard (1...4).contains(field.count), let group = UInt16(String(decoding: field, as: UTF8.self), radix: 16),
                  field.allSatisfy({ $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "-") })
            else { return nil }
            sawDoubleColon ? tail.append(group) : head.append(group)
            if isLast { break }
            rest = rest[rest.index(after: end)...]
            if rest.first == colon {
                guard !sawDoubleColon else { return nil }  // `::` twice
                sawDoubleColon = true
                rest = rest.dropFirst()
                if rest.isEmpty { break }  // a trailing `::`
                if rest.first == colon { return nil }  // `:::`
            } else if rest.isEmpty {
                return nil  // a lone trailing colon
            }
        }
        let count = head.count + tail.count
        // `::` stands for at least one group (RFC 4291 §2.2; RFC 5952 §4.2.2 never writes it
        // for one, but accepts it).
        guard sawDoubleColon ? count <= 7 : count == 8 else { return nil }
        let groups = head + Array(repeating: 0, count: 8 - count) + tail
        return groups.reduce(0) { $0 << 16 | UInt128($1) }
    }
}
