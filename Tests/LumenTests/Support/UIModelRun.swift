import Foundation
import Observation
import Synchronization
import Testing
@_spi(Testing) @testable import Lumen
@testable import LumenUI
import LumenTestSupport

/// One seed's program, its world and its oracle.
@MainActor
final class UIModelRun {
    /// A broken promise of the contract.
    struct Violation: Error, CustomStringConvertible {
        var description: String
    }

    /// What the programs reached, to show that the oracle had something to check.
    struct Stats: CustomStringConvertible {
        var steps = 0
        var delivered = 0
        var failed = 0
        var cancelled = 0
        var successes = 0
        var sizeChangesAfterSuccess = 0
        /// Deliveries of a URL that a prefetch and a visible model both wanted.
        var shared = 0
        /// Loads of a URL whose full-size image a prefetch left in memory.
        var shownFromPrefetch = 0
        /// Visible models that ended failing to decode a corrupt image.
        var decodeFailures = 0
        /// Visible loads checked to raise a queued download's priority.
        var priorityJoinsChecked = 0
        /// Checks that queued downloads fell back to the priority still asked for.
        var priorityFallbacksChecked = 0

        /// Adds `other`'s counts.
        mutating func add(_ other: Stats) {
            steps += other.steps; delivered += other.delivered; failed += other.failed
            cancelled += other.cancelled; successes += other.successes
            sizeChangesAfterSuccess += other.sizeChangesAfterSuccess; shared += other.shared
            shownFromPrefetch += other.shownFromPrefetch; decodeFailures += other.decodeFailures
            priorityJoinsChecked += other.priorityJoinsChecked; priorityFallbacksChecked += other.priorityFallbacksChecked
        }

        /// One line for the test's output.
        var description: String {
            "\(steps) steps, \(delivered) loads delivered, \(failed) failed, \(cancelled) cancelled, \(successes) models in success at the end, \(sizeChangesAfterSuccess) size changes after success checked, \(shared) deliveries shared by a prefetch and a visible model, \(shownFromPrefetch) loads shown from a prefetched image, \(decodeFailures) decode failures, \(priorityJoinsChecked) priority raises and \(priorityFallbacksChecked) fallbacks checked"
        }
    }

    let seed: UInt64
    let steps: Int
    private(set) var log: [String] = []
    private(set) var stats = Stats()

    private var random: SplitMix64
    private let signal = ChangeSignal()
    private let urls: [URL]
    private let naturals: [URL: Int]
    /// The URL whose bytes no decoder accepts, in some seeds.
    private let corrupt: URL?
    private let loader: GatedLoader
    private let decoder = NaturalSizeRecordingDecoder()
    /// Whether the pipeline decodes real PNGs with its default decoder (which also makes
    /// sizes from a full-size image in memory) instead of ``NaturalSizeRecordingDecoder``.
    private let usesDefaultDecoder: Bool
    /// The disk cache, in some seeds.
    private let dataCache: DataCache?
    /// The data-loading queue, when a seed narrows it to one download at a time.
    private let narrowQueue: WorkQueue?
    /// The only prefetcher the program uses, in some seeds (so that its limit is exact).
    private let prefetcherUse: ImagePrefetcher.Destination?
    /// Whether the program uses prefetchers at all (without them, every download in flight
    /// must be needed by a visible model: the check of cancel-on-hide is exact).
    private let usesPrefetchers: Bool
    /// `didComplete` calls per prefetcher.
    private let completions = CompletionCounts()
    /// Per prefetcher, the completion count when it was last seen busy.
    private var busySince: [ImagePrefetcher.Destination: Int] = [:]
    /// Batch prefetches (`ImagePipeline.prefetch`) started.
    private var batches: [BatchPrefetch] = []
    private let pipeline: ImagePipeline
    private let memory: ImagePrefetcher
    private let disk: ImagePrefetcher
    private var models: [FetchImage] = []
    private var visible: [Bool] = []
    /// Per model: whether its image was decoded from bytes it fetched itself (it holds them).
    private var holdsBytes: [Bool] = []
    /// Per hidden model, what it showed after the program last touched it.
    private var hiddenPhase: [String?] = []
    /// Prefetches started and not stopped (not cleared when they finish, only when the
    /// prefetcher is idle): who may legitimately keep a download running.
    private var prefetching: [ImagePrefetcher.Destination: Set<URL>] = [.memoryCache: [], .diskCache: []]
    /// URLs ever started on the memory prefetcher (the only source of full-size decodes).
    private var everMemoryPrefetched: Set<URL> = []
    /// The statuses of the failures injected per URL.
    private var injected: [URL: Set<Int>] = [:]

