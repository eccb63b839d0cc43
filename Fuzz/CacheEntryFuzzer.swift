// libFuzzer entry point for the disk cache's entry reader (`EntryFormat`, Sources/Lumen/
// Caching/DataCache+EntryFormat.swift). Not part of the package: built by scripts/fuzz.sh
// with `-sanitize=fuzzer,address` from that file, the checksum and the metadata types alone.
//
// The input is an entry file's bytes, read the way `DataCache` reads one: the header, then
// the checksum over header, metadata and payload, then the metadata record for the key. The
// harness recomputes the checksum field first (or nearly every mutation would stop at the
// checksum) and checks both the bytes as given and the fixed ones, with the key stored in the
// record and with another key. Properties, beyond never crashing: an entry whose checksum is
// wrong is refused; a record that decodes encodes back to exactly its bytes; and an entry
// that validates is accepted again after re-encoding.
@testable import Lumen
import Foundation

private func read(_ bytes: [UInt8], at offset: Int, width: Int) -> Int {
    (0..<width).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
}

/// Reads `file` as the cache would, for `key`.
private func readEntry(_ file: [UInt8], key: String) -> Result<CacheMetadata, EntryFormat.Invalid> {
    do throws(EntryFormat.Invalid) {
        let header = try EntryFormat.decodeHeader(file.prefix(EntryFormat.headerSize), fileSize: file.count)
        let metadataEnd = EntryFormat.headerSize + header.metadataLength
        return file.withUnsafeBytes { raw in
            Result { () throws(EntryFormat.Invalid) in
                try EntryFormat.validate(
                    header: header, metadataBytes: UnsafeRawBufferPointer(rebasing: raw[EntryFormat.headerSize..<metadataEnd]),
                    payload: UnsafeRawBufferPointer(rebasing: raw[metadataEnd...]), key: key)
            }
        }
    } catch {
        return .failure(error)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func lumenFuzzOneInput(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let file = start.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    // The key the record names, when there is one.
    var keys = ["k"]
    if file.count >= EntryFormat.headerSize + 4 {
        let length = read(file, at: EntryFormat.headerSize, width: 4)
        if file.count - EntryFormat.headerSize - 4 >= length {
            let start = EntryFormat.headerSize + 4
            keys.append(String(decoding: file[start..<(start + length)], as: UTF8.self))
        }
    }

    var fixed = file
    if let header = try? EntryFormat.decodeHeader(file.prefix(EntryFormat.headerSize), fileSize: file.count) {
        let metadataEnd = EntryFormat.headerSize + header.metadataLength
        let checksum = file.withUnsafeBytes { raw in
            let afterMetadata = EntryChecksum.hash(
                UnsafeRawBufferPointer(rebasing: raw[EntryFormat.headerSize..<metadataEnd]), seed: header.checksumSeed)
            return EntryChecksum.hash(UnsafeRawBufferPointer(rebasing: raw[metadataEnd...]), seed: afterMetadata)
        }
        for i in 0..<8 { fixed[EntryFormat.checksumOffset + i] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(i))) }
        if fixed != file {
            for key in keys {
                guard case .failure(.checksumMismatch) = readEntry(file, key: key) else {
                    fatalError("an entry with a wrong checksum was not refused for its checksum")
                }
            }
        }
    }

    for key in keys {
        guard case .success(let metadata) = readEntry(fixed, key: key) else { continue }
        let header = try! EntryFormat.decodeHeader(fixed.prefix(EntryFormat.headerSize), fileSize: fixed.count)
        let recordStart = EntryFormat.headerSize, recordEnd = recordStart + header.metadataLength
        var record: [UInt8] = []
        EntryFormat.encodeRecord(key: key, metadata: metadata, into: &record)
        require(record == Array(fixed[recordStart..<recordEnd]), "the record does not encode back to its bytes")
        let payload = Data(fixed[recordEnd...])
        guard let prefix = EntryFormat.encodePrefix(key: key, metadata: metadata, payload: payload) else {
            fatalError("a record that was read cannot be written")
        }
        guard case .success = readEntry(prefix + [UInt8](payload), key: key) else {
            fatalError("a re-encoded entry is refused")
        }
    }
    return 0
}

/// `precondition` with its message: an optimised build's precondition traps without one.
private func require(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition { fatalError(message(), file: file, line: line) }
}
