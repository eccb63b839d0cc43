import Foundation
import Synchronization
@testable import Lumen

// One seed of the model-based test of the work graph (GraphModelTests.swift): a random program
// of operations run against a pipeline and against ``GraphModel`` side by side. After each
// operation the test waits — polling counts, never sleeping — until the pipeline has reached
// the state the model predicts (every held call waiting again), then compares everything it
// can see.

/// A seed's run failed: what went wrong, with the operations that led there.
struct GraphModelFailure: Error, CustomStringConvertible {
    var description: String
}

/// What the observers of one task saw.
struct TaskObservation: Sendable {
    enum Outcome: Sendable {
        case response(ImageResponse)
        case data(Data)
        case error(ImagePipeline.Error)
        case foreignError(String)
    }

    var outcome: Outcome?
    /// How many times an awaited `response` returned.
    var responses = 0
    var events: [ImageTask.Event] = []
    var isStreamFinished = false
}

/// The observations of every task of a run, written by observer Swift tasks.
final class TaskObservations: Sendable {
    private let state = Mutex<[Int: TaskObservation]>([:])

    subscript(task: Int) -> TaskObservation { state.withLock { $0[task] ?? TaskObservation() } }

    /// Records `outcome` under `index`.
    func record(_ outcome: TaskObservation.Outcome, as index: Int) {
        state.withLock {
            $0[index, default: .init()].outcome = outcome
            $0[index, default: .init()].responses += 1
        }
    }

    /// Awaits `task`'s bytes, recording them under `index`.
    func observe(_ task: DataTask, as index: Int) {
        Task {
            do {
                record(.data(try await task.response.0), as: index)
            } catch let error as ImagePipeline.Error {
                record(.error(error), as: index)
            } catch {
                record(.foreignError("\(error)"), as: index)
            }
        }
    }

    /// Loads `request` with `image(for:)` in a new Swift task, recording the outcome under
    /// `index`; answers the task.
    func load(_ request: ImageRequest, in pipeline: ImagePipeline, as index: Int) -> Task<Void, Never> {
        Task {
            do {
                record(.response(try await pipeline.image(for: request)), as: index)
            } catch let error as ImagePipeline.Error {
                record(.error(error), as: index)
            } catch {
                record(.foreignError("\(error)"), as: index)
            }
        }
    }

    /// Awaits `task`'s response and reads its event stream, recording both under `index`.
    func observe(_ task: ImageTask, as index: Int) {
        let events = task.events
        Task {
            for await event in events { state.withLock { $0[index, default: .init()].events.append(event) } }
            state.withLock { $0[index, default: .init()].isStreamFinished = true }
        }
        Task {
            do {
                record(.response(try await task.response), as: index)
            } catch let error as ImagePipeline.Error {
                record(.error(error), as: index)
            } catch {
                record(.foreignError("\(error)"), as: index)
            }
        }
    }
}

/// A task of the pipeline, however it was started.
enum TaskHandle {
    case image(ImageTask)
    case data(DataTask)
    /// `image(for:)` awaited in this Swift task.
    case awaited(Task<Void, Never>)

    func cancel() {
        switch self {
        case .image(let task): task.cancel()
        case .data(let task): task.cancel()
        case .awaited(let task): task.cancel()
        }
    }

    /// The task's priority; `nil` for `image(for:)`, which has no handle to ask.
    var priority: ImageRequest.Priority? {
        switch self {
        case .image(let task): task.priority
        case .data(let task): task.priority
        case .awaited: nil
        }
    }

    func setPriority(_ priority: ImageRequest.Priority) {
        switch self {
        case .image(let task): task.priority = priority
        case .data(let task): task.priority = priority
        case .awaited: preconditionFailure("image(for:) has no priority to set")
        }
    }

    var state: ImageTask.State? {
        switch self {
        case .image(let task): task.state
        case .data(let task): task.state
        case .awaited: nil
        }
    }

    var progress: ImageTask.Progress? {
        switch self {
        case .image(let task): task.progress
        case .data(let task): task.progress
        case .awaited: nil
        }
    }
}