    /// Builds seed `seed`'s world (URLs, natural sizes, pipeline, prefetchers, models) for a
    /// program of `steps` steps.
    init(seed: UInt64, steps: Int) {
        self.seed = seed
        self.steps = steps
        // Offset from the seed, as the programs found so far were numbered.
        random = SplitMix64(seed: seed &+ 0x9E37_79B9_7F4A_7C15)
        let count = Int.random(in: 2...4, using: &random)
        urls = (0..<count).map { URL(string: "https://model.test/\(seed)/\($0).jpg")! }
        usesDefaultDecoder = Int.random(in: 0..<100, using: &random) < 40
        let directory = Int.random(in: 0..<100, using: &random) < 40
            ? FileManager.default.temporaryDirectory.appendingPathComponent("lumen-uimodel-\(UUID().uuidString)") : nil
        var naturals: [URL: Int] = [:]
        var bodies: [URL: Data] = [:]
        for (index, url) in urls.enumerated() {
            let natural = [50, 64, 100, 130, 200, 256, 400].randomElement(using: &random)!
            naturals[url] = natural
            bodies[url] = usesDefaultDecoder
                ? NaturalSizeRecordingDecoder.png(natural: natural, index: index)
                : NaturalSizeRecordingDecoder.body(natural: natural, index: index)
        }
        // Some seeds serve one URL's bytes corrupt: every decode of it fails.
        if Int.random(in: 0..<100, using: &random) < 15, let url = urls.last {
            bodies[url] = Data([0x42])
            corrupt = url
        } else {
            corrupt = nil
        }
        self.naturals = naturals
        loader = GatedLoader(signal: signal, bodies: bodies)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        if !usesDefaultDecoder { configuration.decoder = decoder }
        dataCache = directory.map { DataCache(name: "uimodel", directory: $0) }
        configuration.dataCache = dataCache
        // Some seeds let one download run at a time, so that the others wait in the queue
        // where their priorities can be seen.
        if Int.random(in: 0..<100, using: &random) < 30 {
            let queue = WorkQueue(name: "model.data", maxConcurrentCount: 1, execution: .tasks)
            configuration.dataLoadingQueue = queue
            narrowQueue = queue
        } else {
            narrowQueue = nil
        }
        configuration.decodingQueue = WorkQueue(name: "model.decode", maxConcurrentCount: 2, execution: .threads)
        configuration.processingQueue = WorkQueue(name: "model.process", maxConcurrentCount: 2, execution: .threads)
        pipeline = ImagePipeline(configuration: configuration)
        memory = ImagePrefetcher(pipeline: pipeline, destination: .memoryCache,
                                 maxConcurrentRequestCount: Int.random(in: 1...3, using: &random))
        disk = ImagePrefetcher(pipeline: pipeline, destination: .diskCache,
                               maxConcurrentRequestCount: Int.random(in: 1...2, using: &random))
        prefetcherUse = [nil, nil, .memoryCache, .diskCache].randomElement(using: &random)!
        usesPrefetchers = Int.random(in: 0..<100, using: &random) >= 20
        let modelCount = Int.random(in: 1...3, using: &random)
        for _ in 0..<modelCount {
            models.append(FetchImage(pipeline: pipeline))
            visible.append(true)
            holdsBytes.append(false)
            hiddenPhase.append(nil)
        }
        let signal = self.signal
        let completions = self.completions
        memory.didComplete = { completions.add(.memoryCache); signal.ping() }
        disk.didComplete = { completions.add(.diskCache); signal.ping() }
        log.append("urls naturals: \(urls.map { naturals[$0]! }), default decoder \(usesDefaultDecoder), disk cache \(dataCache != nil), corrupt \(corrupt.map { _ in "u\(urls.count - 1)" } ?? "none"), narrow queue \(narrowQueue != nil), prefetchers \(usesPrefetchers ? String(describing: prefetcherUse ?? .memoryCache) + (prefetcherUse == nil ? "+disk" : "") : "none"), memory max \(memory.maxConcurrentRequestCount), disk max \(disk.maxConcurrentRequestCount), models \(modelCount)")
    }

