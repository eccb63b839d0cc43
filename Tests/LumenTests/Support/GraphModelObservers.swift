import Foundation
import Synchronization
@testable import Lumen

// What the model-based test of the work graph (GraphModelTests.swift) watches: each task's
// outcome and events, whichever way it was started, and the queues every run shares.

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
    /// Told of every observation.
    let signal: ChangeSignal

    init(signal: ChangeSignal) { self.signal = signal }

    /// Changes the observation of task `index`, then tells ``signal``.
    private func change(_ index: Int, _ body: (inout TaskObservation) -> Void) {
        state.withLock { body(&$0[index, default: .init()]) }
        signal.ping()
    }

    subscript(task: Int) -> TaskObservation { state.withLock { $0[task] ?? TaskObservation() } }

    /// Records `outcome` under `index`.
    func record(_ outcome: TaskObservation.Outcome, as index: Int) {
        change(index) {
            $0.outcome = outcome
            $0.responses += 1
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
            for await event in events { change(index) { $0.events.append(event) } }
            change(index) { $0.isStreamFinished = true }
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

    /// Each queue with its change count now, for ``GraphModelRun/waitForChange(after:metrics:queues:until:)``.
    static var changeCounts: [(WorkQueue, Int)] {
        [data, decode, process].map { ($0, $0.changeCount) }
    }
}
