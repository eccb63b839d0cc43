import Foundation
import Observation
import Synchronization
import Testing
import Lumen
import LumenTestSupport

/// A randomized, model-based test of the prefetcher and the UI loading model together,
/// against the contract (the feed issue's "Prefetching" and "The UI loading model", and
/// DESIGN.md §1–2), not against the code.
///
/// Each seed drives one pipeline — a ``GatedLoader`` whose loads wait until the program
/// delivers or fails them, in any order — through a random program mixing memory- and
/// disk-destination prefetches (start, stop, stop all, pause, priority), `FetchImage` models
/// (load, appear, disappear, display sizes before or after the bytes, priority) and
/// deliveries or failures of loads. After every step the oracle checks what must hold
/// eventually (a watchdog turns "never" into a failure that prints the seed and the log).
@MainActor
@Suite(.timeLimit(.minutes(1)))
struct UIModelRandomTests {
    @Test func randomProgramsKeepTheContract() async {
        var failures = 0
        var totals = UIModelRun.Stats()
        for seed in 1...300 {
            let run = UIModelRun(seed: UInt64(seed), steps: 30)
            let failure = await run.execute()
            totals.add(run.stats)
            if let failure {
                failures += 1
                let report = "seed \(seed): \(failure)\n" + run.log.joined(separator: "\n")
                Issue.record(Comment(rawValue: report))
                if failures >= 3 { break }
            }
        }
        print("UIModelRandomTests: \(totals)")
        // The programs must reach the interesting states, or the oracle checks nothing.
        #expect(totals.delivered > 1000 && totals.sizeChangesAfterSuccess > 100 && totals.shared > 100)
    }
}

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

        mutating func add(_ other: Stats) {
            steps += other.steps; delivered += other.delivered; failed += other.failed
            cancelled += other.cancelled; successes += other.successes
            sizeChangesAfterSuccess += other.sizeChangesAfterSuccess; shared += other.shared
        }

        var description: String {
            "\(steps) steps, \(delivered) loads delivered, \(failed) failed, \(cancelled) cancelled, \(successes) models in success at the end, \(sizeChangesAfterSuccess) size changes after success checked, \(shared) deliveries shared by a prefetch and a visible model"
        }
    }

    let seed: UInt64
    let steps: Int
    private(set) var log: [String] = []
    private(set) var stats = Stats()

    private var random: SeededGenerator
    private let signal = ChangeSignal()
    private let urls: [URL]
    private let naturals: [URL: Int]
    private let loader: GatedLoader
    private let decoder = NaturalSizeRecordingDecoder()
    private let pipeline: ImagePipeline
    private let memory: ImagePrefetcher
    private let disk: ImagePrefetcher
    private var models: [FetchImage] = []
    private var visible: [Bool] = []
    /// Per model: whether its image was decoded from bytes it fetched itself (it holds them).
    private var holdsBytes: [Bool] = []
    /// Prefetches started and not stopped (not cleared when they finish, only when the
    /// prefetcher is idle): who may legitimately keep a download running.
    private var prefetching: [ImagePrefetcher.Destination: Set<URL>] = [.memoryCache: [], .diskCache: []]
    /// URLs ever started on the memory prefetcher (the only source of full-size decodes).
    private var everMemoryPrefetched: Set<URL> = []
    /// The statuses of the failures injected per URL.
    private var injected: [URL: Set<Int>] = [:]

    init(seed: UInt64, steps: Int) {
        self.seed = seed
        self.steps = steps
        random = SeededGenerator(seed: seed)
        let count = Int.random(in: 2...4, using: &random)
        urls = (0..<count).map { URL(string: "https://model.test/\(seed)/\($0).jpg")! }
        var naturals: [URL: Int] = [:]
        var images: [URL: (natural: Int, index: Int)] = [:]
        for (index, url) in urls.enumerated() {
            let natural = [50, 64, 100, 130, 200, 256, 400].randomElement(using: &random)!
            naturals[url] = natural
            images[url] = (natural, index)
        }
        self.naturals = naturals
        loader = GatedLoader(signal: signal, images: images)
        var configuration = ImagePipeline.Configuration(dataLoader: loader)
        configuration.decoder = decoder
        configuration.decodingQueue = WorkQueue(name: "model.decode", maxConcurrentCount: 2, execution: .threads)
        configuration.processingQueue = WorkQueue(name: "model.process", maxConcurrentCount: 2, execution: .threads)
        pipeline = ImagePipeline(configuration: configuration)
        memory = ImagePrefetcher(pipeline: pipeline, destination: .memoryCache,
                                 maxConcurrentRequestCount: Int.random(in: 1...3, using: &random))
        disk = ImagePrefetcher(pipeline: pipeline, destination: .diskCache,
                               maxConcurrentRequestCount: Int.random(in: 1...2, using: &random))
        let modelCount = Int.random(in: 1...3, using: &random)
        for _ in 0..<modelCount {
            models.append(FetchImage(pipeline: pipeline))
            visible.append(true)
            holdsBytes.append(false)
        }
        let signal = self.signal
        memory.didComplete = { signal.ping() }
        disk.didComplete = { signal.ping() }
        log.append("urls naturals: \(urls.map { naturals[$0]! }), memory max \(memory.maxConcurrentRequestCount), disk max \(disk.maxConcurrentRequestCount), models \(modelCount)")
    }

    /// Runs the program; returns the first violation, or `nil`.
    func execute() async -> Violation? {
        let signal = self.signal
        let ticker = Task.detached {
            // A fallback wake-up for conditions nothing pings (pipeline metrics); the oracle's
            // deadlines count these ticks, never wall time, to decide that something is stuck.
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(5))
                signal.ping()
            }
        }
        defer { ticker.cancel() }
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

    private func step() async throws {
        switch Int.random(in: 0..<100, using: &random) {
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
            let url = pick(urls)
            log.append("m\(index).load(\(name(url)))")
            holdsBytes[index] = false
            models[index].load(ImageRequest(url: url))
        case 42..<50:
            let index = Int.random(in: 0..<models.count, using: &random)
            log.append("m\(index).onDisappear")
            visible[index] = false
            models[index].onDisappear()
        case 50..<58:
            let index = Int.random(in: 0..<models.count, using: &random)
            log.append("m\(index).onAppear")
            visible[index] = true
            models[index].onAppear()
        case 58..<72: try await changeSize()
        case 72..<75:
            let index = Int.random(in: 0..<models.count, using: &random)
            let priority = pick([ImageRequest.Priority.low, .normal, .high])
            log.append("m\(index).priority = \(priority)")
            models[index].priority = priority
        default: try await endALoad()
        }
    }

    private func pickPrefetcher() -> (ImagePrefetcher, String) {
        chance(60) ? (memory, "memory") : (disk, "disk")
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
        if wasIdle, uncached.isEmpty, !prefetcher.isIdle {
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
        let model = models[index]
        let points: [Double] = [20, 50, 63, 64, 65, 100, 127, 128, 129, 199, 201, 300]
        let size = DisplaySize(width: pick(points), height: pick(points), scale: pick([1, 2, 3]))
        let shownBefore = model.phase.image != nil
        log.append("m\(index).displaySize(\(size.width)x\(size.height)@\(size.scale)) success=\(shownBefore) holdsBytes=\(holdsBytes[index])")
        model.displaySize(size)
        // A size change after success re-decodes from the bytes held, with no download: it
        // finishes while the program delivers nothing.
        if visible[index], holdsBytes[index], let url = model.request?.url {
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
    /// after many wake-ups (about two seconds of ticks) is a violation.
    private func eventually(_ what: String, _ condition: () -> Bool) async throws {
        var wakeUps = 0
        while true {
            let version = signal.version
            observeModels()
            if condition() { return }
            wakeUps += 1
            if wakeUps > 800 { throw Violation(description: "never: \(what)") }
            await signal.wait(after: version)
        }
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
        for prefetcher in [memory, disk] where prefetcher.isIdle {
            prefetching[prefetcher.destination] = []
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
                    || prefetching[.diskCache]!.contains(load.url)
            }
        }
        // The prefetchers' downloads that nobody visible needs stay within their limits.
        let prefetchOnly = Set(loader.inFlight.map(\.url).filter { !visibleModelNeeds($0) })
        if prefetchOnly.count > memory.maxConcurrentRequestCount + disk.maxConcurrentRequestCount {
            throw Violation(description: "prefetch-only downloads \(prefetchOnly.map(name)) above the limits")
        }
        // Only a memory-destination prefetch decodes at full size (models always have a size).
        for (index, url) in urls.enumerated() where !everMemoryPrefetched.contains(url) {
            if decoder.recorded.contains(where: { $0.index == index && $0.size == nil }) {
                throw Violation(description: "\(name(url)) decoded at full size without a memory prefetch (a disk prefetch decoded?)")
            }
        }
        for (index, model) in models.enumerated() {
            if model.phase.image != nil, model.response?.cacheType == nil { holdsBytes[index] = true }
            try checkPhase(index)
        }
    }

    /// What a model shows is right whenever it shows something.
    private func checkPhase(_ index: Int) throws {
        let model = models[index]
        guard let url = model.request?.url else { return }
        if let image = model.phase.image, image.width > naturals[url]! {
            throw Violation(description: "m\(index) shows \(image.width) px, above the natural \(naturals[url]!)")
        }
        if let error = model.phase.error {
            guard error.code == .dataLoadingFailed, let status = error.statusCode, injected[url, default: []].contains(status) else {
                throw Violation(description: "m\(index) failed with \(error), not an injected failure of \(name(url))")
            }
        }
    }

    /// Delivers every remaining load, then checks the end state.
    private func finish() async throws {
        log.append("-- finish: unpause, deliver everything")
        memory.isPaused = false
        disk.isPaused = false
        while true {
            try await eventually("visible models and prefetchers finish or wait for a download") {
                !loader.inFlight.filter({ loader.isParked($0.id) }).isEmpty
                    || (memory.isIdle && disk.isIdle && models.indices.allSatisfy { !visible[$0] || !models[$0].isLoading })
            }
            let loads = loader.inFlight.filter { loader.isParked($0.id) }
            if loads.isEmpty { break }
            let load = pick(loads)
            deliver(load)
            try await check()
        }
        try await check()
        for (index, model) in models.enumerated() where visible[index] {
            guard let url = model.request?.url else { continue }
            if model.isLoading { throw Violation(description: "m\(index) still loading at the end") }
            if model.phase.error != nil { continue } // checked: an injected failure
            guard let size = model.currentDisplaySize else { continue }
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
