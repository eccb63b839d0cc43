import Foundation
import Lumen

// The reference model of the work graph for GraphModelTests.swift, written from issue 3 and
// DESIGN §1–2: stage tasks in pools keyed by stage, subscribers, priority as the maximum over
// live subscribers, cancellation when the last subscriber leaves, failures to every subscriber
// and out of the pool at once, final images in the memory cache. It runs in steps: each
// operation moves it to the state the pipeline must reach once the operation's effects have
// settled (every call the test holds is waiting again).

/// A request of the model.
struct ModelRequest: Hashable, CustomStringConvertible {
    var url: Int
    /// The decode size (`maxPixelSize`), 0 for the original size.
    var size: Int
    var chain: [String]
    var priority: ImageRequest.Priority

    /// The key of the stage with the first `count` processors applied.
    func key(count: Int) -> StageKey { StageKey(url: url, size: size, chain: Array(chain.prefix(count))) }
    var key: StageKey { key(count: chain.count) }

    var description: String { "\(key) \(priority)" }
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
    /// The id of the pipeline's call it was matched with.
    var boundID: Int?
}

/// Per-stage counters, as ``ImagePipeline/Metrics/StageMetrics``.
struct ModelStageCounts: Hashable {
    var started = 0
    var joined = 0
    var completed = 0
    var failed = 0
    var cancelled = 0
}

/// The work graph's reference model.
struct GraphModel {
    let isMemoryCacheEnabled: Bool
    let downloadLimit: Int

    private(set) var tasks: [ModelTask] = []
    private(set) var nodes: [ModelNode] = []
    private(set) var calls: [ModelCall] = []
    private(set) var pool: [StageKey: Int] = [:]
    private(set) var memory: Set<StageKey> = []
    private(set) var counts: [ImagePipeline.Stage: ModelStageCounts] = [.fetch: .init(), .decode: .init(), .process: .init()]
    private(set) var bytesDownloaded = 0
    private(set) var decodesInterrupted = 0
    /// Fetch nodes pending in the download queue, with their place in it.
    private(set) var pendingLoads: [(node: Int, sequence: Int)] = []
    private var runningLoads = 0
    private var sequence = 0
    /// Decode calls whose cancellation the last operation set (the test wakes them).
    private(set) var decodesToWake: [Int] = []

    init(isMemoryCacheEnabled: Bool, downloadLimit: Int) {
        self.isMemoryCacheEnabled = isMemoryCacheEnabled
        self.downloadLimit = downloadLimit
    }

    // MARK: - Derived state

    var liveRequests: Int { tasks.count { $0.isRunning } }

    /// Live nodes (in a pool).
    var liveNodes: [(id: Int, node: ModelNode)] { pool.values.sorted().map { ($0, nodes[$0]) } }

    /// The pending downloads' priorities in the order the queue starts them.
    var pendingLoadOrder: [Int] {
        pendingLoads.sorted { a, b in
            let pa = nodes[a.node].priority, pb = nodes[b.node].priority
            return pa != pb ? pa > pb : a.sequence < b.sequence
        }.map(\.node)
    }

    /// Calls still held (waiting for a command), by stage.
    func heldCalls(_ stage: ImagePipeline.Stage) -> [Int] {
        calls.indices.filter { calls[$0].stage == stage && calls[$0].state == .waiting }
    }

    /// Whether call `index` belongs to a node that was cancelled while it ran (a processing
    /// nobody waits for any more).
    func isOrphan(_ index: Int) -> Bool { nodes[calls[index].node].phase == .ended }

    private func priority(of subscriber: ModelSubscriber) -> ImageRequest.Priority {
        switch subscriber {
        case .task(let id): tasks[id].priority
        case .node(let id): nodes[id].priority
        }
    }

    mutating func bind(call index: Int, to id: Int) { calls[index].boundID = id }

    // MARK: - Operations

