import Foundation

// The disk cache's background work (everything here runs on `queue`, except the bookkeeping
// helpers at the end, which any thread may call).
extension DataCache {
    // MARK: Background work (on `queue`)

    /// Writes the entry for `key`, then forgets its pending bytes (see ``settle(_:_:)``). A
    /// failed write forgets them before it is reported, so that whoever hears of the failure
    /// reads a miss, not the bytes that were dropped.
    func performStore(key: String, data: Data, metadata: CacheMetadata, generation: Int) {
        let name = Self.filename(for: key)
        guard let prefix = EntryFormat.encodePrefix(key: key, metadata: metadata, payload: data) else {
            settle(key, generation)
            report(.writeFailed, key: key, path: store.path(name), reason: "could not encode metadata", code: nil)
            state.withLock { $0.metrics.writeFailures += 1 }
            return
        }
        do {
            let written = try store.writeAtomically(name: name, prefix: prefix, payload: data, now: nextStamp())
            state.withLock { $0.metrics.writes += 1 }
            adjustTotal(by: written.size - (written.replaced ?? 0))
            settle(key, generation)
        } catch {
            state.withLock { $0.metrics.writeFailures += 1 }
            settle(key, generation)
            report(.writeFailed, key: key, path: store.path(name), error)
        }
    }

    func performRenew(key: String, metadata: CacheMetadata) {
        let name = Self.filename(for: key)
        do {
            guard let written = try store.rewritePrefix(name: name, key: key, metadata: metadata, now: nextStamp()) else { return }
            state.withLock { $0.metrics.renewals += 1 }
            adjustTotal(by: written.size - (written.replaced ?? 0))
        } catch {
            state.withLock { $0.metrics.writeFailures += 1 }
            report(.writeFailed, key: key, path: store.path(name), error)
        }
    }

    /// Adds `delta` to the running total (`nil`: unknown change, left to the next sweep), and
    /// sweeps when the total crosses the limit or is unknown. A non-nil `delta` only on the
    /// queue.
    func adjustTotal(by delta: Int?) {
        let over: Bool = state.withLock {
            guard let delta else { return false }
            // Unknown total (the first scan failed, say, on a missing directory): rescan now.
            guard let total = $0.totalSize else { return true }
            $0.totalSize = max(0, total + delta)
            return $0.totalSize! > sizeLimit
        }
        if over {
            assert(queue.isCurrent, "DataCache: a sweep off the cache's queue")
            performSweep()
        }
    }

    func performSweep() {
        let now = clock.now
        let names: [String]
        do {
            names = try store.names()
        } catch {
            report(.sweepFailed, key: nil, path: store.directory, error)
            return
        }
        var entries: [EntryFile] = []
        for name in names {
            if name.hasPrefix(DiskStore.temporaryPrefix) {
                if let status = store.fileStatus(store.path(name)), now.timeIntervalSince(status.modified) >= 3600 {
                    _ = try? store.remove(name: name)
                }
                continue
            }
            guard DiskStore.isEntryName(name) else { continue }
            switch store.scanEntry(name: name) {
            case .success(let entry)?:
                entries.append(entry)
            case .failure(let reason)?:
                do {
                    try store.remove(name: name)
                    state.withLock { $0.metrics.corruptEntriesRemoved += 1 }
                    report(.corruptEntryRemoved, key: nil, path: store.path(name), reason: reason.description, code: nil)
                } catch {
                    report(.removeFailed, key: nil, path: store.path(name), error)
                }
            case nil:
                continue  // vanished meanwhile, or unreadable: the next read decides
            }
        }
        let plan = sweepPlan(entries, now: now, ttl: ttl, sizeLimit: sizeLimit)
        var removed = 0
        var remaining = plan.remainingSize
        for entry in plan.expired + plan.evicted {
            do {
                if try store.remove(name: entry.name) { removed += 1 }
            } catch {
                // It stays on disk: count it so the total is not underestimated.
                if plan.evicted.contains(where: { $0.name == entry.name }) { remaining += entry.size }
                report(.removeFailed, key: nil, path: store.path(entry.name), error)
            }
        }
        state.withLock {
            $0.totalSize = remaining
            $0.metrics.evictions += removed
            $0.metrics.sweeps += 1
        }
    }

    // MARK: Bookkeeping

    /// The clock's time, nudged to be strictly later than the previous stamp (by a
    /// microsecond) so that stamps given out within one clock tick still order the entries.
    func nextStamp() -> Date {
        let now = clock.now
        return state.withLock {
            let stamp = max(now, $0.lastStamp.addingTimeInterval(1e-6))
            $0.lastStamp = stamp
            return stamp
        }
    }

    func enqueue(_ key: String, _ operation: Pending) -> Int {
        state.withLock {
            $0.generation += 1
            $0.pending[key] = (operation, $0.generation)
            return $0.generation
        }
    }

    /// Forgets the pending operation for `key` once on disk, unless a newer one replaced it.
    func settle(_ key: String, _ generation: Int) {
        state.withLock {
            if $0.pending[key]?.generation == generation { $0.pending[key] = nil }
        }
    }

    func report(_ kind: Failure.Kind, key: String?, path: String, _ error: any Error) {
        if let error = error as? IOError {
            report(kind, key: key, path: path, reason: error.message, code: error.code)
        } else {
            report(kind, key: key, path: path, reason: "\(error)", code: nil)
        }
    }

    func report(_ kind: Failure.Kind, key: String?, path: String, reason: String, code: Int32?) {
        let failure = Failure(kind: kind, key: key, path: path, errorCode: code, reason: reason)
        onFailure?(failure)
        failureObservers.notify(failure)
    }
}
