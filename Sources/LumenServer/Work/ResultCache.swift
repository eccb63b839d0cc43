import Foundation
import Synchronization

/// An encoded image as the server sends it.
struct EncodedImage: Sendable {
    let data: Data
    let contentType: String
    /// A strong validator: a digest of the bytes, quoted.
    let etag: String
}

/// Encoded results in memory: least recently used first out, bounded by total bytes. An
/// entry over an eighth of the budget is not kept (one huge image must not flush the rest).
///
/// - Complexity: O(1) per lookup and store (amortised), a dictionary plus an intrusive list.
final class ResultCache: Sendable {
    private struct Node {
        var value: EncodedImage
        var previous: String?
        var next: String?
    }
    private struct State {
        var nodes: [String: Node] = [:]
        var newest: String?
        var oldest: String?
        var bytes = 0
    }
    private let state = Mutex(State())
    let budget: Int

    init(budget: Int) { self.budget = max(0, budget) }

    subscript(key: String) -> EncodedImage? {
        state.withLock { state in
            guard let node = state.nodes[key] else { return nil }
            Self.unlink(key, &state)
            Self.linkNewest(key, node.value, &state)
            return node.value
        }
    }

    func store(_ value: EncodedImage, for key: String) {
        guard value.data.count <= budget / 8 else { return }
        state.withLock { state in
            if let old = state.nodes[key] {
                state.bytes -= old.value.data.count
                Self.unlink(key, &state)
            }
            Self.linkNewest(key, value, &state)
            state.bytes += value.data.count
            while state.bytes > budget, let oldest = state.oldest {
                state.bytes -= state.nodes[oldest]?.value.data.count ?? 0
                Self.unlink(oldest, &state)
            }
        }
    }

    var byteCount: Int { state.withLock { $0.bytes } }
    var count: Int { state.withLock { $0.nodes.count } }

    private static func unlink(_ key: String, _ state: inout State) {
        guard let node = state.nodes.removeValue(forKey: key) else { return }
        if let previous = node.previous { state.nodes[previous]?.next = node.next } else { state.newest = node.next }
        if let next = node.next { state.nodes[next]?.previous = node.previous } else { state.oldest = node.previous }
    }

    private static func linkNewest(_ key: String, _ value: EncodedImage, _ state: inout State) {
        state.nodes[key] = Node(value: value, previous: nil, next: state.newest)
        if let newest = state.newest { state.nodes[newest]?.previous = key }
        state.newest = key
        if state.oldest == nil { state.oldest = key }
    }
}

/// The encode stage: one encode per result key while it runs, shared by every request for
/// that key. The work ends when its last subscriber leaves; a failure is never remembered
/// (the next request starts again).
final class EncodeStage: Sendable {
    private struct Flight {
        let id: Int
        let task: Task<EncodedImage, any Error>
        var subscribers: Int
    }
    private struct State {
        var flights: [String: Flight] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    /// The result for `key`, from running work when there is some (`joined` true), else from
    /// `make`, which runs in a task of its own.
    func result(
        for key: String, make: @escaping @Sendable () async throws -> EncodedImage
    ) async throws -> (image: EncodedImage, joined: Bool) {
        let (flight, joined) = state.withLock { state -> (Flight, Bool) in
            if var flight = state.flights[key] {
                flight.subscribers += 1
                state.flights[key] = flight
                return (flight, true)
            }
            state.nextID += 1
            let id = state.nextID
            let task = Task { [weak self] in
                defer { self?.finish(key, id: id) }
                return try await make()
            }
            let flight = Flight(id: id, task: task, subscribers: 1)
            state.flights[key] = flight
            return (flight, false)
        }
        let hasLeft = Mutex(false)
        let leaveOnce = { @Sendable [weak self] (cancelling: Bool) in
            guard !hasLeft.withLock({ left in defer { left = true }; return left }) else { return }
            self?.leave(key, id: flight.id, cancelling: cancelling)
        }
        return try await withTaskCancellationHandler {
            defer { leaveOnce(false) }
            return (try await flight.task.value, joined)
        } onCancel: {
            leaveOnce(true)
        }
    }

    /// Running encodes.
    var runningCount: Int { state.withLock { $0.flights.count } }

    private func finish(_ key: String, id: Int) {
        state.withLock { state in
            if state.flights[key]?.id == id { state.flights[key] = nil }
        }
    }

    /// One subscriber leaves (a cancellation, or after its answer); the last to cancel
    /// cancels the work.
    private func leave(_ key: String, id: Int, cancelling: Bool) {
        let orphan = state.withLock { state -> Task<EncodedImage, any Error>? in
            guard var flight = state.flights[key], flight.id == id else { return nil }
            flight.subscribers -= 1
            if flight.subscribers > 0 || !cancelling {
                state.flights[key] = flight
                return nil
            }
            state.flights[key] = nil
            return flight.task
        }
        orphan?.cancel()
    }
}