    /// Runs the program; returns the first violation, or `nil`.
    func execute() async -> Violation? {
        defer {
            if let dataCache {
                dataCache.flushSynchronously()
                try? FileManager.default.removeItem(at: dataCache.directory)
            }
        }
        do {
            for _ in 0..<steps {
                stats.steps += 1
                try await step()
                try await check()
            }
            try await finish()
            stats.cancelled = loader.cancelledCount
            return nil
        } catch let violation as Violation {
            cleanUp()
            return violation
        } catch {
            cleanUp()
            return Violation(description: "unexpected \(error)")
        }
    }

    private func cleanUp() {
        decoder.isHolding = false
        memory.stopPrefetching()
        disk.stopPrefetching()
        models.forEach { $0.reset() }
        loader.abandonAll()
    }

    // MARK: - Steps

    private func pick<T>(_ items: [T]) -> T { items.randomElement(using: &random)! }
    private func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
    private func name(_ url: URL) -> String { "u\(urls.firstIndex(of: url)!)" }
    private func someURLs() -> [URL] {
        let chosen = urls.filter { _ in chance(50) }
        return chosen.isEmpty ? [pick(urls)] : chosen.shuffled(using: &random)
    }

    /// What a model shows, for comparing.
    private func snapshot(_ model: FetchImage) -> String {
        if let image = model.phase.image { return "success \(image.width)x\(image.height) \(image.hashValue)" }
        if let error = model.phase.error { return "failure \(error)" }
        return "empty"
    }

    private func step() async throws {
        // A hidden model's phase changes only by what the program does to it.
        defer {
            for index in models.indices where !visible[index] && hiddenPhase[index] == nil {
                hiddenPhase[index] = snapshot(models[index])
            }
        }
        var roll = Int.random(in: 0..<100, using: &random)
        if !usesPrefetchers, roll < 28 || (76..<80).contains(roll) { roll = 28 + roll % 48 }
        switch roll {
        case 0..<12: try startPrefetching()
        case 12..<18:
            let (prefetcher, label) = pickPrefetcher()
            let chosen = someURLs()
            log.append("\(label).stop(\(chosen.map(name)))")
            prefetcher.stopPrefetching(with: chosen)
            prefetching[prefetcher.destination]!.subtract(chosen)
        case 18..<20:
            let (prefetcher, label) = pickPrefetcher()
            log.append("\(label).stopAll")
            prefetcher.stopPrefetching()
            prefetching[prefetcher.destination] = []
        case 20..<25:
            let (prefetcher, label) = pickPrefetcher()
            let paused = chance(50)
            log.append("\(label).isPaused = \(paused)")
            prefetcher.isPaused = paused
        case 25..<28:
            let (prefetcher, label) = pickPrefetcher()
            let priority = pick([ImageRequest.Priority.veryLow, .low, .normal, .high, .veryHigh])
            log.append("\(label).priority = \(priority)")
            prefetcher.priority = priority
        case 28..<42:
            let index = Int.random(in: 0..<models.count, using: &random)
        hiddenPhase[index] = nil
            let url = pick(urls)
            let inMemory = pipeline.cache.containsCachedImage(for: ImageRequest(url: url))
            log.append("m\(index).load(\(name(url))) fullSizeInMemory=\(inMemory)")
            holdsBytes[index] = false
            models[index].load(ImageRequest(url: url))
            try await checkJoinRaisesPriority(index)
            // A prefetched image is downloaded once: with the default decoder, a model shows it
            // (at any size) from the full-size image in memory, fetching nothing.
            if usesDefaultDecoder, inMemory, visible[index] {
                let model = models[index]
                try await eventually("m\(index) shows prefetched \(name(url)) without a download") { !model.isLoading }
                stats.shownFromPrefetch += 1
            }
        case 42..<50:
            let index = Int.random(in: 0..<models.count, using: &random)
        hiddenPhase[index] = nil
            log.append("m\(index).onDisappear")
            visible[index] = false
            models[index].onDisappear()
            // Hiding cancels the model's own work at once; what it shows is kept.
            if models[index].isLoading { throw Violation(description: "m\(index) still loading right after onDisappear") }
        case 50..<58:
            let index = Int.random(in: 0..<models.count, using: &random)
        hiddenPhase[index] = nil
            log.append("m\(index).onAppear")
            visible[index] = true
            models[index].onAppear()
        case 58..<72: try await changeSize()
        case 72..<74:
            let index = Int.random(in: 0..<models.count, using: &random)
        hiddenPhase[index] = nil
            if chance(30) {
                log.append("m\(index).reset()")
                holdsBytes[index] = false
                models[index].reset()
                let model = models[index]
                if model.isLoading || model.request != nil || model.phase.image != nil || model.phase.error != nil {
                    throw Violation(description: "m\(index) not cleared by reset()")
                }
            } else {
                let url = pick(urls)
                log.append("m\(index).url = \(name(url))")
                let changes = models[index].request?.url != url
                if changes { holdsBytes[index] = false }
                models[index].url = url
                // (The same URL changes nothing: the model may be decoding, not fetching.)
                if changes { try await checkJoinRaisesPriority(index) }
            }
        case 74..<76:
            let index = Int.random(in: 0..<models.count, using: &random)
        hiddenPhase[index] = nil
            let priority = pick([ImageRequest.Priority.low, .normal, .high])
            log.append("m\(index).priority = \(priority)")
            models[index].priority = priority
        case 76..<80: try await batchStep()
        case 80..<84 where !usesDefaultDecoder:
            decoder.isHolding.toggle()
            log.append("decoder.isHolding = \(decoder.isHolding)")
        default: try await endALoad()
        }
    }

