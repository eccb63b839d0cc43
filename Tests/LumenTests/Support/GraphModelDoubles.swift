import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Lumen

// Test doubles for the model-based test of the work graph (GraphModelTests.swift): a loader, a
// decoder and processors whose every call is held until the test says how it ends, and the
// reference computation of the images they make.


/// A stage key in the model's words: the URL's index, the decode size (0 for the original
/// size; `nil` for the fetch stage) and the processors applied, by name.
struct StageKey: Hashable, Comparable, CustomStringConvertible {
    var url: Int
    var size: Int?
    var chain: [String]

    static func fetch(_ url: Int) -> StageKey { StageKey(url: url, size: nil, chain: []) }

    var stage: ImagePipeline.Stage { size == nil ? .fetch : chain.isEmpty ? .decode : .process }

    /// The key of the stage below (the fetch for a decode).
    var below: StageKey {
        chain.isEmpty ? .fetch(url) : StageKey(url: url, size: size, chain: Array(chain.dropLast()))
    }

    var description: String {
        guard let size else { return "u\(url)" }
        return "u\(url)@\(size)" + (chain.isEmpty ? "" : "[\(chain.joined(separator: ","))]")
    }

    static func < (a: StageKey, b: StageKey) -> Bool { a.description < b.description }
}

/// The model's universe: URLs, their bytes, and what decoding and each processor make of them.
/// Every image says where it came from: its first pixel holds the URL index and the decode
/// size, and each processor appends a column of its name's first byte.
enum GraphUniverse {
    static func url(_ index: Int) -> URL { URL(string: "https://model.example/\(index).img")! }

    static func urlIndex(_ url: URL?) -> Int? {
        url.flatMap { Int($0.deletingPathExtension().lastPathComponent) }
    }

    /// The bytes served for URL `index`.
    static func body(_ index: Int) -> Data { Data([UInt8(index), 0x11, 0x22, 0x33, 0x44, 0x55]) }

    /// Width and height of a decode at `size` (0: the original size, 5×3).
    static func decodedSize(_ size: Int) -> (width: Int, height: Int) { size == 0 ? (5, 3) : (size, size) }

    /// The decoder's output for URL `url` at `size`.
    static func decoded(_ url: Int, size: Int) -> Bitmap {
        let (width, height) = decodedSize(size)
        var pixels: [UInt8] = []
        for i in 0..<(width * height) { pixels += [UInt8(url), UInt8(size), UInt8(i & 0xFF)] }
        return Bitmap(width: width, height: height, format: .rgb8, pixels: pixels)
    }

    /// `image` after the processor `name`: one more column, every byte the name's first byte.
    static func processed(_ image: Bitmap, by name: String) -> Bitmap {
        let mark = name.utf8.first ?? 0
        var pixels: [UInt8] = []
        for y in 0..<image.height {
            let row = y * image.width * 3
            pixels += image.pixels[row..<(row + image.width * 3)]
            pixels += [mark, mark, mark]
        }
        return Bitmap(width: image.width + 1, height: image.height, format: .rgb8, pixels: pixels)
    }

    /// The image a request for `key` must produce (a decode or processing key).
    static func image(for key: StageKey) -> Bitmap {
        key.chain.reduce(decoded(key.url, size: key.size ?? 0)) { processed($0, by: $1) }
    }

    /// The key `image` was made for, when it is exactly what that key produces.
    static func key(of image: Bitmap) -> StageKey? {
        guard image.format == .rgb8, image.pixels.count >= 3 else { return nil }
        let url = Int(image.pixels[0]), size = Int(image.pixels[1])
        let base = decodedSize(size).width
        guard image.width >= base else { return nil }
        let chain = (base..<image.width).map { String(UnicodeScalar(image.pixels[$0 * 3])) }
        let key = StageKey(url: url, size: size, chain: chain)
        return Self.image(for: key) == image ? key : nil
    }
}

/// How a held call ended, or that it is still held.
enum HeldCallState: Sendable, Hashable, CustomStringConvertible {
    /// Waiting for the test's next command.
    case waiting
    /// Carrying out a command.
    case working
    /// Ended by cancellation (a load's task was cancelled; a decode found its cancellation set).
    case cancelled
    case succeeded
    case failed
    /// A decode woken to find its cancellation set found it clear.
    case wokenWithoutCancellation

