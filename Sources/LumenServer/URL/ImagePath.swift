import Foundation
import Lumen

/// A request refused before any work: the status and a one-line reason for the body.
struct Refusal: Error, Sendable {
    let status: Int
    let reason: String
    init(_ status: Int, _ reason: String) {
        self.status = status
        self.reason = reason
    }
}

/// Where an image comes from, once its URL passed the source policy.
enum ImageSource: Sendable, Hashable {
    /// An `http` or `https` URL.
    case remote(URL)
    /// A file inside `--local-root`, resolved (symlinks followed) and checked to stay inside.
    case local(URL)

    var url: URL {
        switch self {
        case .remote(let url), .local(let url): url
        }
    }
}

/// `/{signature}/{options}/{source}`, split and checked.
struct ImagePath: Sendable {
    let signature: String
    /// `/{options}/{source}` exactly as sent: what the signature covers.
    let signedPath: String
    let options: ImageOptions
    /// The source URL as the client gave it (before the policy resolved it).
    let sourceText: String

    static let maximumLength = 8192

    /// Splits `path`; checks the options, and the source's encoding (not its policy).
    init(_ path: String, maximumSide: Int) throws(Refusal) {
        guard path.utf8.count <= Self.maximumLength else {
            throw Refusal(414, "the path is over \(Self.maximumLength) bytes")
        }
        let parts = path.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else {
            throw Refusal(400, "the path is not /{signature}/{options}/{source}")
        }
        signature = String(parts[1])
        signedPath = "/" + String(path[parts[2].startIndex...])
        do {
            options = try ImageOptions(parsing: String(parts[2]), maximumSide: maximumSide)
        } catch {
            throw Refusal(400, "bad options: \(error.description)")
        }
        let source = parts[3]
        if source.hasPrefix("plain/") {
            guard let decoded = String(source.dropFirst(6)).removingPercentEncoding, !decoded.isEmpty else {
                throw Refusal(400, "the plain source is not valid percent-encoded UTF-8")
            }
            sourceText = decoded
        } else if source.hasPrefix("b64/") {
            guard let bytes = Base64URL.decode(String(source.dropFirst(4))), let text = String(validating: bytes, as: UTF8.self),
                  !text.isEmpty else {
                throw Refusal(400, "the b64 source is not unpadded base64url of a UTF-8 URL")
            }
            sourceText = text
        } else {
            throw Refusal(400, "the source must start with plain/ or b64/")
        }
        guard !sourceText.contains(where: { $0.isNewline || $0 == "\0" || $0 == " " }) else {
            throw Refusal(400, "the source URL holds spaces or control characters")
        }
    }
}

/// Which sources the server loads: schemes, hosts (`--allow-host`), and files inside
/// `--local-root`. Addresses are checked later, when each connection opens (see
/// `ConnectionPolicy`), since only then is it known where a host name leads.
struct SourcePolicy: Sendable {
    /// `a.example` (that host) or `*.a.example` (its subdomains); empty allows every host.
    var allowedHosts: [String]
    /// The directory `local:///path` sources are read from; `nil` refuses them.
    var localRoot: URL?

    func resolve(_ text: String) throws(Refusal) -> ImageSource {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased() else {
            throw Refusal(400, "the source is not a URL")
        }
        switch scheme {
        case "http", "https":
            guard let host = url.host, !host.isEmpty else { throw Refusal(400, "the source URL has no host") }
            guard isAllowed(host: host) else { throw Refusal(403, "the source host is not allowed") }
            return .remote(url)
        case "local":
            guard let localRoot else { throw Refusal(403, "local sources need --local-root") }
            return .local(try Self.resolveLocal(text, root: localRoot))
        default:
            throw Refusal(403, "the source scheme is not allowed (http, https, local)")
        }
    }

    func isAllowed(host: String) -> Bool {
        guard !allowedHosts.isEmpty else { return true }
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
        return allowedHosts.contains { pattern in
            let pattern = pattern.lowercased()
            if pattern.hasPrefix("*.") { return host.hasSuffix(String(pattern.dropFirst(1))) }
            return host == pattern
        }
    }

    /// `local:///a/b.jpg` → the file `root/a/b.jpg`, symlinks resolved, still inside `root`.
    /// `..`, `.`, encoded separators or dots, a host part, and anything that resolves outside
    /// the root are refused.
    static func resolveLocal(_ text: String, root: URL) throws(Refusal) -> URL {
        guard text.hasPrefix("local:///") else { throw Refusal(403, "a local source is local:///relative/path") }
        let raw = String(text.dropFirst("local:///".count))
        guard !raw.contains("%"), !raw.contains("\\"), !raw.contains("?"), !raw.contains("#") else {
            throw Refusal(403, "a local path may not hold %, \\, ? or #")
        }
        let components = raw.split(separator: "/", omittingEmptySubsequences: false)
        guard !components.isEmpty, components.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." }) else {
            throw Refusal(403, "a local path may not hold empty, . or .. components")
        }
        guard let rootReal = realPath(root.path) else { throw Refusal(404, "the local root does not exist") }
        let candidate = rootReal + "/" + raw
        guard let real = realPath(candidate) else { throw Refusal(404, "no such local file") }
        guard real.hasPrefix(rootReal + "/") else { throw Refusal(403, "the local path leads outside the local root") }
        return URL(fileURLWithPath: real)
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
