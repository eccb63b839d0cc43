/// The bookkeeping of one shared task as a value: its life (not started, running, ended), its
/// subscribers and the priority they give it. Each event — a subscriber arrives, leaves or
/// changes its priority; progress arrives; the work ends — is a mutating method that answers
/// what the task must now do (start, push a new priority to its queued operation and its
/// dependency, cancel, deliver to these subscribers). ``SharedTask`` performs those actions;
/// the rules themselves are here, tested event in, action out (`SharedTaskStateTests`), with
/// no graph, queue or lock.
///
/// The task's priority is the highest among its live subscribers, counted per level so that
/// joining and leaving are O(1). `Subscriber` is what a delivery reaches: the task's handler
/// closures, or plain values in tests.
struct SharedTaskState<Subscriber> {
    typealias Priority = ImageRequest.Priority

    enum Phase: Equatable {
        /// No subscriber has arrived yet.
        case waiting
        case running
        /// Finished, failed or cancelled; nothing is accepted any more.
        case ended
    }

    /// One subscription: its slot and an id, which tells it from a later subscriber reusing
    /// the slot (a token of a subscriber that left changes nothing).
    struct Token: Hashable {
        let slot: Int
        let id: Int
    }

    /// What the task does after a subscriber arrived.
    enum Arrival: Equatable {
        /// The first subscriber: start the work at `priority`.
        case start(Priority)
        /// Joined work under way. `raisedTo`: the task's new priority when the newcomer raised
        /// it; `replay`: the progress so far, for the newcomer alone.
        case join(raisedTo: Priority?, replay: ImageTask.Progress?)
        /// The task has ended: subscribe to a new one.
        case refused
    }

    /// What the task does after a subscriber left.
    enum Departure: Equatable {
        /// Nothing (a stale token, or the others keep the priority).
        case none
        /// The last subscriber left: the task has ended; stop its work and release its
        /// dependency.
        case cancel
        /// The task's priority fell to this.
        case lowerPriority(Priority)
    }

    /// The live subscribers, for one delivery: a copy, so that handlers may subscribe or leave
    /// while it is being delivered.
    struct Recipients {
        fileprivate var slots: Slots

        func forEach(_ body: (Subscriber) -> Void) {
            slots.forEach { if let subscriber = $0.subscriber { body(subscriber) } }
        }
    }

    private(set) var phase = Phase.waiting
    /// The highest priority among live subscribers (the first subscriber's until others come).
    private(set) var priority = Priority.veryLow
    private(set) var subscriberCount = 0
    /// The latest progress, for subscribers that join later.
    private(set) var lastProgress: ImageTask.Progress?

    /// Subscriber slots (not a dictionary: joining appends, leaving clears its slot, which a
    /// later subscriber reuses, so the list never outgrows the most subscribers the task had
    /// at once).
    private var slots = Slots()
    private var freeSlots: [Int] = []
    private var nextID = 0
    /// Live subscribers per priority level (inline: nothing allocated per task).
    private var priorityCounts = InlineArray<5, Int>(repeating: 0)

    init() {
        assert(Priority.allCases.count == 5, "SharedTaskState: one priority count per level")
    }

    var isEnded: Bool { phase == .ended }

    // MARK: - Events

    /// `subscriber` arrives at `priority`; answers its token (`nil` when refused) and what to do.
    mutating func subscribe(_ subscriber: Subscriber, priority: Priority) -> (Token?, Arrival) {
        guard phase != .ended else { return (nil, .refused) }
        nextID += 1
        let entry = Slot(id: nextID, priority: priority, subscriber: subscriber)
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            slots[slot] = entry
        } else {
            slot = slots.append(entry)
        }
        subscriberCount += 1
        priorityCounts[priority.rawValue] += 1
        let token = Token(slot: slot, id: nextID)
        guard phase == .running else {
            phase = .running
            self.priority = priority
            return (token, .start(priority))
        }
        let raised = priority > self.priority ? recomputePriority() : nil
        return (token, .join(raisedTo: raised, replay: lastProgress))
    }

    /// The subscriber holding `token` leaves.
    mutating func unsubscribe(_ token: Token) -> Departure {
        guard holds(token) else { return .none }
        let left = slots[token.slot]
        slots[token.slot].subscriber = nil
        freeSlots.append(token.slot)
        subscriberCount -= 1
        priorityCounts[left.priority.rawValue] -= 1
        if subscriberCount == 0 {
            end()
            return .cancel
        }
        guard left.priority == priority, let lowered = recomputePriority() else { return .none }
        return .lowerPriority(lowered)
    }

    /// The subscriber holding `token` changes its priority; answers the task's new priority
    /// when it changed.
    mutating func setPriority(_ priority: Priority, for token: Token) -> Priority? {
        guard holds(token) else { return nil }
        let old = slots[token.slot].priority
        guard old != priority else { return nil }
        slots[token.slot].priority = priority
        priorityCounts[old.rawValue] -= 1
        priorityCounts[priority.rawValue] += 1
        return recomputePriority()
    }

    /// Progress arrived: answers who gets it (`nil` once the task has ended).
    mutating func progress(_ progress: ImageTask.Progress) -> Recipients? {
        guard phase != .ended else { return nil }
        lastProgress = progress
        return Recipients(slots: slots)
    }

    /// Who gets a preview (`nil` once the task has ended): previews are not kept for later
    /// subscribers here (the stages that make them keep the newest).
    func previewRecipients() -> Recipients? {
        phase == .ended ? nil : Recipients(slots: slots)
    }

    /// The work ended (a value or a failure): answers who gets the outcome, `nil` when the
    /// task had already ended (the outcome is then dropped). Every subscription ends with it.
    mutating func finish() -> Recipients? {
        guard phase != .ended else { return nil }
        let recipients = Recipients(slots: slots)
        end()
        return recipients
    }

    // MARK: - Internals

    private func holds(_ token: Token) -> Bool {
        phase != .ended && token.slot < slots.count && slots[token.slot].id == token.id
            && slots[token.slot].subscriber != nil
    }

    private mutating func end() {
        phase = .ended
        slots = Slots()
        freeSlots = []
        subscriberCount = 0
        priorityCounts = InlineArray(repeating: 0)
    }

    /// Sets ``priority`` to the highest level with a live subscriber; answers it when it
    /// changed.
    private mutating func recomputePriority() -> Priority? {
        var level = priorityCounts.count - 1
        while level > 0 && priorityCounts[level] == 0 { level -= 1 }
        let highest = Priority(rawValue: level) ?? .veryLow
        guard highest != priority else { return nil }
        priority = highest
        return highest
    }

    /// A slot of the subscriber list; `subscriber` is `nil` once it left.
    fileprivate struct Slot {
        var id: Int
        var priority: Priority
        var subscriber: Subscriber?
    }

    /// Subscriber slots: slot 0 inline (most tasks have one subscriber), the others in an array.
    fileprivate struct Slots {
        private var first: Slot?
        private var others: [Slot] = []

        var count: Int { first == nil ? 0 : others.count + 1 }

        /// Adds a slot holding `slot`; answers its index.
        mutating func append(_ slot: Slot) -> Int {
            guard first != nil else {
                first = slot
                return 0
            }
            others.append(slot)
            return others.count
        }

        subscript(index: Int) -> Slot {
            get { index == 0 ? first! : others[index - 1] }
            set {
                if index == 0 { first = newValue } else { others[index - 1] = newValue }
            }
        }

        func forEach(_ body: (Slot) -> Void) {
            guard let first else { return }
            body(first)
            others.forEach(body)
        }
    }
}