/// The queues every run uses (shared, so that worker threads are not created per seed; each
/// run leaves them idle).
enum GraphModelQueues {
    static let data = WorkQueue(name: "model.data", maxConcurrentCount: 6, execution: .tasks)
    static let decode = WorkQueue(name: "model.decode", maxConcurrentCount: 64, execution: .threads)
    static let process = WorkQueue(name: "model.process", maxConcurrentCount: 64, execution: .threads)
}

/// One seed: a pipeline, the model, the program and its log.
final class GraphModelRun {
    static let sizes = [0, 4, 8]
    static let chains: [[String]] = [[], ["a"], ["a", "b"], ["a", "c"], ["b"], ["a", "b", "c"]]

    let seed: UInt64
    private var rng: SplitMix64
    private(set) var model: GraphModel
    let calls = HeldCalls()
    let pipeline: ImagePipeline
    private let processors: [String: HeldProcessor]
    private let urlCount: Int
    private var tasks: [TaskHandle] = []
    private let observations = TaskObservations()
    private(set) var log: [String] = []
    /// Held calls (by id) given the command that ends them.
    private var commanded: Set<Int> = []
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

    // MARK: - Settling and comparing

    func failure(_ message: String) -> GraphModelFailure {
        GraphModelFailure(description: "seed \(seed): \(message)\noperations:\n  " + log.joined(separator: "\n  "))
    }

