import Foundation
import Synchronization
@testable import Lumen
import LumenTestSupport

// One seed of the model-based test of the work graph (GraphModelTests.swift): a random program
// of operations run against a pipeline and against ``GraphModel`` side by side. After each
// operation the test waits — polling counts, never sleeping — until the pipeline has reached
// the state the model predicts (every held call waiting again), then compares everything it
// can see.

/// One seed: a pipeline, the model, the program and its log.
final class GraphModelRun {
    static let sizes = [0, 4, 8]
    static let chains: [[String]] = [[], ["a"], ["a", "b"], ["a", "c"], ["b"], ["a", "b", "c"]]

    let seed: UInt64
    private var rng: SplitMix64
    var model: GraphModel
    let calls = HeldCalls()
    let pipeline: ImagePipeline
    private let processors: [String: HeldProcessor]
    let urlCount: Int
    var tasks: [TaskHandle] = []
    let observations: TaskObservations
    var log: [String] = []
    /// Held calls (by id) given the command that ends them.
    var commanded: Set<Int> = []
    /// Relative weights of the kinds of operation, drawn per seed.
    private var weights: [String: Int] = [:]

    init(seed: UInt64) {
        self.seed = seed
        var rng = SplitMix64(seed: seed)
        let memory = Bool.random(using: &rng)
        let limit = [1, 2, 6].randomElement(using: &rng)!
        urlCount = Int.random(in: 2...3, using: &rng)
        // Kind, scale: successes outweigh failures, so that work reaches the upper stages.
        let kinds = [("start", 3), ("join", 2), ("repeat", 2), ("retry", 1), ("cancel", 2), ("priority", 2), ("chunk", 1),
                     ("load", 3), ("decode", 3), ("process", 3), ("orphan", 2), ("fail", 1), ("race", 3)]
        for (kind, scale) in kinds { weights[kind] = scale * Int.random(in: 1...4, using: &rng) }
        self.rng = rng
        model = GraphModel(isMemoryCacheEnabled: memory, downloadLimit: limit)
        var processors: [String: HeldProcessor] = [:]
        for name in ["a", "b", "c"] { processors[name] = HeldProcessor(name: name, calls: calls) }
        self.processors = processors
        observations = TaskObservations(signal: calls.signal)
        GraphModelQueues.data.maxConcurrentCount = limit
        var configuration = ImagePipeline.Configuration(dataLoader: HeldLoader(calls: calls))
        configuration.decoder = HeldDecoder(calls: calls)
        configuration.imageCache = memory ? ImageCache() : nil
        configuration.dataLoadingQueue = GraphModelQueues.data
        configuration.decodingQueue = GraphModelQueues.decode
        configuration.processingQueue = GraphModelQueues.process
        pipeline = ImagePipeline(configuration: configuration)
        log.append("seed \(seed): memory cache \(memory ? "on" : "off"), download limit \(limit), \(urlCount) URLs")
    }

    // MARK: - The program

    /// Runs `steps` random operations, then ends every task and checks that the graph is empty.
    func run(steps: Int) async throws {
        for _ in 0..<steps { try await step(draining: false) }
        if Int.random(in: 0..<8, using: &rng) == 0 {
            try await invalidate()
            for _ in 0..<2 { try await start(randomRequest(), why: "after invalidate()") }
        }
        var guardCount = 0
        while model.tasks.contains(where: \.isRunning) || !model.calls.filter({ $0.state == .waiting }).isEmpty {
            guardCount += 1
            if guardCount > 500 { throw failure("the drain does not end") }
            try await step(draining: true)
        }
        try await checkEmpty()
    }

