import Foundation

/// A CIDR range of IPv4 or IPv6 addresses: `"10.0.0.0/8"`, `"fc00::/7"`, or a bare address
/// for itself alone (`/32`, `/128`).
public struct IPAddressRange: Hashable, Sendable, CustomStringConvertible {
    /// The first address of the range (its host bits are zero).
    let base: IPAddress
    /// How many leading bits an address shares with `base` to be in the range.
    let prefixLength: Int

    /// Parses `cidr`: an address as ``IPAddress`` reads it, then optionally `/` and a decimal
    /// prefix length without leading zeros (0...32 for IPv4, 0...128 for IPv6). Nil when the
    /// address has bits set past the prefix (`"10.0.0.1/8"`): such text usually means a
    /// typo, and reading it as `10.0.0.0/8` would silently allow more than was written.
    public init?(_ cidr: String) {
        let parts = cidr.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(String(parts[0])) else { return nil }
        let width = address.v4 != nil ? 32 : 128
        var length = width
        if parts.count == 2 {
            let text = parts[1]
            guard (1...3).contains(text.count), text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber),
                  text.count == 1 || text.first != "0", let number = Int(text), number <= width
            else { return nil }
            length = number
        }
        guard Self.masked(address, length) == address else { return nil }
        self.base = address
        self.prefixLength = length
    }

    /// Whether `address` is in the range. An IPv4 range also holds the v4-mapped IPv6 form of
    /// its addresses (`::ffff:127.0.0.1` for `127.0.0.1/32`): a dual-stack socket reaches an
    /// IPv4 host through that form, so it must be judged as the IPv4 address it is.
    public func contains(_ address: IPAddress) -> Bool {
        switch base.storage {
        case .v4:
            guard let v4 = address.v4 ?? address.mappedV4 else { return false }
            return Self.masked(IPAddress(v4: v4), prefixLength) == base
        case .v6:
            guard case .v6 = address.storage else { return false }
            return Self.masked(address, prefixLength) == base
        }
    }

    /// `"10.0.0.0/8"`, `"::1/128"`: the base address's canonical text and the prefix length.
    public var description: String { "\(base)/\(prefixLength)" }

    /// `address` with every bit past the first `length` cleared.
    private static func masked(_ address: IPAddress, _ length: Int) -> IPAddress {
        switch address.storage {
        case .v4(let value):
            IPAddress(v4: length == 0 ? 0 : value & ~UInt32(0) << (32 - length))
        case .v6(let value):
            IPAddress(v6: length == 0 ? 0 : value & ~UInt128(0) << (128 - length))
        }
    }
}

/// Which addresses a loader may connect to: for a server that loads URLs strangers give it,
/// so that a URL naming (or resolving to, or redirecting to) the server's own network —
/// loopback services, the LAN, a cloud's metadata endpoint at 169.254.169.254 — is refused.
///
/// ``CurlDataLoader`` checks every address it is about to connect to (after DNS, for the
/// first request and for every redirect) with ``allows(_:)``; see
/// ``CurlDataLoader/init(requestTimeout:resourceTimeout:maximumConnectionsPerHost:allowsLocalFiles:userAgent:trustedCertificates:connectionPolicy:maximumRedirects:validate:)``.
///
/// ```swift
/// // Refuse special-purpose addresses, except an image store on the LAN.
/// let policy = ConnectionPolicy(allowing: [IPAddressRange("10.1.2.0/24")!])
/// let loader = CurlDataLoader(connectionPolicy: policy, maximumRedirects: 5)
/// ```
public struct ConnectionPolicy: Sendable {
    /// Exceptions to the refusal of special-purpose addresses: an address in one of them is
    /// allowed whatever ``isSpecialPurpose(_:)`` says.
    public var allowedRanges: [IPAddressRange]

    /// Whether a redirect may be followed to a location (resolved against the URL that
    /// answered); `nil`: to every `http`/`https` location, whose addresses are then checked
    /// like any other. ``CurlDataLoader`` asks it before following each redirect, and a
    /// refused one fails the load as ``DataLoader/Error/addressRefused(_:)``, nothing sent to
    /// that location. A server with a host allowlist checks the hosts of redirects here too.
    public var allowsRedirect: (@Sendable (URL) -> Bool)?

