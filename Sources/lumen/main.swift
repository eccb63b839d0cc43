import Foundation
import Lumen

/// `lumen`: Lumen's command-line tool, a thin client of the public API.
let usage = """
    usage: lumen <command> [options]

    commands:
      demo        replay a scrolling feed through Lumen and a naive loader, side by side (--quick, --json)
      thumbnail   make thumbnails of image files (lumen thumbnail --help)
      bench       side-by-side benchmarks: lumen bench [decode|coalesce|overhead|cache|feed]... [--json] [--iterations N]
    """

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
    exit(await ThumbnailCommand.run(rest))
case "bench":
    exit(await BenchCommand.run(rest))
case "bench-child":
    exit(BenchCommand.child(rest))
case "help", "--help", "-h":
    print(usage)
default:
    printError("lumen: unknown command '\(command)'\n\(usage)")
    exit(2)
}
