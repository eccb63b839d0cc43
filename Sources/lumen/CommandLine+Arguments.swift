import Foundation
import CLumenShim

/// A usage error: the command prints it with the usage text and exits with status 2.
struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Minimal argument parsing: `--flag`, `--option value` / `--option=value`, short forms
/// (`-s 256`, `-s256`), positionals, and `--` before positionals that start with `-`.
///
/// The rules, the same for every command:
/// - An option that is not known, long (`--x`) or short (`-x`), is a usage error, never an
///   input: a file named `-x` goes after `--`. A lone `-` is a positional.
/// - An option given twice is a usage error, unless it is one of `repeatableOptions`.
/// - A value option takes the next argument as its value whatever it looks like
///   (`--output -dir`).
struct Arguments {
    private(set) var positionals: [String] = []
    /// Every value given for each option, in order (`string(_:)` is the last one).
    private var options: [String: [String]] = [:]
    private var flags: Set<String> = []

    /// Parses `arguments`; `valueOptions` take a value, `flagOptions` don't; `shortNames` maps
    /// a letter to the long name it stands for (`"s": "size"`); `repeatableOptions` may be
    /// given more than once. Anything else starting with `-` is a usage error.
    init(_ arguments: [String], valueOptions: Set<String>, flagOptions: Set<String>,
         repeatableOptions: Set<String> = [], shortNames: [Character: String] = [:]) throws {
        var i = 0
        while i < arguments.count {
            let arg = arguments[i]
            if arg == "--" {
                positionals += arguments[(i + 1)...]
                break
            }
            guard arg.hasPrefix("-"), arg != "-" else {
                positionals.append(arg)
                i += 1
                continue
            }
            var name: String
            var shown: String
            var value: String?
            if arg.hasPrefix("--") {
                name = String(arg.dropFirst(2))
                if let eq = name.firstIndex(of: "=") {
                    value = String(name[name.index(after: eq)...])
                    name = String(name[..<eq])
                }
                shown = "--\(name)"
                guard flagOptions.contains(name) || valueOptions.contains(name) else {
                    throw UsageError("unknown option \(shown)")
                }
            } else {
                let letter = arg.dropFirst().first!
                shown = "-\(letter)"
                guard let long = shortNames[letter] else {
                    throw UsageError("unknown option \(shown)" + (arg.count == 2 ? " (an input named \(arg) goes after --)" : " in '\(arg)' (an input named so goes after --)"))
                }
                name = long
                shown += " (--\(long))"
                let attached = arg.dropFirst(2)
                if !attached.isEmpty {
                    guard valueOptions.contains(name) else { throw UsageError("\(shown) takes no value, got '\(arg)'") }
                    value = String(attached)
                }
            }
            if options[name] != nil || flags.contains(name), !repeatableOptions.contains(name) {
                throw UsageError("\(shown) given twice")
            }
            if flagOptions.contains(name) {
                guard value == nil else { throw UsageError("\(shown) takes no value") }
                flags.insert(name)
            } else {
                if value == nil {
                    i += 1
                    guard i < arguments.count else { throw UsageError("\(shown) needs a value") }
                    value = arguments[i]
                }
                options[name, default: []].append(value!)
            }
            i += 1
        }
    }

    func flag(_ name: String) -> Bool { flags.contains(name) }
    func string(_ name: String) -> String? { options[name]?.last }
    /// Every value of a repeatable option, in the order given.
    func strings(_ name: String) -> [String] { options[name] ?? [] }

    func int(_ name: String, range: ClosedRange<Int>) throws -> Int? {
        guard let s = string(name) else { return nil }
        guard let v = Int(s), range.contains(v) else {
            throw UsageError("--\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound), got '\(s)'")
        }
        return v
    }
}

/// Writes a line to standard error. A write that fails (stderr closed, a full disk) is
/// dropped: reporting never stops the work.
func printError(_ message: String) {
    lumen_stderr_write(message + "\n")
}

/// Writes `text` to standard output now (no line end added), for progress bars drawn in place.
/// A write that fails is dropped, as for ``printError(_:)``.
func writeOut(_ text: String) {
    lumen_stdout_write(text)
}

/// Sets up the standard streams: a descriptor 0–2 that was closed is opened on `/dev/null` (or
/// the next file opened would take its number and get the tool's messages); stdout is
/// line-buffered even when it is not a terminal, so each progress line reaches a pipe when it
/// is printed.
func prepareStandardStreams() {
    for descriptor in Int32(0)...2 where fcntl(descriptor, F_GETFD) == -1 {
        let opened = open("/dev/null", O_RDWR)
        if opened >= 0 && opened != descriptor {
            dup2(opened, descriptor)
            close(opened)
        }
    }
    lumen_stdout_line_buffered()
}

/// The width of the terminal on standard output in columns, `nil` when unknown.
var standardOutputColumns: Int? {
    var size = winsize()
    guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
    return Int(size.ws_col)
}

/// Whether standard output is a terminal (progress bars only then).
var isStandardOutputTerminal: Bool { isatty(STDOUT_FILENO) != 0 }

/// Seconds since an arbitrary point, monotonic.
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// This process's peak resident set size in bytes.
func peakResidentBytes() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss * 1024
}

/// CPU time (user + system) this process has used, in seconds.
func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A `kB` field of `/proc/self/status` (`VmHWM`, `VmRSS`, …) in bytes; `nil` where the file
/// or the field does not exist.
func processStatusBytes(_ key: String) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        if fields.count >= 2, let kB = Int(fields[1]) { return kB * 1024 }
    }
    return nil
}

/// Reads a whole file, turning failures into a readable error.
struct FileReadError: Error, CustomStringConvertible {
    var path: String
    var reason: String
    var description: String { "cannot read \(path): \(reason)" }
}

func readFile(_ path: String) throws -> Data {
    guard let data = FileManager.default.contents(atPath: path) else {
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
        throw FileReadError(path: path, reason: !exists ? "no such file" : isDirectory.boolValue ? "is a directory" : "unreadable")
    }
    return data
}

/// A text progress bar, `[#####---…] done/total` (full when `total` is 0): 30 columns of bar,
/// fewer when the line would not fit in `columns` (a line that wraps cannot be redrawn in
/// place), none below 4.
func progressBar(_ done: Int, of total: Int, columns: Int? = nil) -> String {
    let counts = " \(done)/\(total)"
    let room = columns.map { $0 - 1 - counts.count - 2 } ?? 30 // one column for the cursor
    guard room >= 4 else { return String(counts.dropFirst()) }
    let width = min(30, room)
    let filled = total == 0 ? width : min(width, done * width / total)
    return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] \(done)/\(total)"
}
