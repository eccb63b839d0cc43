import Foundation
import Synchronization

/// A progress bar on a terminal, plain lines otherwise; failures always go to stderr. Counts
/// are per input given: a job stands for every input that names it.
final class ProgressReporter: Sendable {
    private let total: Int
    private let isTerminal: Bool
    private let state = Mutex<(done: Int, failed: Int)>((0, 0))

    init(total: Int, isTerminal: Bool) {
        self.total = total
        self.isTerminal = isTerminal
    }

    /// Shows the empty bar on a terminal.
    func start() {
        if isTerminal { drawBar(0) }
    }

    func finished(_ job: ThumbnailCommand.Job, error: String?) {
        state.withLock { state in
            if error == nil { state.done += job.count } else { state.failed += job.count }
            let count = state.done + state.failed
            let plan = try? job.plan.get()
            // Inputs, reasons and paths may hold control characters: each line stays one line.
            let input = ThumbnailCommand.printable(job.shownInput)
            let destination = ThumbnailCommand.printable(plan?.destination ?? "")
            let reason = error.map { ThumbnailCommand.printable(job.redacted($0)) }
            if isTerminal {
                // Lines go above the bar: clear its line, print, draw it again.
                if let reason {
                    writeOut("\r\u{1B}[K")
                    printError("\(input): \(reason)")
                } else if let plan, plan.sharesName {
                    writeOut("\r\u{1B}[K\(input) -> \(destination)\n")
                }
                drawBar(count)
            } else if let reason {
                printError("\(input): \(reason)")
                print("failed \(count)/\(total): \(input)")
            } else {
                print("done \(count)/\(total): \(input) -> \(destination)")
            }
        }
    }

    /// Inputs done and failed so far.
    var counts: (done: Int, failed: Int) { state.withLock { $0 } }

    func close() {
        if isTerminal { writeOut("\n") }
    }

    private func drawBar(_ count: Int) {
        writeOut("\r" + progressBar(count, of: total, columns: standardOutputColumns))
    }
}
