#if os(Linux)
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A listening socket that never answers, on a loopback address other than the test server's
/// (`127.0.0.2`, `::1`): whether anything connected to it is what it tells. The kernel
/// completes a connection into the listen queue without `accept`, so once a load has failed,
/// a non-blocking `accept` that finds nothing proves that no connection reached the port.
final class ListenerProbe: Sendable {
    let fd: Int32
    let port: UInt16

    /// Listens on `address` (`"127.0.0.2"` or `"::1"`, loopback only) at `port`.
    init(address: String, port: UInt16) throws {
        let isV6 = address.contains(":")
        precondition(isV6 ? address == "::1" : address.hasPrefix("127."), "ListenerProbe listens on loopback addresses only")
        let fd = socket(isV6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        let bound: Int32
        if isV6 {
            var name = sockaddr_in6()
            name.sin6_family = sa_family_t(AF_INET6)
            name.sin6_port = port.bigEndian
            name.sin6_addr = in6addr_loopback
            bound = withUnsafePointer(to: &name) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var name = sockaddr_in()
            name.sin_family = sa_family_t(AF_INET)
            name.sin_port = port.bigEndian
            _ = inet_pton(AF_INET, address, &name.sin_addr)
            bound = withUnsafePointer(to: &name) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let error = errno
            close(fd)
            throw POSIXError(.init(rawValue: error) ?? .EIO)
        }
        self.fd = fd
        self.port = port
    }

    deinit { close(fd) }

    /// How many connections have arrived so far (each is accepted and closed).
    func takeConnections() -> Int {
        var count = 0
        while case let accepted = accept(fd, nil, nil), accepted >= 0 {
            close(accepted)
            count += 1
        }
        return count
    }
}
#endif