    /// A policy that refuses special-purpose addresses except those in `allowedRanges`.
    public init(allowing allowedRanges: [IPAddressRange] = [], allowsRedirect: (@Sendable (URL) -> Bool)? = nil) {
        self.allowedRanges = allowedRanges
        self.allowsRedirect = allowsRedirect
    }

    /// Whether `address` may be connected to: it is in ``allowedRanges``, or it is not
    /// special-purpose.
    /// - Complexity: O(*n*) in the number of allowed ranges.
    public func allows(_ address: IPAddress) -> Bool {
        allowedRanges.contains { $0.contains(address) } || !Self.isSpecialPurpose(address)
    }

    /// Whether `address` is in a range no server fetching URLs for strangers should reach.
    ///
    /// IPv4: unspecified `0.0.0.0/8`, private `10/8`, `172.16/12`, `192.168/16`, CGNAT
    /// `100.64/10`, loopback `127/8`, link-local `169.254/16` (cloud metadata), IETF protocol
    /// assignments `192.0.0.0/24`, documentation `192.0.2.0/24`, `198.51.100.0/24` and
    /// `203.0.113.0/24`, the deprecated 6to4 relay anycast `192.88.99.0/24`, benchmarking
    /// `198.18/15`, multicast `224/4`, reserved `240/4` (with broadcast `255.255.255.255`).
    ///
    /// IPv6: unspecified `::`, loopback `::1`, discard-only `100::/64`, benchmarking
    /// `2001:2::/48`, deprecated ORCHID `2001:10::/28`, documentation `2001:db8::/32` and
    /// `3fff::/20`, unique local `fc00::/7`, link-local `fe80::/10`, site-local `fec0::/10`,
    /// multicast `ff00::/8`, local-use NAT64 `64:ff9b:1::/48` (all of it: its operators choose
    /// where in it the IPv4 address goes, and it never leaves their network); and the forms
    /// that embed an IPv4 address, when that address is refused: v4-mapped `::ffff:0:0/96`,
    /// v4-compatible `::/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, and Teredo `2001::/32`
    /// (its server's address, or its client's, stored inverted).
    public static func isSpecialPurpose(_ address: IPAddress) -> Bool {
        switch address.storage {
        case .v4(let value):
            return isSpecialPurpose(v4: value)
        case .v6(let value):
            if specialV6.contains(where: { $0.contains(address) }) { return true }
            return embeddedV4(in: value).contains(where: isSpecialPurpose(v4:))
        }
    }

    private static func isSpecialPurpose(v4 value: UInt32) -> Bool {
        let address = IPAddress(v4: value)
        return specialV4.contains { $0.contains(address) }
    }

    /// The IPv4 addresses an IPv6 address carries, by the forms that carry one (RFC 4291
    /// §2.5.5, RFC 6052, RFC 3056, RFC 4380); any of them may be where packets end up.
    private static func embeddedV4(in value: UInt128) -> [UInt32] {
        let low = UInt32(truncatingIfNeeded: value)
        let high96 = value >> 32
        // ::ffff:0:0/96 (mapped), ::/96 (compatible), 64:ff9b::/96 (NAT64): the low 32 bits.
        if high96 == 0xffff || high96 == 0 || high96 == 0x0064_ff9b_0000_0000_0000_0000 { return [low] }
        // 2002:aabb:ccdd::/48 (6to4): the 32 bits after the prefix.
        if value >> 112 == 0x2002 { return [UInt32(truncatingIfNeeded: value >> 80)] }
        // 2001:0:server:server:flags:port:client:client (Teredo): the client's is inverted.
        if value >> 96 == 0x2001_0000 { return [UInt32(truncatingIfNeeded: value >> 64), ~low] }
        return []
    }

    private static let specialV4: [IPAddressRange] = [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    ].map { IPAddressRange($0)! }

    private static let specialV6: [IPAddressRange] = [
        "::/128", "::1/128", "100::/64", "2001:2::/48", "2001:10::/28", "2001:db8::/32", "3fff::/20",
        "64:ff9b:1::/48", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    ].map { IPAddressRange($0)! }
}