    /// Starts a batch prefetch, or cancels a running one (which must return at once).
    private func batchStep() async throws {
        if let running = batches.filter({ !$0.isCancelled && $0.outcome == nil }).randomElement(using: &random), chance(50) {
            log.append("batch#\(running.id).cancel")
            running.isCancelled = true
            running.task?.cancel()
            try await eventually("cancelled batch#\(running.id) returns") { running.outcome != nil }
            return
        }
        let chosen = someURLs() + (chance(30) ? [pick(urls)] : [])
        let destination: ImagePrefetcher.Destination = chance(50) ? .memoryCache : .diskCache
        let batch = BatchPrefetch(id: batches.count, urls: chosen, maxConcurrent: Int.random(in: 1...2, using: &random))
        log.append("batch#\(batch.id).start(\(chosen.map(name)), max \(batch.maxConcurrent), \(destination))")
        if destination == .memoryCache { everMemoryPrefetched.formUnion(chosen) }
        batches.append(batch)
        let (pipeline, signal) = (self.pipeline, self.signal)
        batch.task = Task {
            let outcome = await pipeline.prefetch(chosen, maxConcurrent: batch.maxConcurrent, destination: destination)
            batch.outcome = outcome
            signal.ping()
        }
    }

    /// A visible model that starts fetching a URL whose download waits in the queue raises
    /// that download's priority at once (to at least its own).
    private func checkJoinRaisesPriority(_ index: Int) async throws {
        let model = models[index]
        guard let queue = narrowQueue, !usesDefaultDecoder, dataCache == nil, visible[index], model.isLoading,
              let url = model.request?.url
        else { return }
        // Only when the queue's one slot is held by a download of another URL parked in the
        // loader, the same one before and after reading the queue: then the model's download
        // is certainly waiting in the queue.
        let parkedBefore = loader.inFlight.filter { loader.isParked($0.id) }.map(\.id)
        let running = queue.runningCount
        let pending = queue.pendingPriorities
        let after = loader.inFlight.filter { loader.isParked($0.id) }
        guard after.map(\.id) == parkedBefore, !after.contains(where: { $0.url == url }),
              running >= queue.maxConcurrentCount, after.count >= running
        else { return }
        stats.priorityJoinsChecked += 1
        if (pending.max() ?? .veryLow) < model.priority {
            // Unless the model joined a download that had just failed (the failure is on its
            // way to every subscriber): then it fails at once, with nothing to wait for.
            log.append("(queue waits at \(pending): the model must be failing)")
            try await eventually("m\(index) (\(model.priority)) joined \(name(url)) but the queue waits at \(pending), and it is no failing download") {
                model.phase.error != nil
            }
        }
    }

