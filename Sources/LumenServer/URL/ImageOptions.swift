import Foundation

/// The `{options}` segment of an image URL, parsed and checked: `_` for none, or
/// comma-separated `name:value` pairs in any order.
///
/// Two spellings of the same set (`w:256,h:256` and `h:256,w:256`) have one ``canonical``
/// form, which keys the work and the caches.
public struct ImageOptions: Sendable, Hashable {
    public enum Fit: String, Sendable, Hashable { case contain, cover }
    public enum Format: String, Sendable, Hashable { case jpeg, png, webp, avif, auto }

    public var width: Int?
    public var height: Int?
    public var fit: Fit = .contain
    /// Device pixel ratio 1…4: multiplies ``width`` and ``height``.
    public var dpr: Double = 1
    public var format: Format?
    public var quality: Int?
    public var blur: Double?
    public var isGray = false
    public var isCircle = false
    public var radius: Double?
    public var upscale = false

    public init() {}

    /// Why a segment was refused.
    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Parses `segment`. `maximumSide`: the largest `w` or `h` (after `dpr`) allowed.
    public init(parsing segment: String, maximumSide: Int) throws(Invalid) {
        guard segment != "_" else { return }
        guard !segment.isEmpty else { throw Invalid(description: "empty options segment (use _ for none)") }
        var seen = Set<String>()
        for pair in segment.split(separator: ",", omittingEmptySubsequences: false) {
            guard let colon = pair.firstIndex(of: ":") else {
                throw Invalid(description: "option '\(Self.clip(pair))' is not name:value")
            }
            let name = String(pair[..<colon]), value = String(pair[pair.index(after: colon)...])
            guard seen.insert(name).inserted else { throw Invalid(description: "option '\(Self.clip(name))' given twice") }
            switch name {
            case "w": width = try Self.integer(value, name, 1...maximumSide)
            case "h": height = try Self.integer(value, name, 1...maximumSide)
            case "fit":
                guard let fit = Fit(rawValue: value) else { throw Invalid(description: "fit must be contain or cover") }
                self.fit = fit
            case "dpr": dpr = try Self.number(value, name, 1...4)
            case "f":
                guard let format = Format(rawValue: value) else {
                    throw Invalid(description: "f must be jpeg, png, webp, avif or auto")
                }
                if format == .avif && !ImageServer.isAVIFAvailable {
                    throw Invalid(description: "f:avif needs a build with HEIF support (LUMEN_HEIF=1)")
                }
                self.format = format
            case "q": quality = try Self.integer(value, name, 1...100)
            case "blur": blur = try Self.number(value, name, 0.1...100)
            case "gray": isGray = try Self.flag(value, name)
            case "circle": isCircle = try Self.flag(value, name)
            case "radius": radius = try Self.number(value, name, 1...Double(maximumSide))
            case "upscale": upscale = try Self.flag(value, name)
            default: throw Invalid(description: "unknown option '\(Self.clip(name))'")
            }
        }
        for side in [width, height].compactMap({ $0 }) where Double(side) * dpr > Double(maximumSide) {
            throw Invalid(description: "w or h times dpr is over the largest side, \(maximumSide)")
        }
    }

    /// The box in pixels, `dpr` applied.
    public var pixelWidth: Int? { width.map { Int((Double($0) * dpr).rounded()) } }
    public var pixelHeight: Int? { height.map { Int((Double($0) * dpr).rounded()) } }

    /// One spelling per set of options: names sorted, `dpr` folded into the sizes, defaults
    /// left out; `_` for none.
    public var canonical: String {
        var parts: [String] = []
        if let blur { parts.append("blur:\(Self.text(blur))") }
        if isCircle { parts.append("circle:1") }
        if let format { parts.append("f:\(format.rawValue)") }
        if fit != .contain { parts.append("fit:\(fit.rawValue)") }
        if isGray { parts.append("gray:1") }
        if let pixelHeight { parts.append("h:\(pixelHeight)") }
        if let quality { parts.append("q:\(quality)") }
        if let radius { parts.append("radius:\(Self.text(radius))") }
        if upscale { parts.append("upscale:1") }
        if let pixelWidth { parts.append("w:\(pixelWidth)") }
        return parts.isEmpty ? "_" : parts.joined(separator: ",")
    }

    private static func integer(_ text: String, _ name: String, _ range: ClosedRange<Int>) throws(Invalid) -> Int {
        guard text.allSatisfy(\.isASCIIDigit), text.count <= 9, let value = Int(text), range.contains(value) else {
            throw Invalid(description: "\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    private static func number(_ input: String, _ name: String, _ range: ClosedRange<Double>) throws(Invalid) -> Double {
        guard input.count <= 12, input.allSatisfy({ $0.isASCIIDigit || $0 == "." }), let value = Double(input),
              value.isFinite, range.contains(value) else {
            throw Invalid(description: "\(name) must be a number from \(text(range.lowerBound)) to \(text(range.upperBound))")
        }
        return value
    }

    private static func flag(_ text: String, _ name: String) throws(Invalid) -> Bool {
        guard text == "1" || text == "0" else { throw Invalid(description: "\(name) must be 1 or 0") }
        return text == "1"
    }

    private static func text(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e9 ? String(Int(value)) : String(value)
    }

    /// What of a client's text goes into a reason: short, printable.
    static func clip<S: StringProtocol>(_ text: S) -> String {
        String(text.prefix(32).map { $0.isASCII && !$0.isNewline && $0 != "\0" ? $0 : "?" })
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