    /// Picks an operation the model allows, applies it to both, and compares.
    private func step(draining: Bool) async throws {
        var candidates: [(weight: Int, op: () async throws -> Void)] = []
        func add(_ kind: String, _ op: @escaping () async throws -> Void) {
            let weight = draining ? (["load", "decode", "process", "orphan"].contains(kind) ? 4 : kind == "cancel" || kind == "fail" ? 1 : 0) : weights[kind]!
            if weight > 0 { candidates.append((weight, op)) }
        }
        let running = model.tasks.indices.filter { model.tasks[$0].isRunning }
        add("start") { [self] in try await start(randomRequest(), why: "new") }
        if !model.pool.isEmpty {
            add("join") { [self] in
                let key = model.pool.keys.sorted().randomElement(using: &rng)!
                try await start(request(joining: key), why: "join \(key)")
            }
        }
        let succeeded = model.tasks.filter { if case .succeeded = $0.state { true } else { false } }
        if !succeeded.isEmpty { add("repeat") { [self] in try await start(succeeded.randomElement(using: &rng)!.request, why: "repeat") } }
        let failed = model.tasks.filter { if case .failed = $0.state { true } else { false } }
        if !failed.isEmpty { add("retry") { [self] in try await start(failed.randomElement(using: &rng)!.request, why: "after failure") } }
        if !running.isEmpty {
            add("cancel") { [self] in try await cancel(running.randomElement(using: &rng)!) }
        }
        let prioritized = running.filter { model.tasks[$0].request.kind != .awaited }
        if !prioritized.isEmpty {
            add("priority") { [self] in
                try await setPriority(prioritized.randomElement(using: &rng)!, ImageRequest.Priority.allCases.randomElement(using: &rng)!)
            }
        }
        if !model.tasks.isEmpty && !draining {
            candidates.append((1, { [self] in try await cancel(Int.random(in: 0..<model.tasks.count, using: &rng)) }))
        }
        for index in model.heldCalls(.fetch) {
            if model.calls[index].delivered < GraphUniverse.body(0).count - 1 {
                add("chunk") { [self] in try await command(index, .chunk(Int.random(in: 1...2, using: &rng))) }
            }
            add("load") { [self] in try await command(index, .succeed) }
            add("fail") { [self] in try await command(index, .fail) }
        }
        for index in model.heldCalls(.decode) {
            add("decode") { [self] in try await command(index, .succeed) }
            add("fail") { [self] in try await command(index, .fail) }
        }
        for index in model.heldCalls(.process) {
            let kind = model.isOrphan(index) ? "orphan" : "process"
            add(kind) { [self] in try await command(index, .succeed) }
            add(kind == "orphan" ? "orphan" : "fail") { [self] in try await command(index, .fail) }
        }
        let held = model.calls.indices.filter { model.calls[$0].state == .waiting }
        if !held.isEmpty {
            add("race") { [self] in
                let index = held.randomElement(using: &rng)!
                var others: [RacingOperation] = [.start(randomRequest()), .start(request(joining: model.calls[index].key))]
                if let task = running.randomElement(using: &rng) { others.append(.cancel(task)) }
                if let task = prioritized.randomElement(using: &rng) {
                    others.append(.priority(task, ImageRequest.Priority.allCases.randomElement(using: &rng)!))
                }
                if let other = held.filter({ $0 != index }).randomElement(using: &rng) { others.append(.command(other, randomEnd())) }
                try await race(index, randomEnd(), with: others.randomElement(using: &rng)!)
            }
        }
        let total = candidates.reduce(0) { $0 + $1.weight }
        guard total > 0 else { throw failure("no operation is possible, yet tasks are running") }
        var pick = Int.random(in: 0..<total, using: &rng)
        for candidate in candidates {
            if pick < candidate.weight {
                try await candidate.op()
                return
            }
            pick -= candidate.weight
        }
    }

    /// A command that ends a held call: mostly success.
    private func randomEnd() -> HeldCallCommand { Int.random(in: 0..<4, using: &rng) == 0 ? .fail : .succeed }

    /// A random request that needs the work of `key` (the same request for a decode or
    /// processing key; any request of the URL for a fetch).
    private func request(joining key: StageKey) -> ModelRequest {
        var request = randomRequest()
        request.url = key.url
        if let size = key.size {
            request.size = size
            request.chain = key.chain
        }
        return request
    }

    private func randomRequest() -> ModelRequest {
        let kinds: [ModelRequest.Kind] = [.image, .image, .image, .image, .awaited, .data]
        return ModelRequest(
            kind: kinds.randomElement(using: &rng)!, url: Int.random(in: 0..<urlCount, using: &rng), size: Self.sizes.randomElement(using: &rng)!,
            chain: Self.chains.randomElement(using: &rng)!, priority: ImageRequest.Priority.allCases.randomElement(using: &rng)!)
    }

    /// The pipeline's request for `key` (a decode or processing key; the fetch stage of any).
    func imageRequest(_ key: StageKey, priority: ImageRequest.Priority = .normal) -> ImageRequest {
        let size = key.size ?? 0
        return ImageRequest(url: GraphUniverse.url(key.url), processors: key.chain.map { processors[$0]! }, priority: priority,
                            thumbnail: size == 0 ? nil : .maxPixelSize(size))
    }

    // MARK: - Operations

    private func start(_ request: ModelRequest, why: String) async throws {
        let index = model.tasks.count
        startTask(request)
        model.apply([.start(request)])
        log.append("t\(index) = start \(request) (\(why))")
        if case .succeeded = model.tasks[index].state, request.kind == .image, tasks[index].state != .completed {
            throw failure("t\(index) should have been answered at once from memory; its state is \(String(describing: tasks[index].state))")
        }
        try await settle()
    }

    /// Starts `request` in the pipeline and observes its task.
    private func startTask(_ request: ModelRequest) {
        let imageRequest = imageRequest(request.key, priority: request.priority)
        switch request.kind {
        case .image:
            let task = pipeline.imageTask(with: imageRequest)
            observations.observe(task, as: tasks.count)
            tasks.append(.image(task))
        case .data:
            let task = pipeline.dataTask(with: imageRequest)
            observations.observe(task, as: tasks.count)
            tasks.append(.data(task))
        case .awaited:
            tasks.append(.awaited(observations.load(imageRequest, in: pipeline, as: tasks.count)))
        }
    }