    /// URLs that running batch prefetches may hold downloads for.
    private var batchURLs: Set<URL> {
        Set(batches.filter { !$0.isCancelled && $0.outcome == nil }.flatMap(\.urls))
    }

    private func pickPrefetcher() -> (ImagePrefetcher, String) {
        switch prefetcherUse {
        case .memoryCache?: (memory, "memory")
        case .diskCache?: (disk, "disk")
        case nil: chance(60) ? (memory, "memory") : (disk, "disk")
        }
    }

    private func startPrefetching() throws {
        let (prefetcher, label) = pickPrefetcher()
        let chosen = someURLs()
        let wasIdle = prefetcher.isIdle && !prefetcher.isPaused
        let cached = chosen.filter { url in
            prefetcher.destination == .memoryCache
                ? pipeline.cache.containsCachedImage(for: ImageRequest(url: url))
                : pipeline.cache.containsData(for: ImageRequest(url: url))
        }
        log.append("\(label).start(\(chosen.map(name))) cached \(cached.map(name))")
        prefetcher.startPrefetching(with: chosen)
        let uncached = chosen.filter { !cached.contains($0) }
        prefetching[prefetcher.destination]!.formUnion(uncached)
        if prefetcher.destination == .memoryCache { everMemoryPrefetched.formUnion(uncached) }
        // Cached requests are skipped: a batch of only cached ones leaves an idle prefetcher idle.
        // Not for the corrupt URL on disk: a failing decode of it (a model's, the memory
        // prefetcher's) removes its entry at any moment, also between the look above and the
        // prefetcher's own.
        let mayHaveLeftTheDisk = prefetcher.destination == .diskCache && corrupt.map(chosen.contains) == true
        if wasIdle, uncached.isEmpty, !prefetcher.isIdle, !mayHaveLeftTheDisk {
            throw Violation(description: "\(label) prefetcher took cached \(cached.map(name))")
        }
    }

    /// The decode size the contract asks for: points × scale, rounded up to 64-px buckets,
    /// never above the natural size.
    private func expectedSide(_ size: DisplaySize, _ url: URL) -> Int {
        let pixels = Int((max(size.width, size.height) * size.scale).rounded(.up))
        let bucket = max(1, (pixels + 63) / 64) * 64
        return min(bucket, naturals[url]!)
    }

    private func changeSize() async throws {
        let index = Int.random(in: 0..<models.count, using: &random)
        hiddenPhase[index] = nil
        let model = models[index]
        let points: [Double] = [20, 50, 63, 64, 65, 100, 127, 128, 129, 199, 201, 300]
        let size = DisplaySize(width: pick(points), height: pick(points), scale: pick([1, 2, 3]))
        let shownBefore = model.phase.image != nil
        let onDisk = model.request.map { pipeline.cache.containsData(for: $0) } ?? false
        log.append("m\(index).displaySize(\(size.width)x\(size.height)@\(size.scale)) success=\(shownBefore) holdsBytes=\(holdsBytes[index]) onDisk=\(onDisk)")
        model.displaySize(size)
        // A size change after success re-decodes from the bytes held, with no download: it
        // finishes while the program delivers nothing.
        if visible[index], holdsBytes[index] || (shownBefore && onDisk), let url = model.request?.url {
            if decoder.isHolding {
                decoder.isHolding = false
                log.append("decoder.isHolding = false")
            }
            let want = expectedSide(size, url)
            let before = loader.started(url)
            stats.sizeChangesAfterSuccess += 1
            try await eventually("m\(index) re-decodes at \(want) without a download") {
                !model.isLoading && model.phase.image?.width == want
            }
            if loader.started(url) != before {
                throw Violation(description: "m\(index)'s size change downloaded \(name(url)) again")
            }
        }
    }

