import Foundation
import Synchronization
import Lumen
import LumenTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A data loader whose every load waits until the test delivers it or fails it, one load at
/// a time, in any order, and then serves the URL's body.
final class GatedLoader: DataLoading {
    /// A load that has started and not ended.
    struct InFlight: Sendable {
        var id: Int
        var url: URL
    }

    private enum Outcome { case deliver, fail(Int) }

    private struct State {
        var nextID = 0
        var inFlight: [Int: URL] = [:]
        var gates: [Int: CheckedContinuation<Outcome, any Error>] = [:]
        var cancelledBeforeParking: Set<Int> = []
        var started: [URL: Int] = [:]
        var cancelled = 0
    }

    private let state = Mutex(State())
    private let signal: ChangeSignal
    /// The body per URL.
    private let bodies: [URL: Data]

    /// Creates a loader serving `bodies` and pinging `signal` on every change.
    init(signal: ChangeSignal, bodies: [URL: Data]) {
        self.signal = signal
        self.bodies = bodies
    }

    /// The loads in flight, oldest first.
    var inFlight: [InFlight] {
        state.withLock { $0.inFlight.map { InFlight(id: $0.key, url: $0.value) }.sorted { $0.id < $1.id } }
    }

    /// Loads of `url` started so far.
    func started(_ url: URL) -> Int { state.withLock { $0.started[url, default: 0] } }

    /// Loads that ended by cancellation.
    var cancelledCount: Int { state.withLock { $0.cancelled } }

    /// Lets load `id` return its bytes (no-op if it already ended or has not parked yet:
    /// then it returns `false`).
    func deliver(_ id: Int) -> Bool { finish(id, .deliver) }

    /// Makes load `id` throw a status error with `status`.
    func fail(_ id: Int, status: Int) -> Bool { finish(id, .fail(status)) }

    /// Whether load `id` is parked at its gate.
    func isParked(_ id: Int) -> Bool { state.withLock { $0.gates[id] != nil } }

    private func finish(_ id: Int, _ outcome: Outcome) -> Bool {
        let gate = state.withLock { state -> CheckedContinuation<Outcome, any Error>? in
            guard let gate = state.gates.removeValue(forKey: id) else { return nil }
            state.inFlight[id] = nil
            return gate
        }
        gate?.resume(returning: outcome)
        signal.ping()
        return gate != nil
    }

    /// Ends every parked load with a cancellation error (cleanup after a failed seed).
    func abandonAll() {
        let gates = state.withLock { state in
            let gates = state.gates
            state.gates = [:]
            state.inFlight = [:]
            return gates
        }
        gates.values.forEach { $0.resume(throwing: CancellationError()) }
        signal.ping()
    }

    /// Records the load, waits at its gate until delivered, failed or cancelled, then serves
    /// the URL's body in one chunk (or throws the status error, or `CancellationError`).
    func loadData(for request: URLRequest, didReceive: @Sendable (Data, URLResponse) throws -> Void) async throws -> URLResponse {
        let url = request.url!
        let id = state.withLock { state in
            state.nextID += 1
            state.inFlight[state.nextID] = url
            state.started[url, default: 0] += 1
            return state.nextID
        }
        signal.ping()
        let outcome: Outcome
        do {
            outcome = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Outcome, any Error>) in
                    let cancelled = state.withLock { state in
                        if state.cancelledBeforeParking.remove(id) != nil { return true }
                        state.gates[id] = continuation
                        return false
                    }
                    if cancelled { continuation.resume(throwing: CancellationError()) }
                    signal.ping()
                }
            } onCancel: {
                let gate = state.withLock { state -> CheckedContinuation<Outcome, any Error>? in
                    guard state.inFlight[id] != nil else { return nil }
                    state.inFlight[id] = nil
                    state.cancelled += 1
                    guard let gate = state.gates.removeValue(forKey: id) else {
                        state.cancelledBeforeParking.insert(id)
                        return nil
                    }
                    return gate
                }
                gate?.resume(throwing: CancellationError())
                signal.ping()
            }
        }
        switch outcome {
        case .fail(let status):
            throw MockDataLoader.StatusError(statusCode: status)
        case .deliver:
            let data = bodies[url] ?? Data([0, 1, 255])
            let response = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1",
                                           headerFields: ["Content-Length": String(data.count)])!
            try didReceive(data, response)
            return response
        }
    }
}

/// Decodes bytes made by ``body(natural:index:)`` as a square image of the encoded natural
/// size, scaled down (never up) to the requested max pixel size; records every decode's URL
/// index and size.
final class NaturalSizeRecordingDecoder: ImageDecoding, @unchecked Sendable { // NSCondition guards the gate
    /// Bytes naming a square image of `natural` pixels a side, for the URL at `index`.
    static func body(natural: Int, index: Int) -> Data {
        Data([UInt8(natural >> 8), UInt8(natural & 0xFF), UInt8(index), 0x5A])
    }

    /// PNG bytes of a square image of `natural` pixels a side, for the default decoder.
    static func png(natural: Int, index: Int) -> Data {
        let bitmap = Bitmap(width: natural, height: natural, format: .rgb8) { buffer in
            for i in 0..<(natural * natural * 3) { buffer[i] = UInt8(truncatingIfNeeded: i / 3 &* 7 &+ index) }
        }
        return try! bitmap.encode(as: .png)
    }

    /// Thrown for bytes too short to name a size.
    struct ShortData: Error {}

    private let decodes = Mutex<[(index: Int, size: DecodeSize?)]>([])

    /// Every decode so far: the URL index from the bytes and the requested size.
    var recorded: [(index: Int, size: DecodeSize?)] { decodes.withLock { $0 } }

    /// Held decodes wait on this (on their worker thread) until ``isHolding`` is cleared.
    private let gate = NSCondition()
    private let holding = Mutex(false)

    /// While `true`, decodes wait before they start; clearing it lets them all go.
    var isHolding: Bool {
        get { holding.withLock { $0 } }
        set {
            gate.lock()
            holding.withLock { $0 = newValue }
            gate.broadcast()
            gate.unlock()
        }
    }

    /// Waits while held, then decodes (see the type's summary).
    /// - Throws: ``ShortData`` for bytes that name no size.
    func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        gate.lock()
        while holding.withLock({ $0 }) { gate.wait() }
        gate.unlock()
        guard data.count >= 3 else { throw ShortData() }
        let bytes = [UInt8](data)
        let natural = Int(bytes[0]) << 8 | Int(bytes[1])
        decodes.withLock { $0.append((Int(bytes[2]), context.options.size)) }
        var side = natural
        switch context.options.size {
        case .maxPixelSize(let n)?: side = min(natural, max(1, n))
        case .size(let w, let h, _)?: side = min(natural, max(1, max(w, h)))
        case nil: break
        }
        return ImageContainer(image: Bitmap(width: side, height: side, format: .rgb8,
                                            pixels: [UInt8](repeating: bytes[2], count: side * side * 3)))
    }
}

