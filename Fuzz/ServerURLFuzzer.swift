// libFuzzer entry point for LumenServer's URL parsing: `ImagePath` (/{signature}/{options}/
// {source}), `ImageOptions`, `URLSigner`, base64url and `SourcePolicy`. Not part of the
// package: built by scripts/fuzz.sh with `-sanitize=fuzzer,address` from
// Sources/LumenServer/URL alone.
//
// The input is the path as a client sends it (bytes read as UTF-8, invalid sequences
// replaced). Properties, beyond never crashing:
// - options that parse have a canonical form that parses again to the same canonical form
//   and the same box in pixels;
// - a path that parses is its signature segment followed by the signed path, and the path
//   rebuilt from its canonical options and source (`plain/` and `b64/`, unsigned and signed)
//   parses back to the same options and source, the signed one with a valid signature;
// - base64url decodes what it encodes;
// - a local source resolves only to a file inside the local root.
@testable import LumenServer
import Foundation

private let maximumSide = 4096
private let signer = try! URLSigner(keyHex: "736563726574", saltHex: "68656c6c6f")

/// A local root with one file and one folder in it, made once per process.
private let localRoot: URL = {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-fuzz-root-\(getpid())")
    try? FileManager.default.createDirectory(at: root.appendingPathComponent("a"), withIntermediateDirectories: true)
    _ = FileManager.default.createFile(atPath: root.appendingPathComponent("a/b.jpg").path, contents: Data([0xFF, 0xD8]))
    return root
}()
private let policy = SourcePolicy(allowedHosts: ["a.example", "*.b.example"], localRoot: localRoot)

private func checkOptions(_ options: ImageOptions, _ context: String) {
    let canonical = options.canonical
    let again: ImageOptions
    do {
        again = try ImageOptions(parsing: canonical, maximumSide: maximumSide)
    } catch {
        fatalError("\(context): canonical options '\(canonical)' do not parse: \(error)")
    }
    require(again.canonical == canonical, "\(context): '\(canonical)' re-parses as '\(again.canonical)'")
    require(
        again.pixelWidth == options.pixelWidth && again.pixelHeight == options.pixelHeight,
        "\(context): '\(canonical)' changes the box on re-parsing")
}

private func checkRebuilt(_ rebuilt: String, like path: ImagePath, signed: Bool) {
    guard rebuilt.utf8.count <= ImagePath.maximumLength else { return }  // percent-encoding grows it
    let again: ImagePath
    do {
        again = try ImagePath(rebuilt, maximumSide: maximumSide)
    } catch {
        fatalError("rebuilt path \(rebuilt) does not parse: \(error.status) \(error.reason)")
    }
    require(again.sourceText == path.sourceText, "rebuilt path \(rebuilt) has source \(again.sourceText), not \(path.sourceText)")
    require(again.options.canonical == path.options.canonical, "rebuilt path \(rebuilt) has other options")
    if signed {
        require(signer.isValid(again.signature, for: again.signedPath), "signed path \(rebuilt) does not verify")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func lumenFuzzOneInput(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = start.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    let text = String(decoding: bytes, as: UTF8.self)

    if let options = try? ImageOptions(parsing: text, maximumSide: maximumSide) {
        checkOptions(options, "options '\(text)'")
    }

    if let path = try? ImagePath(text, maximumSide: maximumSide) {
        require("/" + path.signature + path.signedPath == text, "path \(text) does not split into signature and signed path")
        checkOptions(path.options, "path \(text)")
        _ = signer.isValid(path.signature, for: path.signedPath)
        for base64 in [false, true] {
            let options = path.options.canonical
            checkRebuilt(URLSigner.unsignedPath(options: options, source: path.sourceText, base64: base64), like: path, signed: false)
            checkRebuilt(signer.path(options: options, source: path.sourceText, base64: base64), like: path, signed: true)
        }
        if case .local(let url)? = try? policy.resolve(path.sourceText) {
            let root = SourcePolicy.realPath(localRoot.path) ?? localRoot.path
            require(url.path.hasPrefix(root + "/"), "\(path.sourceText) resolved outside the local root: \(url.path)")
        }
    }

    if let decoded = Base64URL.decode(text) {
        require(Base64URL.decode(Base64URL.encode(decoded)) == decoded, "base64url round trip of \(text)")
    }
    require(Base64URL.decode(Base64URL.encode(bytes)) == bytes, "base64url round trip of the input bytes")

    if let signer = try? URLSigner(keyHex: text, saltHex: text) {
        require(signer.key.count * 2 == text.utf8.count, "key of \(signer.key.count) bytes from \(text.utf8.count) hex digits")
        let signature = signer.signature(for: text)
        require(signer.isValid(signature, for: text), "a signature does not verify")
    }

    if case .local(let url)? = try? policy.resolve(text) {
        let root = SourcePolicy.realPath(localRoot.path) ?? localRoot.path
        require(url.path.hasPrefix(root + "/"), "\(text) resolved outside the local root: \(url.path)")
    }
    _ = policy.isAllowed(host: text)
    return 0
}

/// `precondition` with its message: an optimised build's precondition traps without one.
private func require(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition { fatalError(message(), file: file, line: line) }
}