    private func endALoad() async throws {
        let loads = loader.inFlight.filter { loader.isParked($0.id) }
        guard let load = loads.isEmpty ? nil : pick(loads) else {
            log.append("(no load to end)")
            return
        }
        if chance(20) {
            let status = 500 + Int.random(in: 0..<50, using: &random)
            log.append("fail load #\(load.id) \(name(load.url)) with \(status)")
            if loader.fail(load.id, status: status) {
                injected[load.url, default: []].insert(status)
                stats.failed += 1
            }
        } else {
            deliver(load)
        }
    }

    private func deliver(_ load: GatedLoader.InFlight) {
        log.append("deliver load #\(load.id) \(name(load.url))")
        let isShared = visibleModelNeeds(load.url)
            && (prefetching[.memoryCache]!.contains(load.url) || prefetching[.diskCache]!.contains(load.url))
        if loader.deliver(load.id) {
            stats.delivered += 1
            if isShared { stats.shared += 1 }
        }
    }

    // MARK: - Oracle

    /// Waits until `condition` holds, re-checking on every change; a condition still false
    /// after ten seconds (what holds does so within milliseconds) is a violation.
    private func eventually(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            // Read before looking: a change after the look wakes the wait below.
            let version = signal.version
            let metrics = pipeline.metrics
            let queueVersion = narrowQueue?.changeCount
            observeModels()
            if condition() { return }
            if ContinuousClock.now > deadline { throw Violation(description: "never: \(what)\n" + stateDump()) }
            await waitForChange(after: version, metrics: metrics, queueVersion: queueVersion, until: deadline)
        }
    }

    /// Returns once the signal was pinged, the pipeline's metrics changed or the narrow queue
    /// changed (its priorities, pending or running items) since `version`, `metrics` and
    /// `queueVersion` were read, or at `deadline` (a hang guard: the caller then reports what it
    /// still waits for).
    private func waitForChange(
        after version: Int, metrics: ImagePipeline.Metrics, queueVersion: Int?, until deadline: ContinuousClock.Instant
    ) async {
        await withTaskGroup(of: Void.self) { [signal, pipeline, narrowQueue] group in
            group.addTask { await signal.wait(after: version) }
            group.addTask { await pipeline.waitForMetrics { $0 != metrics } }
            if let narrowQueue, let queueVersion {
                group.addTask { await narrowQueue.waitForChange(after: queueVersion) }
            }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    /// The models', loader's and prefetchers' state, for a failure report.
    private func stateDump() -> String {
        var lines = models.enumerated().map { index, model in
            "  m\(index): \(model.request?.url.map(name) ?? "-") visible \(visible[index]) loading \(model.isLoading) \(snapshot(model)) size \(model.currentDisplaySize.map { "\($0.width)x\($0.height)@\($0.scale)" } ?? "-") natural \(model.naturalMaxPixelSize.map(String.init) ?? "-") cacheType \(String(describing: model.response?.cacheType))"
        }
        lines.append("  in flight: \(loader.inFlight.map { "#\($0.id) \(name($0.url))\(loader.isParked($0.id) ? "" : " (not parked)")" })")
        lines.append("  memory idle \(memory.isIdle) paused \(memory.isPaused); disk idle \(disk.isIdle) paused \(disk.isPaused); decoder holding \(decoder.isHolding)")
        return "state:\n" + lines.joined(separator: "\n")
    }

    /// Pings the signal when any model's observable state changes.
    private func observeModels() {
        let signal = self.signal
        for model in models {
            withObservationTracking {
                _ = model.phase
                _ = model.isLoading
            } onChange: {
                signal.ping()
            }
        }
    }

    /// Whether a visible model showing `url` is loading (it may need the download).
    private func visibleModelNeeds(_ url: URL) -> Bool {
        models.indices.contains { visible[$0] && models[$0].request?.url == url && models[$0].isLoading }
    }

    private func check() async throws {
        for prefetcher in [memory, disk] {
            let destination = prefetcher.destination
            // The count first: a signal that comes between the two reads counts as later.
            let count = completions[destination]
            if !prefetcher.isIdle {
                busySince[destination] = count
                continue
            }
            prefetching[destination] = []
            // The completion signal: each time the last prefetch ends, finished or stopped.
            if let mark = busySince[destination] {
                let completions = self.completions
                try await eventually("\(destination) prefetcher signals its completion") {
                    completions[destination] > mark || !prefetcher.isIdle
                }
                busySince[destination] = nil
            }
        }
        // One download per URL at a time: a second one for the same URL means work was not
        // shared (a stopped one's cancellation may still be on its way).
        for url in urls {
            try await eventually("one download of \(name(url)) at a time") {
                loader.inFlight.filter { $0.url == url }.count <= 1
            }
        }
        // Work nobody needs is cancelled: every download in flight is held by a visible model
        // still loading that URL, or a prefetch of it.
        try await eventually("downloads in flight are all needed") {
            loader.inFlight.allSatisfy { load in
                visibleModelNeeds(load.url) || prefetching[.memoryCache]!.contains(load.url)
                    || prefetching[.diskCache]!.contains(load.url) || batchURLs.contains(load.url)
            }
        }
        // The prefetchers' downloads that nobody visible needs stay within their limits.
        // (A download a hidden or switched model leaves may still be on its way out.)
        var limit = batches.filter { !$0.isCancelled && $0.outcome == nil }.map(\.maxConcurrent).reduce(0, +)
        if prefetcherUse != .diskCache { limit += memory.maxConcurrentRequestCount }
        if prefetcherUse != .memoryCache { limit += disk.maxConcurrentRequestCount }
        try await eventually("prefetch-only downloads within the limit \(limit)") {
            Set(loader.inFlight.map(\.url).filter { !visibleModelNeeds($0) }).count <= limit
        }
        // Priority belongs to the group: no queued download waits above every priority still
        // asked for (a hidden model's raise falls back).
        if let queue = narrowQueue {
            var asked: [ImageRequest.Priority] = models.indices.filter { visible[$0] && models[$0].isLoading }.map { models[$0].priority }
            if !memory.isIdle { asked.append(memory.priority) }
            if !disk.isIdle { asked.append(disk.priority) }
            if !batchURLs.isEmpty { asked.append(.low) }
            let ceiling = asked.max() ?? .veryLow
            if !queue.pendingPriorities.isEmpty { stats.priorityFallbacksChecked += 1 }
            try await eventually("queued downloads at most \(ceiling)") {
                (queue.pendingPriorities.max() ?? .veryLow) <= ceiling
            }
        }
        // Only a memory-destination prefetch decodes at full size (models always have a size).
        for (index, url) in urls.enumerated() where !usesDefaultDecoder && !everMemoryPrefetched.contains(url) {
            if decoder.recorded.contains(where: { $0.index == index && $0.size == nil }) {
                throw Violation(description: "\(name(url)) decoded at full size without a memory prefetch (a disk prefetch decoded?)")
            }
        }
        for (index, model) in models.enumerated() {
            if !visible[index], let shown = hiddenPhase[index], snapshot(model) != shown {
                throw Violation(description: "hidden m\(index) changed from \(shown) to \(snapshot(model))")
            }
            if model.phase.image != nil, model.response?.cacheType == nil { holdsBytes[index] = true }
            try checkPhase(index)
        }
    }

    /// What a model shows is right whenever it shows something.
    private func checkPhase(_ index: Int) throws {
        let model = models[index]
        guard let url = model.request?.url else { return }
        if model.phase.image != nil, url == corrupt, model.response?.request.thumbnail != nil {
            throw Violation(description: "m\(index) shows an image of corrupt \(name(url))")
        }
        if let image = model.phase.image, image.width > naturals[url]! {
            throw Violation(description: "m\(index) shows \(image.width) px, above the natural \(naturals[url]!)")
        }
        if let error = model.phase.error, error.code == .decodingFailed {
            guard url == corrupt else {
                throw Violation(description: "m\(index) failed to decode \(name(url)), whose bytes are fine: \(error)")
            }
        } else if let error = model.phase.error {
            guard error.code == .dataLoadingFailed, let status = error.statusCode, injected[url, default: []].contains(status) else {
                throw Violation(description: "m\(index) failed with \(error), not an injected failure of \(name(url))")
            }
        }
    }

    /// Delivers every remaining load, then checks the end state.
    private func finish() async throws {
        log.append("-- finish: unpause, release decodes, deliver everything")
        decoder.isHolding = false
        memory.isPaused = false
        disk.isPaused = false
        while true {
            try await eventually("visible models and prefetchers finish or wait for a download") {
                !loader.inFlight.filter({ loader.isParked($0.id) }).isEmpty
                    || (memory.isIdle && disk.isIdle && batchURLs.isEmpty
                        && models.indices.allSatisfy { !visible[$0] || !models[$0].isLoading })
            }
            let loads = loader.inFlight.filter { loader.isParked($0.id) }
            if loads.isEmpty { break }
            let load = pick(loads)
            deliver(load)
            try await check()
        }
        try await check()
        for prefetcher in [memory, disk] {
            let returned = Returned()
            let signal = self.signal
            Task {
                await prefetcher.waitUntilIdle()
                returned.value = true
                signal.ping()
            }
            try await eventually("\(prefetcher.destination) waitUntilIdle returns") { returned.value }
        }
        for batch in batches {
            try await eventually("batch#\(batch.id) returns") { batch.outcome != nil }
            let outcome = batch.outcome!
            if outcome.succeeded < 0 || outcome.failed < 0 || outcome.skipped < 0
                || outcome.succeeded + outcome.failed + outcome.skipped != batch.urls.count
                || outcome.succeeded + outcome.failed > Set(batch.urls).count {
                throw Violation(description: "batch#\(batch.id) of \(batch.urls.count) ended \(outcome)")
            }
        }
        for (index, model) in models.enumerated() where visible[index] {
            guard let url = model.request?.url else { continue }
            if model.isLoading { throw Violation(description: "m\(index) still loading at the end") }
            if let error = model.phase.error { // checked: an injected failure
                if error.code == .decodingFailed { stats.decodeFailures += 1 }
                continue
            }
            guard let size = model.currentDisplaySize else { continue }
            if url == corrupt { throw Violation(description: "m\(index) shown at a size ends without failing to decode corrupt \(name(url))") }
            let want = expectedSide(size, url)
            guard let image = model.phase.image else {
                throw Violation(description: "m\(index) shown at \(size) with its bytes known ends empty")
            }
            stats.successes += 1
            if image.width != want || image.height != want {
                throw Violation(description: "m\(index) shows \(image.width)x\(image.height), want \(want) for \(size) of \(name(url))")
            }
        }
        // Size changes after success: each re-decodes from the bytes held, downloading nothing.
        for _ in 0..<3 {
            try await changeSize()
            try await check()
        }
        // Nothing is left in flight once the models are hidden.
        for (index, model) in models.enumerated() {
            visible[index] = false
            model.onDisappear()
        }
        try await eventually("no load in flight at the end") { loader.inFlight.isEmpty }
        let pipeline = self.pipeline
        try await eventually("no task left in the pipeline") {
            let metrics = pipeline.metrics
            return metrics.liveTasks == 0 && metrics.liveRequests == 0
        }
    }
}

/// A batch prefetch started by the program.
@MainActor
final class BatchPrefetch {
    let id: Int
    let urls: [URL]
    let maxConcurrent: Int
    var task: Task<Void, Never>?
    var isCancelled = false
    /// Set when `prefetch` returned.
    var outcome: ImagePipeline.PrefetchOutcome?

    init(id: Int, urls: [URL], maxConcurrent: Int) {
        self.id = id
        self.urls = urls
        self.maxConcurrent = maxConcurrent
    }
}

/// Whether an awaited call returned.
@MainActor
final class Returned {
    var value = false
}

/// Counts `didComplete` calls per prefetcher destination.
final class CompletionCounts: Sendable {
    private let counts = Mutex<[ImagePrefetcher.Destination: Int]>([:])

    /// Counts one call for `destination`.
    func add(_ destination: ImagePrefetcher.Destination) { counts.withLock { $0[destination, default: 0] += 1 } }

    /// The calls counted for `destination`.
    subscript(destination: ImagePrefetcher.Destination) -> Int { counts.withLock { $0[destination, default: 0] } }
}