    /// Starts `request`; answers the task's index.
    mutating func start(_ request: ModelRequest) -> Int {
        decodesToWake = []
        let id = tasks.count
        if isMemoryCacheEnabled && memory.contains(request.key) {
            tasks.append(ModelTask(request: request, priority: request.priority, state: .succeeded(fromMemory: true)))
            return id
        }
        var cachedPrefix: Int?
        if isMemoryCacheEnabled && !request.chain.isEmpty {
            cachedPrefix = stride(from: request.chain.count - 1, through: 0, by: -1).first { memory.contains(request.key(count: $0)) }
        }
        let top = node(for: request, count: request.chain.count, cachedPrefix: cachedPrefix)
        nodes[top].requestedFinal = true
        tasks.append(ModelTask(request: request, priority: request.priority, state: .running(top: top)))
        subscribe(.task(id), to: top, priority: request.priority)
        admitLoads()
        return id
    }

    mutating func cancel(task id: Int) {
        decodesToWake = []
        guard case .running(let top) = tasks[id].state else { return }
        tasks[id].state = .cancelled
        unsubscribe(.task(id), from: top)
        admitLoads()
    }

    mutating func setPriority(task id: Int, _ priority: ImageRequest.Priority) {
        decodesToWake = []
        tasks[id].priority = priority
        if case .running(let top) = tasks[id].state { updatePriority(top) }
        admitLoads()
    }

    /// A held load hands over `count` more bytes.
    mutating func deliverChunk(call index: Int, count: Int) {
        decodesToWake = []
        let total = GraphUniverse.body(0).count
        let end = min(total, calls[index].delivered + count)
        bytesDownloaded += end - calls[index].delivered
        calls[index].delivered = end
        send(ModelProgress(completed: end, total: total), to: .node(calls[index].node))
    }

    /// A held call ends well.
    mutating func succeed(call index: Int) {
        decodesToWake = []
        let call = calls[index]
        calls[index].state = .succeeded
        if call.stage == .fetch {
            let total = GraphUniverse.body(0).count
            if call.delivered < total {
                bytesDownloaded += total - call.delivered
                send(ModelProgress(completed: total, total: total), to: .node(call.node))
            }
            calls[index].delivered = total
        }
        if isOrphan(index) {
            // A processing whose stage was cancelled still stores what it made for requests
            // that asked for it.
            if isMemoryCacheEnabled && nodes[call.node].requestedFinal { memory.insert(call.key) }
        } else {
            finish(call.node)
        }
        admitLoads()
    }

    /// A held call fails.
    mutating func fail(call index: Int) {
        decodesToWake = []
        let call = calls[index]
        calls[index].state = .failed
        if !isOrphan(index) {
            let error: ModelError = switch call.stage {
            case .fetch: .load(call: index)
            case .decode: .decode(call: index)
            case .process: .process(call: index, name: call.key.chain.last ?? "")
            }
            fail(call.node, error)
        }
        admitLoads()
    }

    // MARK: - The graph

    /// The node for `request`'s first `count` processors: the pooled one, or a new one.
    private mutating func node(for request: ModelRequest, count: Int, cachedPrefix: Int?) -> Int {
        let key = request.key(count: count)
        if let id = pool[key] { return id }
        nodes.append(ModelNode(key: key, request: request, cachedPrefix: cachedPrefix))
        pool[key] = nodes.count - 1
        return nodes.count - 1
    }

    private mutating func fetchNode(_ request: ModelRequest) -> Int {
        let key = StageKey.fetch(request.url)
        if let id = pool[key] { return id }
        nodes.append(ModelNode(key: key, request: request, cachedPrefix: nil))
        pool[key] = nodes.count - 1
        return nodes.count - 1
    }

    private mutating func subscribe(_ subscriber: ModelSubscriber, to id: Int, priority: ImageRequest.Priority) {
        let stage = nodes[id].key.stage
        nodes[id].subscribers.append(subscriber)
        if nodes[id].phase == .idle {
            counts[stage]!.started += 1
            nodes[id].priority = priority
            start(id)
        } else {
            counts[stage]!.joined += 1
            if priority > nodes[id].priority { updatePriority(id) }
            if let progress = nodes[id].lastProgress { send(progress, to: subscriber) }
        }
    }

    private mutating func start(_ id: Int) {
        let node = nodes[id]
        switch node.key.stage {
        case .fetch:
            sequence += 1
            pendingLoads.append((id, sequence))
            nodes[id].phase = .queued
        case .decode:
            let fetch = fetchNode(node.request)
            nodes[id].dependency = fetch
            nodes[id].phase = .waiting
            subscribe(.node(id), to: fetch, priority: node.priority)
        case .process:
            let count = node.key.chain.count
            if node.cachedPrefix == count - 1 {
                nodes[id].fromMemory = true
                startWork(id)
                return
            }
            let below = self.node(for: node.request, count: count - 1, cachedPrefix: node.cachedPrefix)
            nodes[id].dependency = below
            nodes[id].phase = .waiting
            subscribe(.node(id), to: below, priority: node.priority)
        }
    }

