import Foundation
@testable import LumenServer
import Testing

@Suite(.timeLimit(.minutes(1)))
struct URLContractTests {
    @Test(arguments: [
        "w:0", "w:4097", "w:abc", "w:-1", "w:1.5", "h:", "fit:fill", "dpr:5", "dpr:0.5", "f:gif", "q:0", "q:101",
        "blur:0", "gray:2", "circle:yes", "nope:1", "w:10,w:10", "w", "", "w:10,", ",w:10", "w:2048,dpr:3",
    ])
    func badOptionsAreRefused(_ segment: String) {
        #expect(throws: ImageOptions.Invalid.self) { try ImageOptions(parsing: segment, maximumSide: 4096) }
    }

    @Test func optionsInAnyOrderHaveOneCanonicalForm() throws {
        let a = try ImageOptions(parsing: "w:256,h:128,fit:cover,q:70,gray:1", maximumSide: 4096)
        let b = try ImageOptions(parsing: "gray:1,q:70,fit:cover,h:128,w:256", maximumSide: 4096)
        #expect(a.canonical == b.canonical)
        #expect(a.canonical == "fit:cover,gray:1,h:128,q:70,w:256")
        // dpr folds into the sizes; defaults are left out.
        let c = try ImageOptions(parsing: "w:128,dpr:2,fit:contain,upscale:0", maximumSide: 4096)
        #expect(c.canonical == "w:256")
        #expect(try ImageOptions(parsing: "_", maximumSide: 4096).canonical == "_")
    }

    @Test func signaturesMatchAnIndependentHMAC() throws {
        // Computed outside Lumen: python3 -c "import hmac,hashlib,base64;
        //   print(base64.urlsafe_b64encode(hmac.new(b'secret', b'hello/w:256/plain/https%3A%2F%2Fa.example%2Fp.jpg',
        //   hashlib.sha256).digest()).rstrip(b'=').decode())"
        let signer = try URLSigner(keyHex: "736563726574", saltHex: "68656c6c6f")
        let path = signer.path(options: "w:256", source: "https://a.example/p.jpg")
        #expect(path.hasSuffix("/w:256/plain/https%3A%2F%2Fa.example%2Fp.jpg"))
        let signature = String(path.dropFirst().prefix { $0 != "/" })
        #expect(signature == Self.expectedSignature)
        #expect(signer.isValid(signature, for: "/w:256/plain/https%3A%2F%2Fa.example%2Fp.jpg"))
        #expect(!signer.isValid(signature, for: "/w:257/plain/https%3A%2F%2Fa.example%2Fp.jpg"))
        #expect(!signer.isValid(String(signature.dropLast()) + "A", for: "/w:256/plain/https%3A%2F%2Fa.example%2Fp.jpg"))
        #expect(!"\(signer)".contains("736563726574"))
    }

    static let expectedSignature = "zaODsaHYIFAU3ICVpcwe2rV3G82oqpgsR4kT3yDfMR4"

    @Test func base64SourcesRoundTrip() throws {
        let source = "https://a.example/ü/p.jpg?x=1&y=2"
        let segment = URLSigner.sourceSegment(source, base64: true)
        let path = try ImagePath("/_/_/" + segment, maximumSide: 4096)
        #expect(path.sourceText == source)
        #expect(Base64URL.decode("a=") == nil)
        #expect(Base64URL.decode("a+b") == nil)
    }

    @Test(arguments: [
        ("/x", 400), ("/sig/_", 400), ("/sig/_/ftp/x", 400), ("/sig/_/plain/%zz", 400), ("/sig/w:0/plain/x", 400),
        ("/sig/_/b64/***", 400),
    ])
    func badPathsAreRefused(_ path: String, _ status: Int) {
        do {
            _ = try ImagePath(path, maximumSide: 4096)
            Issue.record("\(path) was accepted")
        } catch { #expect(error.status == status) }
    }

    @Test func aPathOver8KBIs414() {
        do {
            _ = try ImagePath("/s/_/plain/" + String(repeating: "a", count: 8200), maximumSide: 4096)
            Issue.record("accepted")
        } catch { #expect(error.status == 414) }
    }

    @Test func hostPatterns() {
        let policy = SourcePolicy(allowedHosts: ["a.example", "*.b.example"], localRoot: nil)
        #expect(policy.isAllowed(host: "a.example"))
        #expect(policy.isAllowed(host: "A.EXAMPLE"))
        #expect(!policy.isAllowed(host: "x.a.example"))
        #expect(policy.isAllowed(host: "x.b.example"))
        #expect(policy.isAllowed(host: "y.x.b.example"))
        #expect(!policy.isAllowed(host: "b.example"))
        #expect(!policy.isAllowed(host: "evilb.example"))
        #expect(SourcePolicy(allowedHosts: [], localRoot: nil).isAllowed(host: "anything.example"))
    }

    @Test func localPathsStayInsideTheRoot() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("lumen-local-\(UUID().uuidString)")
        let root = base.appendingPathComponent("root")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("sub"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        try Data("x".utf8).write(to: root.appendingPathComponent("sub/a.jpg"))
        try Data("secret".utf8).write(to: base.appendingPathComponent("outside.jpg"))
        try FileManager.default.createSymbolicLink(atPath: root.appendingPathComponent("link.jpg").path, withDestinationPath: base.appendingPathComponent("outside.jpg").path)
        try FileManager.default.createSymbolicLink(atPath: root.appendingPathComponent("inner.jpg").path, withDestinationPath: root.appendingPathComponent("sub/a.jpg").path)
        let ok = try SourcePolicy.resolveLocal("local:///sub/a.jpg", root: root)
        #expect(ok.lastPathComponent == "a.jpg")
        #expect(try SourcePolicy.resolveLocal("local:///inner.jpg", root: root).lastPathComponent == "a.jpg")
        for bad in ["local:///../outside.jpg", "local:///sub/../../outside.jpg", "local:///%2e%2e/outside.jpg",
                    "local:///sub/%2E%2E/%2E%2E/outside.jpg", "local:////etc/passwd", "local:///link.jpg",
                    "local://host/sub/a.jpg", "local:///./sub/a.jpg", "local:///sub//a.jpg", "local:///sub\\..\\a.jpg"] {
            do {
                _ = try SourcePolicy.resolveLocal(bad, root: root)
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(error.status == 403 || error.status == 404, "\(bad): \(error.status)")
                #expect(error.status != 404 || !bad.contains("outside"), "\(bad) was looked up outside the root")
            }
        }
        #expect(throws: Refusal.self) { try SourcePolicy(allowedHosts: [], localRoot: nil).resolve("local:///sub/a.jpg") }
    }
}
