import Foundation
import Lumen
import Synchronization

/// `lumen`: Lumen's command-line tool, a thin client of the public API.
let usage = """
    usage: lumen <command> [options]

    commands:
      demo        replay a scrolling feed through Lumen and a naive loader, side by side (--quick, --seed N, --json, --output DIR)
      thumbnail   make thumbnails of image files or URLs (lumen thumbnail --help)
      serve       the image server: GET /{signature}/{options}/{source} (lumen serve --help)
      sign        print the signed path for a source and options (lumen sign --help)
      bench       side-by-side benchmarks: lumen bench [decode|coalesce|overhead|cache|feed]... [--json] [--iterations N] [--count N]
                  (feed: [--quick] [--seed N], the demo's trace options)
                  lumen bench serve [--json] [--compare NAME=URL-TEMPLATE]...: the image server under distinct, burst and
                  hot workloads, beside other servers driven the same way (lumen bench serve --help)
    """

/// Runs an async command on the global executor while the main thread waits. The main thread
/// never enters `dispatch_main` (which async top-level code would), so the tool runs under
/// valgrind, whose signal handling cannot cope with libdispatch's parked main thread.
func runBlocking(_ command: @escaping @Sendable () async -> Int32) -> Int32 {
    let done = DispatchSemaphore(value: 0)
    let status = Mutex<Int32>(0)
    Task.detached {
        let result = await command()
        status.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return status.withLock { $0 }
}

prepareStandardStreams()
let argv = Array(CommandLine.arguments.dropFirst())
guard let command = argv.first else {
    printError(usage)
    exit(2)
}
let rest = Array(argv.dropFirst())
switch command {
case "demo":
    exit(DemoCommand.run(rest))
case "thumbnail":
    exit(runBlocking { await ThumbnailCommand.run(rest) })
case "serve":
    exit(runBlocking { await ServeCommand.run(rest) })
case "sign":
    exit(SignCommand.run(rest))
case "bench":
    exit(runBlocking { await BenchCommand.run(rest) })
case "bench-child":
    exit(BenchCommand.child(rest))
case "help", "--help", "-h":
    print(usage)
default:
    printError("lumen: unknown command '\(command)'\n\(usage)")
    exit(2)
}