    var description: String {
        switch self {
        case .waiting: "waiting"
        case .working: "working"
        case .cancelled: "cancelled"
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .wokenWithoutCancellation: "woken without cancellation"
        }
    }
}

/// What the test tells a held call to do.
enum HeldCallCommand: Sendable {
    /// A load hands the pipeline this many more bytes and waits again.
    case chunk(Int)
    /// The call ends well (a load hands over the rest of its bytes).
    case succeed
    /// The call throws ``HeldCallFailure``.
    case fail
    /// A decode looks at its cancellation (the test expects it set) and ends.
    case wake
}

/// The error a held call throws when told to fail; `call` says which call.
struct HeldCallFailure: Error, Hashable {
    var call: Int
}

/// One call of the loader, the decoder or a processor.
struct HeldCall: Sendable {
    var id: Int
    var stage: ImagePipeline.Stage
    var key: StageKey
    var state = HeldCallState.waiting
    /// Bytes handed to the pipeline (loads).
    var delivered = 0
    /// Whether the call's input was what its key must get (the URL's bytes, the image below).
    var isInputValid = true
    /// A decode's cancellation flag.
    var isCancelled: (@Sendable () -> Bool)?
}

/// The calls of one run, each held until the test gives it a command.
final class HeldCalls: @unchecked Sendable { // state guarded by `condition`
    /// Told of every new call and every change of a call.
    let signal = ChangeSignal()
    private let condition = NSCondition()
    private var calls: [HeldCall] = []
    private var commands: [Int: HeldCallCommand] = [:]
    private var asyncWaiters: [Int: CheckedContinuation<HeldCallCommand, any Error>] = [:]
    private var cancelledWaits: Set<Int> = []

    /// Every call so far, in the order they arrived.
    var snapshot: [HeldCall] {
        condition.lock()
        defer { condition.unlock() }
        return calls
    }

    /// Records a new call; answers its id.
    func register(_ stage: ImagePipeline.Stage, key: StageKey, isInputValid: Bool, isCancelled: (@Sendable () -> Bool)? = nil) -> Int {
        condition.lock()
        let id = calls.count
        calls.append(HeldCall(id: id, stage: stage, key: key, isInputValid: isInputValid, isCancelled: isCancelled))
        condition.broadcast()
        condition.unlock()
        signal.ping()
        return id
    }

    /// Blocks the calling thread until `count` calls have arrived.
    func waitForCalls(_ count: Int) {
        condition.lock()
        defer { condition.unlock() }
        while calls.count < count { condition.wait() }
    }

    func update(_ id: Int, _ body: (inout HeldCall) -> Void) {
        condition.lock()
        body(&calls[id])
        condition.unlock()
        signal.ping()
    }

    /// Gives call `id` its next command.
    func give(_ command: HeldCallCommand, to id: Int) {
        condition.lock()
        let waiter = asyncWaiters.removeValue(forKey: id)
        if waiter == nil { commands[id] = command }
        condition.broadcast()
        condition.unlock()
        waiter?.resume(returning: command)
    }

    /// Blocks the calling thread (a decoding or processing worker) until call `id` has a command.
    func waitForCommand(_ id: Int) -> HeldCallCommand {
        condition.lock()
        defer { condition.unlock() }
        while commands[id] == nil { condition.wait() }
        return commands.removeValue(forKey: id)!
    }

    /// Suspends until call `id` has a command; throws `CancellationError` when the calling task
    /// is cancelled first.
    func nextCommand(_ id: Int) async throws -> HeldCallCommand {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HeldCallCommand, any Error>) in
                condition.lock()
                if let command = commands.removeValue(forKey: id) {
                    condition.unlock()
                    continuation.resume(returning: command)
                } else if cancelledWaits.remove(id) != nil {
                    condition.unlock()
                    continuation.resume(throwing: CancellationError())
                } else {
                    asyncWaiters[id] = continuation
                    condition.unlock()
                }
            }
        } onCancel: {
            condition.lock()
            let waiter = asyncWaiters.removeValue(forKey: id)
            if waiter == nil { cancelledWaits.insert(id) }
            condition.unlock()
            waiter?.resume(throwing: CancellationError())
        }
    }
}

