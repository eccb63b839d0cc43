#if canImport(CCurl) && canImport(CLumenCurl)
import Foundation
/// A response head read line by line, as libcurl's header callback hands the lines over.
extension CurlDataLoader {
    /// Collects the header lines of one response head at a time, starting afresh at each
    /// status line (an interim `1xx` response or a redirect is a head of its own).
    struct HeaderBlock {
        /// A complete head: the status line's parts and the fields in order.
        struct Head: Equatable {
            var status: Int
            var version: String
            var fields: [(name: String, value: String)]

            /// The first value of the field `name` (any case).
            func field(_ name: String) -> String? {
                fields.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
            }

            /// The fields by name, repeated ones joined with ", " (as `HTTPURLResponse` keeps them).
            var joinedFields: [String: String] {
                var joined: [String: String] = [:]
                var names: [String: String] = [:]  // lowercased → first spelling
                for (name, value) in fields {
                    let key = names[name.lowercased(), default: name]
                    names[name.lowercased()] = key
                    joined[key] = joined[key].map { $0 + ", " + value } ?? value
                }
                return joined
            }

            static func == (a: Head, b: Head) -> Bool {
                a.status == b.status && a.version == b.version
                    && a.fields.map(\.name) == b.fields.map(\.name) && a.fields.map(\.value) == b.fields.map(\.value)
            }
        }

        private var current: Head?

        /// Takes one header line (with or without its line end); returns the head when `line`
        /// is the blank line that ends it. Lines before any status line are ignored.
        mutating func feed(_ line: String) -> Head? {
            var text = Substring(line)
            // (`"\r\n"` is one `Character`: `isNewline` catches it, and a lone `"\n"` or `"\r"`.)
            while let last = text.last, last.isNewline { text = text.dropLast() }
            if text.hasPrefix("HTTP/") {
                let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
                let status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
                current = Head(status: status, version: String(parts.first ?? "HTTP/1.1"), fields: [])
                return nil
            }
            guard current != nil else { return nil }
            if text.isEmpty {
                defer { current = nil }
                return current
            }
            if let first = text.first, first == " " || first == "\t", !current!.fields.isEmpty {
                // An obsolete folded line continues the previous field's value.
                current!.fields[current!.fields.count - 1].value += " " + text.trimmingCharacters(in: .whitespaces)
                return nil
            }
            guard let colon = text.firstIndex(of: ":") else { return nil }
            let name = String(text[..<colon]).trimmingCharacters(in: .whitespaces)
            let value = String(text[text.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            if !name.isEmpty { current!.fields.append((name, value)) }
            return nil
        }
    }
}
#endif