    /// Waits until the pipeline has reached the model's state — or, after a race, the state of
    /// one of `candidates` (the model after each interleaving of the racing steps) — then
    /// compares what it shows, and keeps the candidate it matched as the model.
    private func settle(_ candidates: [(model: GraphModel, steps: [ModelStep])]? = nil) async throws {
        var alive = candidates ?? [(model, [])]
        var firstFailure: GraphModelFailure?
        var rejections: [String] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            wakeCancelledDecodes()
            var pending: String?
            var index = 0
            while index < alive.count {
                do {
                    if let reason = try unsettled(&alive[index].model) {
                        pending = pending ?? reason
                        index += 1
                        continue
                    }
                    try compare(alive[index].model)
                    model = alive[index].model
                    if candidates != nil { log.append("  as " + alive[index].steps.map(\.description).joined(separator: ", ")) }
                    return
                } catch let failure as GraphModelFailure {
                    let steps = alive[index].steps.map(\.description).joined(separator: ", ")
                    firstFailure = firstFailure ?? failure
                    rejections.append("\(failure.description.prefix { $0 != "\n" }) (as \(steps))")
                    alive.remove(at: index)
                }
            }
            if let firstFailure, alive.isEmpty {
                throw candidates == nil ? firstFailure
                    : GraphModelFailure(description: "\(firstFailure)\n  every interleaving was rejected:\n    " + rejections.joined(separator: "\n    "))
            }
            if ContinuousClock.now > deadline {
                let pools = pipeline.graph.pooledTasks()
                throw failure("the pipeline never reached the model's state: \(pending ?? "")\n  pipeline: \(pipeline.metrics.liveRequests) requests, "
                              + "pools \(pools.fetch.keys) \(pools.decode.keys) \(pools.process.keys), calls \(calls.snapshot.map { "\($0.id) \($0.key) \($0.state)" })")
            }
            await Task.yield()
        }
    }

    /// Wakes the held decodes whose cancellation is set (and that no command ends otherwise):
    /// they end as cancelled.
    private func wakeCancelledDecodes() {
        for call in calls.snapshot where call.stage == .decode && call.state == .waiting && !commanded.contains(call.id) {
            guard call.isCancelled?() == true else { continue }
            commanded.insert(call.id)
            calls.give(.wake, to: call.id)
        }
    }

    /// What the pipeline still lacks to match the model (`nil`: nothing); throws when it did
    /// something the model can never come to expect.
    private func unsettled(_ model: inout GraphModel) throws -> String? {
        let observed = calls.snapshot
        var bound = Set(model.calls.compactMap(\.boundID))
        for index in model.calls.indices where model.calls[index].boundID == nil {
            let expected = model.calls[index]
            if let match = observed.first(where: { !bound.contains($0.id) && $0.stage == expected.stage && $0.key == expected.key }) {
                model.bind(call: index, to: match.id)
                bound.insert(match.id)
            }
        }
        if let extra = observed.first(where: { !bound.contains($0.id) }) {
            throw failure("unexpected \(extra.stage) call \(extra.id) for \(extra.key)")
        }
        for (index, expected) in model.calls.enumerated() {
            guard let id = expected.boundID else { return "\(expected.stage) call for \(expected.key) has not started" }
            let call = observed[id]
            if !call.isInputValid { throw failure("\(call.stage) call \(id) for \(call.key) got the wrong input") }
            if call.state == expected.state && call.delivered == expected.delivered { continue }
            let isFinal = ![.waiting, .working].contains(call.state)
            let description = "\(call.stage) call \(id) for \(call.key) (model #\(index)) is \(call.state) with \(call.delivered) bytes, expected \(expected.state) with \(expected.delivered)"
            if isFinal { throw failure(description) }
            return description
        }
        for (index, task) in model.tasks.enumerated() {
            let observation = observations[index]
            if task.isRunning {
                if let outcome = observation.outcome { throw failure("t\(index) ended with \(outcome) while the model has it running") }
            } else if observation.outcome == nil || (task.request.kind == .image && !observation.isStreamFinished) {
                return "t\(index) has not ended"
            }
        }
        // `image(for:)` subscribes from its own Swift task: wait until the graph counts it.
        let metrics = pipeline.metrics
        if metrics.liveRequests != model.liveRequests { return "\(metrics.liveRequests) live requests, expected \(model.liveRequests)" }
        for stage in ImagePipeline.Stage.allCases where metrics[stage].started + metrics[stage].joined
            != model.counts[stage]!.started + model.counts[stage]!.joined {
            return "\(stage) subscriptions \(metrics[stage]), expected \(model.counts[stage]!)"
        }
        let queues = [
            ("download", GraphModelQueues.data, model.heldCalls(.fetch).count, model.pendingLoads.count),
            ("decode", GraphModelQueues.decode, model.heldCalls(.decode).count, 0),
            ("process", GraphModelQueues.process, model.heldCalls(.process).count, 0),
        ]
        for (name, queue, running, pending) in queues where queue.runningCount != running || queue.pendingCount != pending {
            return "\(name) queue runs \(queue.runningCount) and holds \(queue.pendingCount), expected \(running) and \(pending)"
        }
        return nil
    }

    /// Compares the settled pipeline with the model.
    private func compare(_ model: GraphModel) throws {
        try compareTasks(model)
        try compareMetrics(model)
        try compareGraph(model)
        try compareMemory(model)
    }

    private func compareTasks(_ model: GraphModel) throws {
        for (index, expected) in model.tasks.enumerated() {
            let task = tasks[index]
            let observation = observations[index]
            if let progress = task.progress, progress.completed != expected.progress.completed || progress.total != expected.progress.total {
                throw failure("t\(index) progress is \(progress.completed)/\(progress.total), expected \(expected.progress)")
            }
            let state: ImageTask.State = switch expected.state {
            case .running: .running
            case .cancelled: .cancelled
            case .succeeded, .failed, .invalidated: .completed
            }
            if let actual = task.state, actual != state { throw failure("t\(index) is \(actual), expected \(state)") }
            if expected.isRunning { continue }
            if observation.responses != 1 { throw failure("t\(index): response returned \(observation.responses) times") }
            if let problem = outcomeMismatch(observation.outcome, expected, model) {
                throw failure("t\(index) (\(expected.request)) ended with \(problem), expected \(expected.state)")
            }
            guard case .image = task else { continue }
            let finished = observation.events.filter { if case .finished = $0 { true } else { false } }
            guard finished.count == 1, case .finished(let result)? = observation.events.last else {
                throw failure("t\(index): events \(observation.events) do not end with exactly one .finished")
            }
            if observation.events.contains(where: { if case .preview = $0 { true } else { false } }) {
                throw failure("t\(index) got a preview")
            }
            let streamed: TaskObservation.Outcome = switch result {
            case .success(let response): .response(response)
            case .failure(let error): .error(error)
            }
            if let problem = outcomeMismatch(streamed, expected, model) {
                throw failure("t\(index) (\(expected.request)) has \(problem) in its event stream, expected \(expected.state)")
            }
        }
    }

    /// What is wrong with `outcome` for the model's task `expected`; `nil` when it is right.
    private func outcomeMismatch(_ outcome: TaskObservation.Outcome?, _ expected: ModelTask, _ model: GraphModel) -> String? {
        switch (expected.state, outcome) {
        case (.succeeded(let fromMemory), .response(let response)?):
            if response.image != GraphUniverse.image(for: expected.request.key) {
                return "a wrong image (\(GraphUniverse.key(of: response.image).map { "\($0)" } ?? "unknown"))"
            }
            if response.cacheType != (fromMemory ? .memory : nil) {
                return "cacheType \(String(describing: response.cacheType)), expected \(fromMemory ? "memory" : "none")"
            }
            return nil
        case (.succeeded, .data(let data)?):
            return data == GraphUniverse.body(expected.request.url) ? nil : "wrong bytes \(Array(data))"
        case (.failed(let error), .error(let thrown)?):
            return errorMismatch(thrown, error, model)
        case (.cancelled, .error(let thrown)?):
            return thrown.code == .cancelled ? nil : "\(thrown) instead of cancelled"
        case (.invalidated, .error(let thrown)?):
            return thrown.code == .pipelineInvalidated ? nil : "\(thrown) instead of pipelineInvalidated"
        default:
            return String(describing: outcome)
        }
    }

    private func errorMismatch(_ thrown: ImagePipeline.Error, _ expected: ModelError, _ model: GraphModel) -> String? {
        let code: ImagePipeline.Error.Code = switch expected {
        case .load: .dataLoadingFailed
        case .decode: .decodingFailed
        case .process: .processingFailed
        }
        let call = model.calls[expected.call].boundID!
        guard thrown.code == code, thrown.underlyingError as? HeldCallFailure == HeldCallFailure(call: call) else {
            return "\(thrown) (expected \(code) from call \(call))"
        }
        return nil
    }

    private func compareMetrics(_ model: GraphModel) throws {
        let metrics = pipeline.metrics
        let observed = calls.snapshot
        for stage in ImagePipeline.Stage.allCases {
            let counts = metrics[stage]
            let actual = ModelStageCounts(started: counts.started, joined: counts.joined, completed: counts.completed,
                                          failed: counts.failed, cancelled: counts.cancelled)
            if actual != model.counts[stage] { throw failure("\(stage) metrics \(actual), expected \(model.counts[stage]!)") }
        }
        let expected = [
            ("network requests", metrics.networkRequestsStarted, observed.count { $0.stage == .fetch }),
            ("in flight", metrics.networkRequestsInFlight, model.heldCalls(.fetch).count),
            ("decodes", metrics.decodes, observed.count { $0.stage == .decode }),
            ("interrupted decodes", metrics.decodesInterrupted, model.decodesInterrupted),
            ("processor applications", metrics.processorApplications, observed.count { $0.stage == .process }),
            ("bytes", metrics.bytesDownloaded, model.bytesDownloaded),
            ("live requests", metrics.liveRequests, model.liveRequests),
        ]
        for (name, actual, value) in expected where actual != value {
            throw failure("metrics: \(name) \(actual), expected \(value)")
        }
    }

    /// The pools, each task's subscribers and priority, the queued work's priority, and at
    /// most one call of any key at work.
    private func compareGraph(_ model: GraphModel) throws {
        let pools = pipeline.graph.pooledTasks()
        var actual: [StageKey: WorkGraph.PooledTask] = [:]
        var byKey: [StageKey: (fetch: FetchKey, decode: DecodeKey, process: ProcessKey?)] = [:]
        for (_, node) in model.liveNodes {
            let request = imageRequest(node.key)
            let decode = DecodeKey(request)
            byKey[node.key] = (decode.fetch, decode,
                               node.key.chain.isEmpty ? nil : ProcessKey(decode: decode, request: request, processorCount: node.key.chain.count))
        }
        for (key, keys) in byKey {
            switch key.stage {
            case .fetch: actual[key] = pools.fetch[keys.fetch]
            case .decode: actual[key] = pools.decode[keys.decode]
            case .process: actual[key] = pools.process[keys.process!]
            }
        }
        let total = pools.fetch.count + pools.decode.count + pools.process.count
        if total != model.pool.count || actual.count != model.pool.count {
            throw failure("the pools hold \(total) tasks (\(actual.keys.sorted())), expected \(model.pool.keys.sorted())")
        }
        for (_, node) in model.liveNodes {
            let task = actual[node.key]!
            let operation: ImageRequest.Priority? = node.phase == .queued || node.phase == .working ? node.priority : nil
            let expected = WorkGraph.PooledTask(priority: node.priority, operationPriority: operation, subscriberCount: node.subscribers.count)
            if task != expected { throw failure("\(node.key) is \(task), expected \(expected)") }
        }
        let order = model.pendingLoadOrder.map { model.nodes[$0].priority }
        if GraphModelQueues.data.pendingPriorities != order {
            throw failure("pending downloads \(GraphModelQueues.data.pendingPriorities), expected \(order)")
        }
        var atWork: [String: Int] = [:]
        for index in model.calls.indices where model.calls[index].state == .waiting && !model.isOrphan(index) {
            atWork["\(model.calls[index].stage) \(model.calls[index].key)", default: 0] += 1
        }
        if let duplicate = atWork.first(where: { $0.value > 1 }) { throw failure("\(duplicate.key) runs \(duplicate.value) times at once") }
        let observed = calls.snapshot
        for index in model.heldCalls(.decode) where observed[model.calls[index].boundID!].isCancelled?() == true {
            throw failure("decode \(model.calls[index].key) is cancelled, yet a live task needs it")
        }
    }

    private func compareMemory(_ model: GraphModel) throws {
        guard model.isMemoryCacheEnabled else { return }
        for url in 0..<urlCount {
            for size in Self.sizes {
                for chain in Self.chains {
                    let key = StageKey(url: url, size: size, chain: chain)
                    let isCached = pipeline.cache.containsCachedImage(for: imageRequest(key))
                    if isCached != model.memory.contains(key) {
                        throw failure("memory cache \(isCached ? "holds" : "lacks") \(key)")
                    }
                }
            }
        }
    }

    /// Once every task ended: no work left, nothing registered, every stage balanced.
    private func checkEmpty() async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while pipeline.metrics.liveTasks != 0 || GraphModelQueues.data.runningCount != 0 {
            if ContinuousClock.now > deadline { throw failure("\(pipeline.metrics.liveTasks) graph tasks are still alive at the end") }
            await Task.yield()
        }
        let metrics = pipeline.metrics
        for stage in ImagePipeline.Stage.allCases {
            let counts = metrics[stage]
            if counts.started != counts.completed + counts.failed + counts.cancelled {
                throw failure("\(stage) is unbalanced at the end: \(counts)")
            }
        }
        let pools = pipeline.graph.pooledTasks()
        if metrics.liveRequests != 0 || metrics.networkRequestsInFlight != 0 || pools.fetch.count + pools.decode.count + pools.process.count != 0 {
            throw failure("left at the end: \(metrics.liveRequests) requests, \(metrics.networkRequestsInFlight) loads, pools \(pools)")
        }
        for queue in [GraphModelQueues.data, GraphModelQueues.decode, GraphModelQueues.process] where queue.pendingCount != 0 {
            throw failure("\(queue.name) still holds \(queue.pendingCount) items")
        }
    }

    /// After a failure: lets every held call end so that no worker stays blocked.
    func releaseEverything() {
        pipeline.invalidate()
        for call in calls.snapshot where call.state == .waiting { calls.give(.fail, to: call.id) }
    }
}
