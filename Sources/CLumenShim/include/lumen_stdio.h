#ifndef LUMEN_STDIO_H
#define LUMEN_STDIO_H
// CLumenShim / the C streams for the command-line tool.

#include <stdio.h>

/// Why C: Swift's `print` writes to C's `stdout`, which Swift 6 cannot name (a global mutable
/// variable is not concurrency-safe to reference). Errors are dropped, as a tool's reporting
/// must never stop its work.

/// Makes `stdout` line-buffered, whatever it is connected to.
static inline void lumen_stdout_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }
/// Writes `text` to `stdout` and flushes it (a progress bar drawn in place).
static inline void lumen_stdout_write(const char *text) { fputs(text, stdout); fflush(stdout); }
/// Writes `text` to `stderr` (unbuffered).
static inline void lumen_stderr_write(const char *text) { fputs(text, stderr); }

#endif
