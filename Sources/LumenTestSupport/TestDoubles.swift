import Foundation
import Synchronization
import Lumen

/// A decoder for tests and benchmarks that needs no codec: any non-empty bytes become a small
/// deterministic RGB bitmap, so tests of the pipeline don't depend on image files.
///
/// Without a decode size the bitmap is `min(count, 64)`×1 pixels, each pixel three copies of
/// one input byte; with `.maxPixelSize(n)` or `.size(w, h, _)` it is that size, filled from
/// the bytes. Empty data throws ``LumenImaging/ImagingError/corrupted(reason:)``. Counts its
/// decodes.
public final class TrivialImageDecoder: ImageDecoding {
    private let count = Atomic<Int>(0)

    /// Creates a decoder whose ``decodeCount`` is 0.
    public init() {}

    /// Decodes performed so far.
    public var decodeCount: Int { count.load(ordering: .relaxed) }

    /// A gray RGB bitmap made from `data`, at the size `context.options.size` asks for (the
    /// aspect ratio is not kept); counts the call, also when it throws.
    /// - Throws: ``LumenImaging/ImagingError/corrupted(reason:)`` for empty data.
    public func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
        count.add(1, ordering: .relaxed)
        guard !data.isEmpty else { throw ImagingError.corrupted(reason: "empty data") }
        let (width, height): (Int, Int)
        switch context.options.size {
        case nil: (width, height) = (min(data.count, 64), 1)
        case .maxPixelSize(let n): (width, height) = (max(1, n), max(1, n))
        case .size(let w, let h, _): (width, height) = (max(1, w), max(1, h))
        }
        let bitmap = Bitmap(width: width, height: height, format: .rgb8) { buffer in
            for i in 0..<(width * height) {
                let byte = data[data.startIndex + i % data.count]
                buffer[i * 3] = byte; buffer[i * 3 + 1] = byte; buffer[i * 3 + 2] = byte
            }
        }
        return ImageContainer(image: bitmap)
    }
}

/// Counts applications of ``MockImageProcessor``s by identifier.
public final class ProcessorApplications: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    /// Creates an empty counter.
    public init() {}

    /// How many times the processor with `identifier` ran.
    public subscript(identifier: String) -> Int { counts.withLock { $0[identifier, default: 0] } }

    /// Applications of all processors.
    public var total: Int { counts.withLock { $0.values.reduce(0, +) } }

    func record(_ identifier: String) { counts.withLock { $0[identifier, default: 0] += 1 } }
}

/// A processor for tests: appends one pixel (the bitmap grows by one column) so that its
/// output differs from its input, records each application, and optionally throws.
public struct MockImageProcessor: ImageProcessing, Hashable {
    /// The error a failing mock processor throws.
    public struct Failure: Error, Hashable {}

    /// The processor's name; two mocks with the same name and failure flag are the same
    /// processor.
    public let name: String
    /// Whether ``process(_:)`` throws ``Failure``.
    public let fails: Bool
    private let applications: ProcessorApplications?

    /// Creates a mock named `name` that throws when `fails`, recording its applications in
    /// `applications` when given (which plays no part in the mock's identity).
    public init(_ name: String, fails: Bool = false, applications: ProcessorApplications? = nil) {
        self.name = name
        self.fails = fails
        self.applications = applications
    }

    /// `mock.<name>`, or `mock.<name>.fails` for a failing mock.
    public var identifier: String { "mock.\(name)\(fails ? ".fails" : "")" }

    /// `image` one column wider, the new last column opaque white (every byte `0xFF`);
    /// records the application first.
    /// - Throws: ``Failure`` when ``fails`` is set.
    public func process(_ image: Bitmap) throws -> Bitmap {
        applications?.record(identifier)
        if fails { throw Failure() }
        let channels = image.format.channels
        return Bitmap(width: image.width + 1, height: image.height, format: image.format) { buffer in
            image.pixels.withUnsafeBufferPointer { source in
                for y in 0..<image.height {
                    let from = y * image.width * channels, to = y * (image.width + 1) * channels
                    for i in 0..<(image.width * channels) { buffer[to + i] = source[from + i] }
                    for c in 0..<channels { buffer[to + image.width * channels + c] = 0xFF }
                }
            }
        }
    }

    /// Whether both mocks have the same ``name`` and ``fails``.
    public static func == (lhs: MockImageProcessor, rhs: MockImageProcessor) -> Bool {
        lhs.name == rhs.name && lhs.fails == rhs.fails
    }

