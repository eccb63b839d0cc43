import Foundation
import Lumen

// The reference model of the work graph for GraphModelTests.swift, written from issue 3 and
// DESIGN §1–2: stage tasks in pools keyed by stage, subscribers, priority as the maximum over
// live subscribers, cancellation when the last subscriber leaves, failures to every subscriber
// and out of the pool at once, final images in the memory cache. It runs in steps: each
// operation moves it to the state the pipeline must reach once the operation's effects have
// settled (every call the test holds is waiting again).

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
    /// Images stored in the memory cache.
    private(set) var memoryWrites = 0
    /// Fetch nodes pending in the download queue, with their place in it.
    private(set) var pendingLoads: [(node: Int, sequence: Int)] = []
    private var runningLoads = 0
    private(set) var isInvalidated = false
    private var sequence = 0
    /// Held decode calls (not commanded) the last operation cancelled: the test wakes them.
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

    /// The steps of the test's command `command` to held call `index`.
    func steps(_ command: HeldCallCommand, call index: Int) -> [ModelStep] {
        switch (calls[index].stage, command) {
        case (.fetch, .chunk(let count)): [.chunk(call: index, count: count)]
        case (.fetch, .succeed): [.deliverRest(call: index), .loadEnded(call: index, success: true), .loadSlotFreed(call: index)]
        case (.fetch, _): [.loadEnded(call: index, success: false), .loadSlotFreed(call: index)]
        case (.decode, .succeed): [.decoderCheck(call: index, success: true), .store(call: index), .finish(call: index)]
        case (.decode, _): [.decoderCheck(call: index, success: false), .catchDecodeError(call: index), .failure(call: index)]
        case (.process, .succeed): [.store(call: index), .finish(call: index)]
        case (.process, _): [.failure(call: index)]
        }
    }

    /// The steps of cancelling task `id`.
    static func cancelSteps(task id: Int) -> [ModelStep] { [.cancel(task: id), .releaseCancelledLoads] }

    /// Records that the test gave call `index` a command that ends it.
    mutating func markCommanded(call index: Int) { calls[index].isCommanded = true }

    /// Applies `steps` in order.
    mutating func apply(_ steps: [ModelStep]) {
        decodesToWake = []
        for step in steps { apply(step) }
    }

    private mutating func apply(_ step: ModelStep) {
        switch step {
        case .chunk(let index, let count):
            let total = GraphUniverse.body(0).count
            let end = min(total, calls[index].delivered + count)
            bytesDownloaded += end - calls[index].delivered
            calls[index].delivered = end
            if isLive(calls[index].node) { send(ModelProgress(completed: end, total: total), to: .node(calls[index].node)) }
        case .deliverRest(let index):
            let total = GraphUniverse.body(0).count
            if calls[index].delivered < total {
                bytesDownloaded += total - calls[index].delivered
                calls[index].delivered = total
                if isLive(calls[index].node) { send(ModelProgress(completed: total, total: total), to: .node(calls[index].node)) }
            }
        case .loadEnded(let index, let success):
            calls[index].state = success ? .succeeded : .failed
            let node = calls[index].node
            guard isLive(node) else { return } // its stage was cancelled: it ends unseen
            if success { finish(node) } else { fail(node, .load(call: index)) }
        case .loadSlotFreed(let index):
            freeSlot(of: index)
        case .decoderCheck(let index, let success):
            calls[index].state = calls[index].isCancellationSet ? .cancelled : success ? .succeeded : .failed
        case .store(let index):
            if calls[index].stage == .process { calls[index].state = .succeeded }
            guard calls[index].state == .succeeded else { return }
            let node = nodes[calls[index].node]
            // Stored for the requests that asked, even when the stage was cancelled meanwhile.
            if isMemoryCacheEnabled && node.requestedFinal {
                memory.insert(node.key)
                memoryWrites += 1
            }
        case .finish(let index):
            if calls[index].state == .cancelled {
                decodesInterrupted += 1
            } else if isLive(calls[index].node) {
                finish(calls[index].node)
            }
        case .catchDecodeError(let index):
            if calls[index].state == .cancelled || calls[index].isCancellationSet {
                calls[index].isInterrupted = true
                decodesInterrupted += 1
            }
        case .failure(let index):
            let call = calls[index]
            if call.stage == .process { calls[index].state = .failed }
            if !call.isInterrupted && isLive(call.node) {
                fail(call.node, call.stage == .decode ? .decode(call: index) : .process(call: index, name: call.key.chain.last ?? ""))
            }
        case .start(let request):
            start(request)
            admitLoads()
        case .cancel(let id):
            guard case .running(let top) = tasks[id].state else { return }
            tasks[id].state = .cancelled
            unsubscribe(.task(id), from: top)
        case .releaseCancelledLoads:
            for index in calls.indices where calls[index].state == .cancelled { freeSlot(of: index) }
        case .setPriority(let id, let priority):
            tasks[id].priority = priority
            if case .running(let top) = tasks[id].state { updatePriority(top) }
        case .invalidate:
            isInvalidated = true
            for id in tasks.indices { apply(.cancel(task: id)) }
        }
    }

    private func isLive(_ node: Int) -> Bool { nodes[node].phase != .ended }

    /// A load's queue item ended: the queue starts what its slot allows.
    private mutating func freeSlot(of index: Int) {
        guard calls[index].holdsSlot else { return }
        calls[index].holdsSlot = false
        runningLoads -= 1
        admitLoads()
    }

    private mutating func start(_ request: ModelRequest) {
        let id = tasks.count
        if isInvalidated {
            tasks.append(ModelTask(request: request, priority: request.priority, state: .invalidated))
            return
        }
        if request.kind == .data {
            let fetch = fetchNode(request)
            tasks.append(ModelTask(request: request, priority: request.priority, state: .running(top: fetch)))
            subscribe(.task(id), to: fetch, priority: request.priority)
            return
        }
        if isMemoryCacheEnabled && memory.contains(request.key) {
            tasks.append(ModelTask(request: request, priority: request.priority, state: .succeeded(fromMemory: true)))
            return
        }
        var cachedPrefix: Int?
        if isMemoryCacheEnabled && !request.chain.isEmpty {
            cachedPrefix = stride(from: request.chain.count - 1, through: 0, by: -1).first { memory.contains(request.key(count: $0)) }
        }
        let top = node(for: request, count: request.chain.count, cachedPrefix: cachedPrefix)
        nodes[top].requestedFinal = true
        tasks.append(ModelTask(request: request, priority: request.priority, state: .running(top: top)))
        subscribe(.task(id), to: top, priority: request.priority)
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
            calls[calls.count - 1].holdsSlot = true
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
                // A load on its way to its end ends as commanded; a held one sees the cancellation.
                if !calls[call].isCommanded { calls[call].state = .cancelled }
            case .decode:
                calls[call].isCancellationSet = true
                if !calls[call].isCommanded {
                    // The test wakes it; it finds its cancellation and the pipeline counts an
                    // interrupted decode.
                    calls[call].state = .cancelled
                    decodesInterrupted += 1
                    decodesToWake.append(call)
                }
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
