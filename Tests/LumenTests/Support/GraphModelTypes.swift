import Foundation
import Lumen

// The pieces of the work graph's reference model (GraphModel.swift): requests, tasks, stage
// tasks, held calls, and the atomic steps operations are made of.

/// A request of the model.
struct ModelRequest: Hashable, CustomStringConvertible {
    /// How the request is made.
    enum Kind: Hashable {
        /// `imageTask(with:)`.
        case image
        /// `image(for:)` in a Swift task (cancelled by cancelling that task).
        case awaited
        /// `dataTask(with:)`: the original bytes, from the fetch stage.
        case data
    }

    var kind = Kind.image
    var url: Int
    /// The decode size (`maxPixelSize`), 0 for the original size.
    var size: Int
    var chain: [String]
    var priority: ImageRequest.Priority

    /// The key of the stage with the first `count` processors applied.
    func key(count: Int) -> StageKey { StageKey(url: url, size: size, chain: Array(chain.prefix(count))) }
    var key: StageKey { key(count: chain.count) }

    var description: String {
        switch kind {
        case .image: "\(key) \(priority)"
        case .awaited: "\(key) \(priority) awaited"
        case .data: "data u\(url) \(priority)"
        }
    }
}

/// Why a task failed: the held call (by model index) that failed.
enum ModelError: Hashable, CustomStringConvertible {
    case load(call: Int)
    case decode(call: Int)
    case process(call: Int, name: String)

    var call: Int {
        switch self {
        case .load(let call), .decode(let call), .process(let call, _): call
        }
    }

    var description: String {
        switch self {
        case .load(let call): "load failure #\(call)"
        case .decode(let call): "decode failure #\(call)"
        case .process(let call, let name): "processor \(name) failure #\(call)"
        }
    }
}

/// Bytes received, as `ImageTask.progress` reports them.
struct ModelProgress: Hashable, CustomStringConvertible {
    var completed = 0
    var total = 0
    var description: String { "\(completed)/\(total)" }
}

/// A task of the model.
struct ModelTask {
    enum State: Hashable {
        case running(top: Int)
        /// `fromMemory`: the response's `cacheType` must be `.memory`.
        case succeeded(fromMemory: Bool)
        case failed(ModelError)
        case cancelled
        /// Started after `invalidate()`.
        case invalidated
    }

    var request: ModelRequest
    var priority: ImageRequest.Priority
    var state: State
    var progress = ModelProgress()

    var isRunning: Bool {
        if case .running = state { return true }
        return false
    }
}

/// A subscriber of a stage task: a request or the stage above.
enum ModelSubscriber: Hashable {
    case task(Int)
    case node(Int)
}

/// A stage task of the model.
struct ModelNode {
    enum Phase: Hashable {
        /// Created, no subscriber yet.
        case idle
        /// Subscribed to the stage below.
        case waiting
        /// Pending in the download queue.
        case queued
        /// Its held call runs.
        case working
        case ended
    }

    let key: StageKey
    /// The request that created it (its processors, its memory prefix).
    let request: ModelRequest
    /// The longest processor prefix of `request` the memory cache held when it started.
    let cachedPrefix: Int?
    var subscribers: [ModelSubscriber] = []
    var priority = ImageRequest.Priority.veryLow
    var phase = Phase.idle
    var dependency: Int?
    /// Whether some request subscribed to it as its final stage: its image goes to memory.
    var requestedFinal = false
    /// Whether its input came from the memory cache (its result's `cacheType` is `.memory`).
    var fromMemory = false
    var lastProgress: ModelProgress?
    /// Its held call (model index) while working.
    var call: Int?
}

/// A held call the model expects: what it is for and how it must stand.
struct ModelCall {
    let stage: ImagePipeline.Stage
    let key: StageKey
    let node: Int
    var state = HeldCallState.waiting
    var delivered = 0
    /// Whether the test gave it its last command (it is on its way to its end).
    var isCommanded = false
    /// Whether a decode's cancellation flag is set.
    var isCancellationSet = false
    /// Whether a load's queue item holds a download slot.
    var holdsSlot = false
    /// Whether the pipeline took a decode's error for an interruption.
    var isInterrupted = false
    /// The id of the pipeline's call it was matched with.
    var boundID: Int?
}

/// One atomic step of an operation. A held call's command takes a few steps on the worker
/// that runs it; an operation of the test takes one or a few on the test's thread. Operations
/// that race are modelled by every interleaving of their steps.
enum ModelStep: CustomStringConvertible {
    /// A load hands over `count` more bytes (progress to the subscribers).
    case chunk(call: Int, count: Int)
    /// A load told to succeed hands over the rest of its bytes.
    case deliverRest(call: Int)
    /// A load returns or throws; its stage completes or fails.
    case loadEnded(call: Int, success: Bool)
    /// A load's queue item ends: its download slot is free.
    case loadSlotFreed(call: Int)
    /// A decode looks at its cancellation, then succeeds or throws.
    case decoderCheck(call: Int, success: Bool)
    /// A decode or processing that produced its image stores it for the requests that asked.
    case store(call: Int)
    /// The stage of a decode or processing that produced its image completes.
    case finish(call: Int)
    /// The stage of a decode or processing that threw fails (or, cancelled, just ends).
    case failure(call: Int)
    /// A decode that threw: the pipeline looks at its cancellation to tell an interruption
    /// (nobody gets the error) from a failure.
    case catchDecodeError(call: Int)
    case start(ModelRequest)
    /// `ImageTask.cancel()` under the graph's lock: cancelled stages leave their pools,
    /// queued work leaves its queue, running decodes find their cancellation set.
    case cancel(task: Int)
    /// Cancelled loads (their Swift tasks cancelled after the lock) have unwound: their
    /// download slots are free.
    case releaseCancelledLoads
    case setPriority(task: Int, ImageRequest.Priority)
    /// `ImagePipeline.invalidate()`: cancels every running task, fails later ones.
    case invalidate

    var description: String {
        switch self {
        case .chunk(let call, let count): "chunk(#\(call), \(count))"
        case .deliverRest(let call): "deliverRest(#\(call))"
        case .loadEnded(let call, let success): "loadEnded(#\(call), \(success))"
        case .loadSlotFreed(let call): "loadSlotFreed(#\(call))"
        case .decoderCheck(let call, let success): "decoderCheck(#\(call), \(success))"
        case .store(let call): "store(#\(call))"
        case .finish(let call): "finish(#\(call))"
        case .failure(let call): "failure(#\(call))"
        case .catchDecodeError(let call): "catchDecodeError(#\(call))"
        case .start(let request): "start(\(request))"
        case .cancel(let task): "cancel(t\(task))"
        case .releaseCancelledLoads: "releaseCancelledLoads"
        case .setPriority(let task, let priority): "priority(t\(task), \(priority))"
        case .invalidate: "invalidate"
        }
    }

    /// Every interleaving of `a` and `b` that keeps each one's order.
    static func interleavings(_ a: [ModelStep], _ b: [ModelStep]) -> [[ModelStep]] {
        if a.isEmpty { return [b] }
        if b.isEmpty { return [a] }
        return interleavings(Array(a.dropFirst()), b).map { [a[0]] + $0 } + interleavings(a, Array(b.dropFirst())).map { [b[0]] + $0 }
    }
}

/// Per-stage counters, as ``ImagePipeline/Metrics/StageMetrics``.
struct ModelStageCounts: Hashable {
    var started = 0
    var joined = 0
    var completed = 0
    var failed = 0
    var cancelled = 0
}
