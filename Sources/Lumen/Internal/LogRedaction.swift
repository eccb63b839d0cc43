import Foundation

/// Takes secrets out of diagnostic text before it reaches a logger: in every `scheme://` URL
/// the text holds, the user part (`user:password@`) and the query (signed origin URLs carry
/// tokens there) are dropped, as the server's access log drops them. A stage's key names its
/// URL, so every message about a stage goes through this.
package enum LogRedaction {
    /// `text` with every URL's user part and query removed; text without URLs unchanged.
    package static func scrub(_ text: String) -> String {
        guard text.contains("://") else { return text }
        let chars = Array(text.unicodeScalars)
        var out = String.UnicodeScalarView()
        var i = 0
        while i < chars.count {
            // A URL starts at a scheme (letters, digits, + - .) followed by "://".
            if chars[i] == ":", i + 2 < chars.count, chars[i + 1] == "/", chars[i + 2] == "/", i > 0, isSchemeScalar(chars[i - 1]) {
                out.append(contentsOf: "://".unicodeScalars)
                i += 3
                var end = i
                while end < chars.count, !isURLTerminator(chars[end]) { end += 1 }
                let url = chars[i..<end]
                // Authority: up to the first / ? #.
                let authorityEnd = url.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? url.endIndex
                var authority = url[url.startIndex..<authorityEnd]
                if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
                out.append(contentsOf: authority)
                let rest = url[authorityEnd...]
                let queryStart = rest.firstIndex(of: "?")
                let pathEnd = queryStart ?? rest.firstIndex(of: "#") ?? rest.endIndex
                out.append(contentsOf: rest[rest.startIndex..<pathEnd])
                if queryStart != nil { out.append(contentsOf: "?…".unicodeScalars) }
                i = end
                continue
            }
            out.append(chars[i])
            i += 1
        }
        return String(out)
    }

    private static func isSchemeScalar(_ c: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(c) || ("A"..."Z").contains(c) || ("0"..."9").contains(c) || c == "+" || c == "-" || c == "."
    }

    /// Where a URL in running text ends: white space, a quote, an angle bracket or a closing
    /// parenthesis (not `]`: an IPv6 host is bracketed).
    private static func isURLTerminator(_ c: Unicode.Scalar) -> Bool {
        c == " " || c == "\n" || c == "\r" || c == "\t" || c == "\"" || c == "'" || c == "<" || c == ">" || c == ")"
    }
}