/// A loader that serves ``GraphUniverse/body(_:)`` and holds every load until the test sends
/// chunks, success or failure; a cancelled load ends with `CancellationError`.
final class HeldLoader: DataLoading {
    let calls: HeldCalls

    init(calls: HeldCalls) { self.calls = calls }

    func loadData(for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void) async throws -> URLResponse {
        let index = GraphUniverse.urlIndex(request.url) ?? -1
        let id = calls.register(.fetch, key: .fetch(index), isInputValid: index >= 0)
        let body = GraphUniverse.body(max(0, index))
        let response = HTTPURLResponse(url: request.url!, statusCode: 200, httpVersion: "HTTP/1.1",
                                       headerFields: ["Content-Length": "\(body.count)"])!
        var delivered = 0
        while true {
            let command: HeldCallCommand
            do {
                command = try await calls.nextCommand(id)
            } catch {
                calls.update(id) { $0.state = .cancelled }
                throw error
            }
            calls.update(id) { $0.state = .working }
            switch command {
            case .chunk(let count):
                let end = min(body.count, delivered + count)
                try didReceive(body.subdata(in: delivered..<end), response)
                delivered = end
                calls.update(id) {
                    $0.state = .waiting
                    $0.delivered = end
                }
            case .succeed:
                if delivered < body.count { try didReceive(body.subdata(in: delivered..<body.count), response) }
                calls.update(id) {
                    $0.state = .succeeded
                    $0.delivered = body.count
                }
                return response
            case .fail, .wake:
                calls.update(id) { $0.state = .failed }
                throw HeldCallFailure(call: id)
            }
        }
    }
}

/// A decoder that makes ``GraphUniverse/decoded(_:size:)`` once the test releases the call,
/// and ends with an error when it finds its cancellation set.
struct HeldDecoder: ImageDecoding {
    let calls: HeldCalls

    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        let url = data.first.map(Int.init) ?? -1
        let size: Int
        switch context.options.size {
        case nil: size = 0
        case .maxPixelSize(let n): size = n
        case .size: size = -1
        }
        let isValid = url >= 0 && data == GraphUniverse.body(url) && size >= 0
        let id = calls.register(.decode, key: StageKey(url: url, size: size, chain: []), isInputValid: isValid) { context.isCancelled }
        let command = calls.waitForCommand(id)
        if context.isCancelled {
            calls.update(id) { $0.state = .cancelled }
            throw CancellationError()
        }
        switch command {
        case .succeed:
            calls.update(id) { $0.state = .succeeded }
            return ImageContainer(image: GraphUniverse.decoded(url, size: max(0, size)))
        case .fail, .chunk:
            calls.update(id) { $0.state = .failed }
            throw HeldCallFailure(call: id)
        case .wake:
            calls.update(id) { $0.state = .wokenWithoutCancellation }
            throw HeldCallFailure(call: id)
        }
    }
}

/// A processor named `name` that appends its column (``GraphUniverse/processed(_:by:)``) once
/// the test releases the call. Processors with the same name are the same processor.
struct HeldProcessor: ImageProcessing, Hashable {
    let name: String
    let calls: HeldCalls

    var identifier: String { "model.\(name)" }

    func process(_ image: Bitmap) throws -> Bitmap {
        let input = GraphUniverse.key(of: image)
        var key = input ?? StageKey(url: -1, size: -1, chain: [])
        key.chain.append(name)
        let id = calls.register(.process, key: key, isInputValid: input != nil)
        switch calls.waitForCommand(id) {
        case .succeed:
            calls.update(id) { $0.state = .succeeded }
            return GraphUniverse.processed(image, by: name)
        case .fail, .chunk, .wake:
            calls.update(id) { $0.state = .failed }
            throw HeldCallFailure(call: id)
        }
    }

    static func == (a: HeldProcessor, b: HeldProcessor) -> Bool { a.name == b.name }
    func hash(into hasher: inout Hasher) { hasher.combine(name) }
}