    /// The node's held call starts (a decode or processing, or an admitted download).
    private mutating func startWork(_ id: Int) {
        nodes[id].phase = .working
        nodes[id].call = calls.count
        calls.append(ModelCall(stage: nodes[id].key.stage, key: nodes[id].key, node: id))
    }

    /// Starts pending downloads while the queue has room: highest priority first, FIFO within
    /// a level (a re-prioritised item goes to the back of its new level).
    private mutating func admitLoads() {
        while runningLoads < downloadLimit, let next = pendingLoadOrder.first {
            pendingLoads.removeAll { $0.node == next }
            runningLoads += 1
            startWork(next)
        }
    }

    private mutating func updatePriority(_ id: Int) {
        let priority = nodes[id].subscribers.map { self.priority(of: $0) }.max() ?? .veryLow
        guard priority != nodes[id].priority else { return }
        nodes[id].priority = priority
        if nodes[id].phase == .queued, let index = pendingLoads.firstIndex(where: { $0.node == id }) {
            sequence += 1
            pendingLoads[index].sequence = sequence
        }
        if let dependency = nodes[id].dependency { updatePriority(dependency) }
    }

    private mutating func unsubscribe(_ subscriber: ModelSubscriber, from id: Int) {
        guard let index = nodes[id].subscribers.firstIndex(of: subscriber) else { return }
        nodes[id].subscribers.remove(at: index)
        if nodes[id].subscribers.isEmpty { cancel(id) } else { updatePriority(id) }
    }

    /// The last subscriber left: the node stops its work and leaves its dependency.
    private mutating func cancel(_ id: Int) {
        let node = nodes[id]
        counts[node.key.stage]!.cancelled += 1
        leavePool(id)
        switch node.phase {
        case .queued:
            pendingLoads.removeAll { $0.node == id }
        case .working:
            let call = node.call!
            switch node.key.stage {
            case .fetch:
                calls[call].state = .cancelled
                runningLoads -= 1
            case .decode:
                calls[call].state = .cancelled
                decodesInterrupted += 1
                decodesToWake.append(call)
            case .process:
                break // the processor cannot be stopped: it runs on, orphaned, until released
            }
        case .waiting:
            nodes[id].dependency = nil
            unsubscribe(.node(id), from: node.dependency!)
        case .idle, .ended:
            break
        }
    }

    private mutating func leavePool(_ id: Int) {
        if pool[nodes[id].key] == id { pool[nodes[id].key] = nil }
        nodes[id].phase = .ended
        nodes[id].subscribers = []
    }

    private mutating func send(_ progress: ModelProgress, to subscriber: ModelSubscriber) {
        switch subscriber {
        case .task(let id):
            tasks[id].progress = progress
        case .node(let id):
            nodes[id].lastProgress = progress
            for next in nodes[id].subscribers { send(progress, to: next) }
        }
    }

    private mutating func finish(_ id: Int) {
        let node = nodes[id]
        counts[node.key.stage]!.completed += 1
        if node.key.stage == .fetch { runningLoads -= 1 }
        if node.key.stage != .fetch && isMemoryCacheEnabled && node.requestedFinal { memory.insert(node.key) }
        leavePool(id)
        for subscriber in node.subscribers {
            switch subscriber {
            case .task(let task):
                tasks[task].state = .succeeded(fromMemory: node.fromMemory)
            case .node(let above):
                nodes[above].dependency = nil
                nodes[above].fromMemory = node.fromMemory
                startWork(above)
            }
        }
    }

    private mutating func fail(_ id: Int, _ error: ModelError) {
        let node = nodes[id]
        counts[node.key.stage]!.failed += 1
        if node.key.stage == .fetch && node.phase == .working { runningLoads -= 1 }
        nodes[id].dependency = nil
        leavePool(id)
        for subscriber in node.subscribers {
            switch subscriber {
            case .task(let task): tasks[task].state = .failed(error)
            case .node(let above): fail(above, error)
            }
        }
    }
}
