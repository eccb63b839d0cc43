#!/usr/bin/env bash
# ThreadSanitizer run of the concurrency-heavy suites (or those matching REGEX, or `all`): a
# shorthand for `scripts/check-sanitizers.sh thread`, which explains the build and the reports.
#   scripts/tsan.sh [REGEX|all]
set -euo pipefail
exec "$(dirname "$0")/check-sanitizers.sh" thread "${1:-Pipeline|Graph|Prefetch|WorkQueue|SharedTask|DataCache|BackgroundQueue|FetchImage|Task}"
