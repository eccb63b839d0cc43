import Foundation

/// The bookkeeping of an ``ImagePrefetcher``, as a pure state machine: events in, actions out.
///
/// The prefetcher holds it under a lock and performs the returned actions (start a load,
/// cancel a handle, change a priority, signal completion) after unlocking, so no pipeline
/// call and no user code ever runs under the lock.
///
/// States of one prefetch (identified by its key):
/// - **pending**: waiting in FIFO order for a slot (or for ``isPaused`` to clear);
/// - **starting**: given a slot and a token; the prefetcher is creating its load, whose
///   handle is not attached yet;
/// - **running**: its handle is attached; it leaves on ``finish(key:token:succeeded:)`` or
///   ``stop(_:)``.
///
/// A key is in at most one of these states, so a key that is pending or running is skipped
/// when asked for again. The machine is idle when nothing is pending or running.
struct PrefetchStateMachine<Handle> {
    /// A prefetch given a slot: the caller starts `request` and then calls
    /// ``attach(_:key:token:)`` with its handle.
    struct Start {
        var key: ImageCacheKey
        var token: Int
        var request: ImageRequest
    }

    /// What to do with a handle being attached.
    enum AttachAction: Equatable {
        /// Keep it running.
        case keep
        /// The priority changed while it was starting: apply this one.
        case setPriority(ImageRequest.Priority)
        /// The prefetch was stopped while it was starting: cancel the handle.
        case cancel
    }

    private struct Running {
        var token: Int
        /// The priority the handle has (or, while starting, the one its request started with).
        var priority: ImageRequest.Priority
        var handle: Handle?
    }

    private(set) var priority: ImageRequest.Priority
    private(set) var isPaused = false
    let maxConcurrentCount: Int

    private var pending: [ImageCacheKey: (request: ImageRequest, token: Int)] = [:]
    /// FIFO order of pending keys; entries whose token no longer matches are skipped.
    private var order: [(key: ImageCacheKey, token: Int)] = []
    private var head = 0
    private var running: [ImageCacheKey: Running] = [:]
    private var nextToken = 0

    /// Prefetches that finished with a result / with an error (stopped ones are not counted).
    private(set) var succeededCount = 0
    private(set) var failedCount = 0

    init(maxConcurrentCount: Int, priority: ImageRequest.Priority) {
        precondition(maxConcurrentCount >= 1, "ImagePrefetcher: maxConcurrentRequestCount must be at least 1")
        self.maxConcurrentCount = maxConcurrentCount
        self.priority = priority
    }

    /// Nothing pending, nothing running.
    var isIdle: Bool { pending.isEmpty && running.isEmpty }
    /// Prefetches waiting for a slot.
    var pendingCount: Int { pending.count }
    /// Prefetches holding a slot.
    var runningCount: Int { running.count }

    // MARK: - Events

    /// Queues the prefetches whose keys are neither pending nor running (in order, first
    /// occurrence wins) and returns those that can start now.
    mutating func enqueue(_ items: [(key: ImageCacheKey, request: ImageRequest)]) -> [Start] {
        for (key, request) in items where pending[key] == nil && running[key] == nil {
            nextToken += 1
            pending[key] = (request, nextToken)
            order.append((key, nextToken))
        }
        return fill()
    }

    /// Records the handle of a started prefetch.
    mutating func attach(_ handle: Handle, key: ImageCacheKey, token: Int) -> AttachAction {
        guard var entry = running[key], entry.token == token else { return .cancel }
        let startedWith = entry.priority
        entry.handle = handle
        entry.priority = priority
        running[key] = entry
        return startedWith == priority ? .keep : .setPriority(priority)
    }

    /// A started prefetch ended. Returns the prefetches that can start now and whether the
    /// machine became idle. A stale token (the prefetch was stopped) changes nothing.
    mutating func finish(key: ImageCacheKey, token: Int, succeeded: Bool) -> (starts: [Start], becameIdle: Bool) {
        guard let entry = running[key], entry.token == token else { return ([], false) }
        running[key] = nil
        if succeeded { succeededCount += 1 } else { failedCount += 1 }
        let starts = fill()
        return (starts, isIdle)
    }

    /// Stops the prefetches for `keys`: pending ones are dropped, running ones are returned to
    /// be cancelled (their handles, when attached). Freed slots start pending prefetches.
    mutating func stop(_ keys: [ImageCacheKey]) -> (cancel: [Handle], starts: [Start], becameIdle: Bool) {
        let wasIdle = isIdle
        var cancel: [Handle] = []
        for key in keys {
            pending[key] = nil
            if let entry = running.removeValue(forKey: key), let handle = entry.handle {
                cancel.append(handle)
            }
        }
        compactIfDrained()
        let starts = fill()
        return (cancel, starts, !wasIdle && isIdle)
    }

    /// Stops everything.
    mutating func stopAll() -> (cancel: [Handle], becameIdle: Bool) {
        let wasIdle = isIdle
        let cancel = running.values.compactMap(\.handle)
        pending = [:]
        running = [:]
        order = []
        head = 0
        return (cancel, !wasIdle)
    }

    /// Pauses (no new prefetch starts) or resumes (starts what fits).
    mutating func setPaused(_ paused: Bool) -> [Start] {
        isPaused = paused
        return fill()
    }

    /// Changes the priority of pending and running prefetches; returns the running handles
    /// whose priority must change.
    mutating func setPriority(_ newValue: ImageRequest.Priority) -> [Handle] {
        guard newValue != priority else { return [] }
        priority = newValue
        var handles: [Handle] = []
        for (key, entry) in running {
            // An entry still starting keeps the priority its request started with, so that
            // `attach` sees the difference and applies the new one.
            guard let handle = entry.handle else { continue }
            running[key]!.priority = newValue
            handles.append(handle)
        }
        return handles
    }

    // MARK: - Internals

    /// Moves pending prefetches to running, FIFO, while slots are free and not paused.
    private mutating func fill() -> [Start] {
        var starts: [Start] = []
        while !isPaused, running.count < maxConcurrentCount, head < order.count {
            let (key, token) = order[head]
            head += 1
            guard let entry = pending[key], entry.token == token else { continue }
            pending[key] = nil
            var request = entry.request
            request.priority = priority
            running[key] = Running(token: token, priority: priority, handle: nil)
            starts.append(Start(key: key, token: token, request: request))
        }
        compactIfDrained()
        return starts
    }

    private mutating func compactIfDrained() {
        if pending.isEmpty {
            order = []
            head = 0
        } else if head > 64, head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