    /// Hashes ``name`` and ``fails``.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(fails)
    }
}

/// Records a pipeline's stage events and lets a test wait — without sleeping — until they
/// satisfy a condition. Install ``handler`` as the configuration's `eventHandler`.
///
/// ```swift
/// let recorder = PipelineEventRecorder()
/// configuration.eventHandler = recorder.handler
/// …
/// await recorder.wait { $0.joined(.fetch) >= 7 }
/// ```
public final class PipelineEventRecorder: Sendable {
    /// Event counts per stage.
    public struct Counts: Sendable, Hashable {
        fileprivate var values: [String: Int] = [:]

        /// New work started in `stage` (``Lumen/ImagePipeline/Event/started(_:key:)`` events).
        public func started(_ stage: ImagePipeline.Stage) -> Int { values["started.\(stage)", default: 0] }
        /// Subscribers that joined running work in `stage`
        /// (``Lumen/ImagePipeline/Event/joined(_:key:)`` events).
        public func joined(_ stage: ImagePipeline.Stage) -> Int { values["joined.\(stage)", default: 0] }
        /// Work in `stage` that completed (``Lumen/ImagePipeline/Event/completed(_:key:)`` events).
        public func completed(_ stage: ImagePipeline.Stage) -> Int { values["completed.\(stage)", default: 0] }
        /// Work in `stage` that failed (``Lumen/ImagePipeline/Event/failed(_:key:_:)`` events).
        public func failed(_ stage: ImagePipeline.Stage) -> Int { values["failed.\(stage)", default: 0] }
        /// Work in `stage` that was cancelled (``Lumen/ImagePipeline/Event/cancelled(_:key:)``
        /// events).
        public func cancelled(_ stage: ImagePipeline.Stage) -> Int { values["cancelled.\(stage)", default: 0] }
        /// Problems the caches absorbed (``Lumen/ImagePipeline/Event/cacheFailure(_:)``).
        public var cacheFailures: Int { values["cacheFailure.fetch", default: 0] }
        /// Subscriptions made (new work plus joins).
        public func subscriptions(_ stage: ImagePipeline.Stage) -> Int { started(stage) + joined(stage) }
    }

    private struct State {
        var counts = Counts()
        var events: [ImagePipeline.Event] = []
        var waiters = ConditionWaiters<Counts>()
    }

    private let state = Mutex(State())

    /// Creates a recorder with no events and all counts 0.
    public init() {}

    /// The handler to install as `ImagePipeline.Configuration.eventHandler`.
    public var handler: @Sendable (ImagePipeline.Event) -> Void {
        { [self] event in record(event) }
    }

    /// The counts so far.
    public var counts: Counts { state.withLock { $0.counts } }

    /// Every event so far, in the order they were reported.
    public var events: [ImagePipeline.Event] { state.withLock { $0.events } }

    /// Returns once the counts satisfy `condition` (at once if they already do), or once the
    /// calling task is cancelled.
    public func wait(until condition: @escaping @Sendable (Counts) -> Bool) async {
        await ConditionWaiters.wait(in: state, \.waiters, value: \.counts, until: condition)
    }

    private func record(_ event: ImagePipeline.Event) {
        let name: String
        switch event {
        case .started: name = "started"
        case .joined: name = "joined"
        case .completed: name = "completed"
        case .failed: name = "failed"
        case .cancelled: name = "cancelled"
        case .cacheFailure: name = "cacheFailure"
        }
        let ready = state.withLock { state in
            state.events.append(event)
            state.counts.values["\(name).\(event.stage)", default: 0] += 1
            return state.waiters.takeSatisfied(by: state.counts)
        }
        ready.forEach { $0.resume() }
    }
}

/// Lines a logger wrote (a pipeline's or a server's `logger`, an access log), collected from
/// whatever thread writes them, for a test to read or count.
public final class LogLines: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    /// Records `line`; pass it as the logger: `configuration.logger = { lines.append($0) }`.
    public func append(_ line: String) { lines.withLock { $0.append(line) } }

    /// Every line so far, in order.
    public var all: [String] { lines.withLock { $0 } }

    /// How many lines so far `matches`.
    public func count(where matches: (String) -> Bool) -> Int { lines.withLock { $0.filter(matches).count } }
}