    private func cancel(_ index: Int) async throws {
        let wasRunning = model.tasks[index].isRunning
        tasks[index].cancel()
        model.apply(GraphModel.cancelSteps(task: index))
        log.append("cancel t\(index)" + (wasRunning ? "" : " (already ended)"))
        if wasRunning, let state = tasks[index].state, state != .cancelled {
            throw failure("t\(index) is \(state) right after cancel()")
        }
        // The decodes whose last subscriber left must see their cancellation at once; the
        // others must not.
        let observed = calls.snapshot
        for index in model.heldCalls(.decode) {
            guard let id = model.calls[index].boundID, observed[id].isCancelled?() == true else { continue }
            throw failure("decode \(model.calls[index].key) (call \(id)) was cancelled, yet a live task needs it")
        }
        for index in model.decodesToWake {
            let id = model.calls[index].boundID!
            if observed[id].isCancelled?() != true {
                throw failure("decode \(model.calls[index].key) (call \(id)) lost its last subscriber but is not cancelled")
            }
        }
        try await settle()
    }

    private func invalidate() async throws {
        pipeline.invalidate()
        model.apply([.invalidate, .releaseCancelledLoads])
        log.append("invalidate()")
        try await settle()
    }

    private func setPriority(_ index: Int, _ priority: ImageRequest.Priority) async throws {
        tasks[index].setPriority(priority)
        model.apply([.setPriority(task: index, priority)])
        log.append("t\(index).priority = \(priority)")
        if tasks[index].priority != priority { throw failure("t\(index).priority reads \(String(describing: tasks[index].priority)) after being set") }
        try await settle()
    }

    private func command(_ index: Int, _ command: HeldCallCommand) async throws {
        log.append(describe(command, call: index))
        give(command, to: index, in: &model)
        model.apply(model.steps(command, call: index))
        try await settle()
    }

    private func describe(_ command: HeldCallCommand, call index: Int) -> String {
        let call = model.calls[index]
        return "\(call.stage) \(call.key) (call \(call.boundID!)\(model.isOrphan(index) ? ", orphan" : "")): \(command)"
    }

    /// Gives held call `index` its command, in the pipeline and in `model`.
    private func give(_ command: HeldCallCommand, to index: Int, in model: inout GraphModel) {
        let id = model.calls[index].boundID!
        if case .chunk = command {} else {
            model.markCommanded(call: index)
            commanded.insert(id)
        }
        calls.give(command, to: id)
    }

    /// What races a held call's command.
    enum RacingOperation {
        case cancel(Int)
        case priority(Int, ImageRequest.Priority)
        case start(ModelRequest)
        case command(Int, HeldCallCommand)
    }

    /// Gives held call `index` its command and, at once, does `other`: the two race, and the
    /// pipeline must end as one interleaving of their steps does.
    private func race(_ index: Int, _ command: HeldCallCommand, with other: RacingOperation) async throws {
        var base = model
        let first = base.steps(command, call: index)
        let second: [ModelStep]
        let description: String
        switch other {
        case .cancel(let task):
            second = GraphModel.cancelSteps(task: task)
            description = "cancel t\(task)"
        case .priority(let task, let priority):
            second = [.setPriority(task: task, priority)]
            description = "t\(task).priority = \(priority)"
        case .start(let request):
            second = [.start(request)]
            description = "t\(model.tasks.count) = start \(request)"
        case .command(let other, let otherCommand):
            second = base.steps(otherCommand, call: other)
            description = describe(otherCommand, call: other)
        }
        log.append("race: \(describe(command, call: index)) ∥ \(description)")
        give(command, to: index, in: &base)
        switch other {
        case .cancel(let task): tasks[task].cancel()
        case .priority(let task, let priority): tasks[task].setPriority(priority)
        case .start(let request): startTask(request)
        case .command(let other, let otherCommand): give(otherCommand, to: other, in: &base)
        }
        let candidates = ModelStep.interleavings(first, second).map { steps in
            var candidate = base
            candidate.apply(steps)
            return (candidate, steps)
        }
        try await settle(candidates)
    }

    /// What the run did, in numbers.
    var summary: String {
        let metrics = pipeline.metrics
        return "\(log.count - 1) operations, \(model.tasks.count) tasks; fetch \(metrics.fetch), decode \(metrics.decode), "
            + "process \(metrics.process)"
    }

    func failure(_ message: String) -> GraphModelFailure {
        GraphModelFailure(description: "seed \(seed): \(message)\noperations:\n  " + log.joined(separator: "\n  "))
    }

    /// After a failure: lets every held call end so that no worker stays blocked.
    func releaseEverything() {
        pipeline.invalidate()
        for call in calls.snapshot where call.state == .waiting { calls.give(.fail, to: call.id) }
    }
}
