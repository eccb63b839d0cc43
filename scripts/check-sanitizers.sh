#!/usr/bin/env bash
# Lumen's test suites under the sanitizers, one suite per process (`make check-sanitizers`).
#
#   scripts/check-sanitizers.sh                  address (ASan + UBSan), then thread (TSan); every suite
#   scripts/check-sanitizers.sh address [REGEX]  AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/check-sanitizers.sh thread [REGEX]   ThreadSanitizer
#
# REGEX (extended grep) picks the suites by name; `all` or nothing means every suite. Each mode
# builds into a scratch directory of its own (.build-address, .build-thread), apart from .build,
# so that no build undoes another; SwiftPM passes the sanitizer flags to the C targets too
# (CLumenShim's decoders and resampler, the systemLibrary shims), so Lumen's C is instrumented.
# Debian's libraries (libjpeg-turbo, libpng, libwebp, libcurl, libmicrohttpd, hiredis) are not.
#
# Each suite runs on its own (`swift test --filter ^TARGET.SUITE\b`), one at a time, and prints
# one line: its exit status, the sanitizer reports of every process it ran (the test runner and
# the `lumen` processes some tests start, which are built with the same sanitizer), and the
# test run's summary. Reports go to files (`log_path`), never stop a process early
# (`halt_on_error=0` where the sanitizer allows it) and do not change exit statuses
# (`exitcode=0`), so that a test checking a child's status fails only for its own reasons; they
# are counted from the files. Logs: SCRATCH/sanitizer-logs/SUITE.{log,asan.PID,ubsan.PID,tsan.PID}.
# Exits 1 when any suite failed or had a report.
#
# Why -DLUMEN_TSAN_MUTEX under TSan: on Linux `Synchronization.Mutex` locks with raw futexes,
# which TSan does not intercept. TSan then sees no ordering between two critical sections of one
# lock and reports every access inside `withLock` as a race, which buries the real ones. With
# the flag, each module that uses `Mutex` compiles its `TSanMutex.swift`: a module-internal
# alias `Mutex` for LumenConcurrency's `PThreadMutex`, backed by `pthread_mutex_t` (which TSan
# intercepts), that shadows `Synchronization.Mutex`. Without the flag those files are empty. `NSLock`, `NSCondition`,
# `DispatchQueue` and `Atomic` are visible to TSan anyway, and so are most of Swift
# concurrency's hand-offs (the runtime tells TSan when a job is queued and run).
#
# Suppressions (scripts/sanitizers/*.supp), each naming whose code it is:
# - lsan.supp: XCTest's runner's once-per-process allocations (libXCTest.so), see the file.
# - tsan.supp: none; the complete run recorded in the Reliability article needed none.
# The reports that remain and are explained, not suppressed, are listed in that article.
set -euo pipefail
cd "$(dirname "$0")/.."

SWIFT=${SWIFT:-swift}
mode=${1:-both}
pattern=${2:-.}
[ "$pattern" = all ] && pattern='.'
supp=$PWD/scripts/sanitizers

if [ "$mode" = both ]; then
    status=0
    "$0" address "$pattern" || status=1
    "$0" thread "$pattern" || status=1
    exit "$status"
fi

case "$mode" in
    address)
        SCRATCH=.build-address
        # swiftc has no UBSan on Linux (Swift traps on overflow and bad casts by itself):
        # UndefinedBehaviorSanitizer instruments the C targets, and the link takes its runtime.
        FLAGS=(--sanitize=address -Xcc -fsanitize=undefined
               -Xswiftc -Xclang-linker -Xswiftc -fsanitize=undefined --scratch-path "$SCRATCH")
        ;;
    thread)
        SCRATCH=.build-thread
        FLAGS=(--sanitize=thread --scratch-path "$SCRATCH" -Xswiftc -DLUMEN_TSAN_MUTEX)
        # Every module that uses `Mutex` must hold TSanMutex.swift (the alias to
        # LumenConcurrency's pthread lock), the same in each: a module without it would still use
        # the futex lock, and TSan would flood again.
        reference=Sources/Lumen/Internal/TSanMutex.swift
        status=0
        for module in Sources/*/ Tests/*/; do
            users=$(grep -rlE '\bMutex *[<(]' --include='*.swift' "$module" | grep -v '/TSanMutex\.swift$' || true)
            [ -z "$users" ] && continue
            copy=$(find "$module" -name TSanMutex.swift | head -n 1)
            if [ -z "$copy" ]; then
                echo "check-sanitizers: $module uses Mutex but has no TSanMutex.swift (copy $reference)" >&2
                status=1
            elif ! cmp -s "$copy" "$reference"; then
                echo "check-sanitizers: $copy differs from $reference" >&2
                status=1
            fi
        done
        [ "$status" -eq 0 ] || exit 1
        ;;
    *)
        echo "usage: scripts/check-sanitizers.sh [address|thread] [REGEX|all]" >&2
        exit 2
        ;;
esac

echo "check-sanitizers: building with ${FLAGS[*]}"
"$SWIFT" build --build-tests "${FLAGS[@]}"

logs=$PWD/$SCRATCH/sanitizer-logs
mkdir -p "$logs"
failed=0
ran=0
started=$(date +%s)
for target_dir in Tests/*/; do
    target=$(basename "$target_dir")
    suites=$(grep -rhoE '^\s*(@Suite[^\n]*\s+)?(struct|final class|class) [A-Za-z0-9_]+Tests\b' --include='*.swift' "$target_dir" \
        | awk '{print $NF}' | sort -u | grep -E "$pattern" || true)
    for suite in $suites; do
        log=$logs/$suite.log
        rm -f "$logs/$suite".asan.* "$logs/$suite".ubsan.* "$logs/$suite".tsan.*
        set +e
        ASAN_OPTIONS="halt_on_error=0 exitcode=0 detect_leaks=1 log_path=$logs/$suite.asan" \
        LSAN_OPTIONS="suppressions=$supp/lsan.supp print_suppressions=0" \
        UBSAN_OPTIONS="halt_on_error=0 print_stacktrace=1 log_path=$logs/$suite.ubsan" \
        TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0 second_deadlock_stack=1} exitcode=0 suppressions=$supp/tsan.supp log_path=$logs/$suite.tsan" \
            "$SWIFT" test --skip-build "${FLAGS[@]}" --no-parallel --filter "^$target\.$suite\b" >"$log" 2>&1
        code=$?
        set -e
        reports=$(cat /dev/null "$logs/$suite".asan.* "$logs/$suite".ubsan.* "$logs/$suite".tsan.* 2>/dev/null \
            | grep -cE '(WARNING|ERROR): (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|runtime error:' || true)
        summary=$(grep -E 'Test run with' "$log" | tail -n 1 || true)
        echo "$suite: exit $code, $reports report(s). ${summary:-no test run line}"
        ran=$((ran + 1))
        if [ "$code" -ne 0 ] || [ "$reports" -ne 0 ]; then failed=$((failed + 1)); fi
    done
done

if [ "$ran" -eq 0 ]; then
    echo "check-sanitizers: no suite matches '$pattern'" >&2
    exit 1
fi
echo "check-sanitizers ($mode): $ran suite(s) in $(( $(date +%s) - started )) s, $failed with a report or a failure; logs in $logs"
[ "$failed" -eq 0 ]
