import Testing
@testable import Lumen

/// `IPAddress`, `IPAddressRange` and `ConnectionPolicy` on parsed addresses only: nothing
/// here connects anywhere.
@Suite(.timeLimit(.minutes(1)))
struct ConnectionPolicyTests {
    // MARK: IPAddress

    /// Text that parses, and its canonical form.
    @Test(arguments: [
        ("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "0.0.0.0"), ("255.255.255.255", "255.255.255.255"),
        ("::", "::"), ("::1", "::1"), ("[::1]", "::1"), ("0:0:0:0:0:0:0:1", "::1"),
        ("2001:DB8::A", "2001:db8::a"), ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
        ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),  // one zero group is not `::`
        ("2001:0:0:1:0:0:0:1", "2001:0:0:1::1"),  // the longest run
        ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),  // the first of equal runs
        ("1::", "1::"), ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"), ("::2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8"),
        ("::ffff:127.0.0.2", "::ffff:127.0.0.2"), ("::ffff:7f00:2", "::ffff:127.0.0.2"), ("[::FFFF:7F00:2]", "::ffff:127.0.0.2"),
        ("::127.0.0.1", "::7f00:1"), ("64:ff9b::10.0.0.1", "64:ff9b::a00:1"),
        ("fe80::1", "fe80::1"), ("ff02::1", "ff02::1"),
    ])
    func addressTextParses(text: String, canonical: String) throws {
        let address = try #require(IPAddress(text))
        #expect(address.description == canonical)
        #expect(IPAddress(canonical) == address)
    }

    /// Text that does not: other IPv4 spellings (which URL parsers and `inet_aton` read as
    /// addresses), malformed IPv6, host names, zones, ports.
    @Test(arguments: [
        "", "127.0.0", "127.0.0.1.", "127.0.0.1.1", "127.0.0.01", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001",
        "2130706433", "127.1", "256.0.0.1", "1.2.3.-1", "+1.2.3.4", " 1.2.3.4", "1.2.3.4 ", "[127.0.0.1]",
        "localhost", "example.com", ":", ":::", "1:::2", "::1::", "1::2::3", ":1::", "1::2:", "1:2:3:4:5:6:7:8:9",
        "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8::", "::12345", "::g", "::+1", "[::1", "::1]", "[]", "fe80::1%eth0",
        "::ffff:127.0.0.01", "::ffff:127.1", "::1.2.3.4:5", "1.2.3.4::", "127.0.0.1:80", "[::1]:80", "::1/128",
    ])
    func addressTextIsRefused(text: String) {
        #expect(IPAddress(text) == nil)
    }

    // MARK: IPAddressRange

    @Test(arguments: [
        ("10.0.0.0/8", "10.0.0.0/8"), ("127.0.0.1", "127.0.0.1/32"), ("127.0.0.1/32", "127.0.0.1/32"),
        ("0.0.0.0/0", "0.0.0.0/0"), ("::1", "::1/128"), ("fc00::/7", "fc00::/7"), ("::/0", "::/0"),
        ("[::1]/128", "::1/128"), ("2001:DB8::/32", "2001:db8::/32"),
    ])
    func rangeTextParses(text: String, canonical: String) throws {
        #expect(try #require(IPAddressRange(text)).description == canonical)
    }

    @Test(arguments: [
        "10.0.0.1/8", "127.0.0.1/31", "::1/127", "fd00::/7", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/08",
        "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/8/8", "/8", "10/8", "localhost/32", "::1/ 128",
    ])
    func rangeTextIsRefused(text: String) {
        #expect(IPAddressRange(text) == nil)
    }

    @Test(arguments: [
        ("10.0.0.0/8", "10.0.0.0", true), ("10.0.0.0/8", "10.255.255.255", true), ("10.0.0.0/8", "11.0.0.0", false),
        ("10.0.0.0/8", "9.255.255.255", false), ("127.0.0.1/32", "127.0.0.1", true), ("127.0.0.1/32", "127.0.0.2", false),
        ("0.0.0.0/0", "8.8.8.8", true), ("0.0.0.0/0", "::1", false),
        // An IPv4 range holds the v4-mapped form of its addresses, and nothing else of IPv6.
        ("127.0.0.1/32", "::ffff:127.0.0.1", true), ("127.0.0.1/32", "::ffff:127.0.0.2", false),
        ("10.0.0.0/8", "::ffff:10.1.2.3", true), ("127.0.0.1/32", "::127.0.0.1", false),
        ("127.0.0.1/32", "64:ff9b::127.0.0.1", false), ("127.0.0.1/32", "::1", false),
        // An IPv6 range holds no IPv4 address, even one it would hold mapped.
        ("::ffff:0:0/96", "127.0.0.1", false), ("::ffff:0:0/96", "::ffff:127.0.0.1", true),
        ("fc00::/7", "fc00::", true), ("fc00::/7", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("fc00::/7", "fe00::", false), ("fc00::/7", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
        ("::1/128", "::1", true), ("::1/128", "::", false), ("::/0", "2001:db8::1", true), ("::/0", "1.2.3.4", false),
    ])
    func rangeContains(range: String, address: String, expected: Bool) throws {
        let range = try #require(IPAddressRange(range))
        #expect(range.contains(try #require(IPAddress(address))) == expected)
    }

    // MARK: Special-purpose addresses

    /// The first and last address of every refused range, and addresses inside each IPv6
    /// form that embeds a refused IPv4 address.
    @Test(arguments: [
        "0.0.0.0", "0.255.255.255", "10.0.0.0", "10.255.255.255", "100.64.0.0", "100.127.255.255",
        "127.0.0.0", "127.0.0.1", "127.255.255.255", "169.254.0.0", "169.254.169.254", "169.254.255.255",
        "172.16.0.0", "172.31.255.255", "192.0.0.0", "192.0.0.255", "192.0.2.0", "192.0.2.255",
        "192.88.99.0", "192.88.99.255", "192.168.0.0", "192.168.255.255", "198.18.0.0", "198.19.255.255",
        "198.51.100.0", "198.51.100.255", "203.0.113.0", "203.0.113.255", "224.0.0.0", "239.255.255.255",
        "240.0.0.0", "255.255.255.254", "255.255.255.255",
        "::", "::1", "100::", "100::ffff:ffff:ffff:ffff", "2001:2::", "2001:2:0:ffff:ffff:ffff:ffff:ffff",
        "2001:10::", "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        "3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
        "fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        // v4-mapped, v4-compatible, NAT64, 6to4, Teredo (server, then client inverted).
        "::ffff:127.0.0.2", "::ffff:0.0.0.0", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::ffff:255.255.255.255",
        "::127.0.0.1", "::10.0.0.1", "::0.0.0.2", "64:ff9b::127.0.0.1", "64:ff9b::192.168.1.1", "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::", "2002:a00:1:ffff::1", "2002:c0a8:101::", "2002:a9fe:a9fe::1",
        "2001:0:7f00:1::", "2001:0:a00:1:0:0:808:808", "2001:0:808:808:0:0:80ff:fffe", "2001:0:808:808::5601:5656",
    ])
    func specialPurposeAddressesAreRefused(text: String) throws {
        let address = try #require(IPAddress(text))
        #expect(ConnectionPolicy.isSpecialPurpose(address))
        #expect(!ConnectionPolicy().allows(address))
    }

    /// The first address past each end of every refused range (where that is not in another
    /// refused range), and the embedding forms around a public IPv4 address.
    @Test(arguments: [
        "1.0.0.0", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.0",
        "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "191.255.255.255", "192.0.1.0",
        "192.0.1.255", "192.0.3.0", "192.88.98.255", "192.88.100.0", "192.167.255.255", "192.169.0.0",
        "198.17.255.255", "198.20.0.0", "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0",
        "223.255.255.255", "8.8.8.8", "1.1.1.1",
        "::2:0:0", "::1:0:0:0", "100:0:0:1::", "ff::", "2001:1:ffff:ffff:ffff:ffff:ffff:ffff", "2001:2:1::",
        "2001:f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:20::", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::",
        "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::", "64:ff9b:0:1::", "64:ff9b:2::",
        "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2606:4700::1111", "2a00:1450:4001:80b::200e",
        // Embedding forms around public IPv4 addresses.
        "::ffff:8.8.8.8", "::ffff:1.0.0.0", "::ffff:223.255.255.255", "::8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1",
        "2001:0:808:808:0:0:f7f7:f7f7",  // server 8.8.8.8, client ~f7f7f7f7 = 8.8.8.8
        "::fffe:7f00:1",  // not v4-mapped (ffff is the marker), and outside every refused range
    ])
    func publicAddressesAreAllowed(text: String) throws {
        let address = try #require(IPAddress(text))
        #expect(!ConnectionPolicy.isSpecialPurpose(address))
        #expect(ConnectionPolicy().allows(address))
    }

    @Test func allowedRangesAreExceptionsToTheRefusal() throws {
        let policy = ConnectionPolicy(allowing: [try #require(IPAddressRange("127.0.0.1/32")), try #require(IPAddressRange("fd00::/8"))])
        for (text, allowed) in [
            ("127.0.0.1", true), ("::ffff:127.0.0.1", true), ("127.0.0.2", false), ("::1", false),
            ("::ffff:127.0.0.2", false), ("fd00::5", true), ("fc00::5", false), ("8.8.8.8", true),
            // The exception is for the address as connected to, not for other forms embedding it.
            ("::127.0.0.1", false), ("64:ff9b::127.0.0.1", false), ("2002:7f00:1::", false),
        ] {
            #expect(policy.allows(try #require(IPAddress(text))) == allowed, "\(text)")
        }
    }
}
