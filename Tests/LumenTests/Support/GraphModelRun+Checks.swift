import Foundation
@_spi(Testing) @testable import Lumen

// How a run of the model-based test of the work graph waits for the pipeline to settle and
// compares it with the model (see GraphModelRun.swift).

extension GraphModelRun {
    /// Waits until the pipeline has reached the model's state — or, after a race, the state of
    /// one of `candidates` (the model after each interleaving of the racing steps) — then
    /// compares what it shows, and keeps the candidate it matched as the model.
    func settle(_ candidates: [(model: GraphModel, steps: [ModelStep])]? = nil) async throws {
        var alive = candidates ?? [(model, [])]
        var firstFailure: GraphModelFailure?
        var rejections: [String] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            // Read before looking: a change after the look wakes the wait below.
            let version = calls.signal.version
            let metrics = pipeline.metrics
            let queueVersions = GraphModelQueues.changeCounts
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
            // A queue's item ends just after its work's last visible step, with no other change to
            // wake on: the queues' own changes wake the wait.
            await waitForChange(after: version, metrics: metrics, queues: queueVersions, until: deadline)
        }
    }

    /// Returns once a held call, a task's observation, the pipeline's metrics or one of the
    /// model's queues (``GraphModelQueues``) changed since `version`, `metrics` and `queues`
    /// were read, or at `deadline` (a hang guard: the caller then reports what it still waits
    /// for).
    func waitForChange(
        after version: Int, metrics: ImagePipeline.Metrics, queues: [(WorkQueue, Int)], until deadline: ContinuousClock.Instant
    ) async {
        await withTaskGroup(of: Void.self) { [calls, pipeline] group in
            group.addTask { await calls.signal.wait(after: version) }
            group.addTask { await pipeline.waitForMetrics { $0 != metrics } }
            for (queue, count) in queues {
                group.addTask { await queue.waitForChange(after: count) }
            }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Wakes the held decodes whose cancellation is set (and that no command ends otherwise):
    /// they end as cancelled.
    func wakeCancelledDecodes() {
        for call in calls.snapshot where call.stage == .decode && call.state == .waiting && !commanded.contains(call.id) {
            guard call.isCancelled?() == true else { continue }
            commanded.insert(call.id)
            calls.give(.wake, to: call.id)
        }
    }

    /// What the pipeline still lacks to match the model (`nil`: nothing); throws when it did
    /// something the model can never come to expect.
    fileprivate func unsettled(_ model: inout GraphModel) throws -> String? {
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
        // A stage's counters are published as its critical section ends, possibly after the
        // work it queued has started (a processor called before its input's decode is counted).
        for stage in ImagePipeline.Stage.allCases where Self.counts(metrics[stage]) != model.counts[stage]! {
            return "\(stage) metrics \(metrics[stage]), expected \(model.counts[stage]!)"
        }
        // Counted after the work's last visible step: a cancelled load's end, an interrupted
        // decode, an image stored by a cancelled processing.
        let counted = [
            ("loads in flight", metrics.networkRequestsInFlight, model.heldCalls(.fetch).count),
            ("interrupted decodes", metrics.decodesInterrupted, model.decodesInterrupted),
            ("memory writes", metrics.memoryCache.writes, model.memoryWrites),
        ]
        for (name, actual, expected) in counted where actual != expected { return "\(name) \(actual), expected \(expected)" }
        // Last: work admitted to a queue shows there at once (its held call may not have arrived
        // yet), and an item ends just after its work's last visible step.
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

    /// A stage's counters in the model's terms.
    static func counts(_ metrics: ImagePipeline.Metrics.StageMetrics) -> ModelStageCounts {
        ModelStageCounts(started: metrics.started, joined: metrics.joined, completed: metrics.completed,
                         failed: metrics.failed, cancelled: metrics.cancelled)
    }

    /// Compares the settled pipeline with the model.
    fileprivate func compare(_ model: GraphModel) throws {
        try compareTasks(model)
        try compareMetrics(model)
        try compareGraph(model)
        try compareMemory(model)
    }

    fileprivate func compareTasks(_ model: GraphModel) throws {
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
    fileprivate func outcomeMismatch(_ outcome: TaskObservation.Outcome?, _ expected: ModelTask, _ model: GraphModel) -> String? {
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

    fileprivate func errorMismatch(_ thrown: ImagePipeline.Error, _ expected: ModelError, _ model: GraphModel) -> String? {
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

    fileprivate func compareMetrics(_ model: GraphModel) throws {
        let metrics = pipeline.metrics
        let observed = calls.snapshot
        for stage in ImagePipeline.Stage.allCases where Self.counts(metrics[stage]) != model.counts[stage]! {
            throw failure("\(stage) metrics \(metrics[stage]), expected \(model.counts[stage]!)")
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
    fileprivate func compareGraph(_ model: GraphModel) throws {
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

    fileprivate func compareMemory(_ model: GraphModel) throws {
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
    func checkEmpty() async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let version = calls.signal.version
            let metrics = pipeline.metrics
            let queueVersions = GraphModelQueues.changeCounts
            let queues = [GraphModelQueues.data, GraphModelQueues.decode, GraphModelQueues.process]
            if metrics.liveTasks == 0 && queues.allSatisfy({ $0.runningCount == 0 }) { break }
            if ContinuousClock.now > deadline {
                throw failure("at the end \(metrics.liveTasks) graph tasks are alive, \(queues.map(\.runningCount)) items running")
            }
            // An item's end is a queue change; the last live task's release, a metrics change.
            await waitForChange(after: version, metrics: metrics, queues: queueVersions, until: deadline)
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
}
