import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Opening files for reading when the path may name anything: the disk cache's entries, a
/// `file:` URL's path.
enum POSIXFile {
    /// Opens `path` read-only without blocking: opening a FIFO for reading would otherwise wait
    /// for a writer, forever. `O_NONBLOCK` changes nothing for regular files.
    static func openForReading(_ path: String) -> Int32 {
        open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    }

    /// Whether `st` is a FIFO, socket or device: nothing to read as a file. (A directory is
    /// left to the caller.)
    static func isSpecial(_ st: stat) -> Bool {
        let type = st.st_mode & S_IFMT
        return type != S_IFREG && type != S_IFDIR
    }
}
