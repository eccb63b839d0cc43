#!/usr/bin/env bash
# Coverage-guided fuzzing of Lumen's parsers with libFuzzer + AddressSanitizer.
#
# A development tool, not part of the package: it compiles the sources each target needs
# (Sources/LumenImaging and the CLumenShim C files; the three files of Sources/LumenServer/URL;
# the disk cache's entry format from Sources/Lumen/Caching) and one harness from Fuzz/
# directly with the Swift toolchain's swiftc and clang (`-sanitize=fuzzer,address`) into
# .build/fuzz, so `swift build` and the product are unaffected. A target is rebuilt only when
# one of its inputs is newer than its binary.
#
# Targets (one binary each, .build/fuzz/TARGET-fuzzer):
#   decoder       every public decoding entry point (Fuzz/DecoderFuzzer.swift)
#   jpeg-reduced  differential: Lumen's 1/8 and 1/4 JPEG decoder against TurboJPEG's scaled
#                 decode of the same bytes (Fuzz/JPEGReducedFuzzer.swift)
#   png-rows      differential: ISA-L's PNG row reader against libspng, same pixels or the
#                 same error (Fuzz/PNGRowsFuzzer.swift)
#   server-url    LumenServer's path, option and signature parsing (Fuzz/ServerURLFuzzer.swift)
#   cache-entry   the disk cache's entry reader (Fuzz/CacheEntryFuzzer.swift)
#
#   scripts/fuzz.sh build [TARGET...]     # build the given targets (default: all)
#   scripts/fuzz.sh run FORMAT [SECONDS]  # decoder; FORMAT: jpeg | png | webp | gif | heif | all (300 s)
#   scripts/fuzz.sh run TARGET [SECONDS]  # any other target by name (300 s)
#   scripts/fuzz.sh smoke                 # every target for $FUZZ_SMOKE_SECONDS (60) from the
#                                         # saved seeds; one line each; non-zero on any finding
#   FUZZ_HEIF=1 scripts/fuzz.sh ...       # the decoder with libheif (LUMEN_HEIF); needed for heif
#   scripts/fuzz.sh repro [TARGET] FILE...  # run a target (default decoder) once on given inputs
#   scripts/fuzz.sh seeds                 # rewrite the synthetic image seeds (Fuzz/SeedWriter.swift)
#
# Seeds: Fuzz/seeds/TARGET/ (a few tiny files made for the purpose, see Fuzz/seeds/README.md),
# plus, for the image targets, the matching files of ../shared/corpus (pngsuite, real-world,
# exif-orientation) when it is there. The working corpus and any crash-*/leak-*/timeout-*/
# oom-* artifacts go to $FUZZ_WORK (default /tmp/lumen-fuzz/TARGET or /tmp/lumen-fuzz/FORMAT;
# /tmp/lumen-fuzz/smoke/TARGET for smoke). Corpus copies are never written inside the
# repository. Each run is one process under `nice -n 19` with -rss_limit_mb=2048,
# -malloc_limit_mb=256 (a 4 MP image needs far less: a bigger single allocation is a memory
# bomb) and -max_len=$FUZZ_MAX_LEN (default 65536; 4096 for server-url); extra libFuzzer flags
# can be passed in $FUZZ_FLAGS; Fuzz/FORMAT.dict or Fuzz/TARGET.dict is the dictionary.
# Minimise a crasher with:
#   .build/fuzz/TARGET-fuzzer -minimize_crash=1 -max_total_time=60 crash-XXXX
# and turn it into a test (Tests/LumenImagingTests/FuzzRegressionTests.swift for the image
# targets). The image harnesses recompute PNG chunk CRCs and the cache harness the entry
# checksum before parsing (set LUMEN_FUZZ_DUMP=path with `repro` to get the bytes the decoder
# harness actually decoded). The C libraries are Debian's (not instrumented), so coverage
# guidance comes from Lumen's Swift code and ASan catches misuse at the boundary (bad buffers,
# leaks from missed frees). Known: Debian's libheif 1.15 leaks 40 bytes in its dav1d plug-in
# when an AV1 payload is rejected (not Lumen's handles); fuzz heif with FUZZ_FLAGS=-detect_leaks=0.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.build/fuzz"
TARGETS=(decoder jpeg-reduced png-rows server-url cache-entry)
# FUZZ_HEIF=1 builds with libheif (LUMEN_HEIF) into binaries of their own.
if [ "${FUZZ_HEIF:-0}" = 1 ]; then
    OUT="$OUT/heif"
    HEIF_FLAGS=(-D LUMEN_HEIF -I "$ROOT/Sources/CHeif")
    HEIF_LIBS=(-lheif)
else
    HEIF_FLAGS=()
    HEIF_LIBS=()
fi
CORPUS_ROOT="$(cd "$ROOT/.." && pwd)/shared/corpus"
SEEDS_ROOT="$ROOT/Fuzz/seeds"

# The toolchain's own clang and lld (beside swiftc): the sanitizer and libFuzzer runtimes are
# the ones that ship with it, and a machine with only the Swift toolchain has no other clang.
toolchain() {
    local swiftc
    swiftc="$(command -v swiftc)" || { echo "fuzz: swiftc is not on PATH" >&2; exit 1; }
    TOOLCHAIN_BIN="$(dirname "$(readlink -f "$swiftc")")"
    CLANG="$TOOLCHAIN_BIN/clang"
    [ -x "$CLANG" ] || { echo "fuzz: no clang beside $swiftc" >&2; exit 1; }
    [ -x "$TOOLCHAIN_BIN/ld.lld" ] || { echo "fuzz: no ld.lld beside $swiftc (needed for -use-ld=lld)" >&2; exit 1; }
    SWIFTC=("$TOOLCHAIN_BIN/swiftc" -parse-as-library -O -g -sanitize=fuzzer,address -warnings-as-errors)
}

# stale OUTPUT INPUT...: whether OUTPUT is missing or older than any input (files or folders).
stale() {
    local output="$1"; shift
    [ -e "$output" ] || return 0
    [ -n "$(find "$@" -newer "$output" -print -quit)" ]
}

IMAGING_LIBS=(-lturbojpeg -lspng -lisal -lwebp -lwebpdemux -lwebpmux -lgif -llcms2)

# LumenImaging (built with -enable-testing, so that the differential harnesses can reach the
# switches the tests use) and the CLumenShim objects, shared by the image targets.
build_imaging() {
    local includes=()
    for m in CTurboJPEG CSpng CWebP CGif CLcms2 CIsal; do includes+=(-I "$ROOT/Sources/$m"); done
    IMAGING_INCLUDES=("${includes[@]}" "${HEIF_FLAGS[@]}" -I "$OUT/shim-module" -I "$OUT")
    SHIM_OBJECTS=()
    for c in "$ROOT"/Sources/CLumenShim/*.c; do SHIM_OBJECTS+=("$OUT/$(basename "$c" .c).o"); done
    stale "$OUT/LumenImaging.o" "$ROOT/Sources/LumenImaging" "$ROOT/Sources/CLumenShim" "$ROOT/scripts/fuzz.sh" || return 0
    mkdir -p "$OUT/shim-module"
    # The module map SwiftPM would generate for the CLumenShim target's include/ directory.
    cat > "$OUT/shim-module/module.modulemap" <<MAP
module CLumenShim {
    umbrella "$ROOT/Sources/CLumenShim/include"
    export *
}
MAP
    for c in "$ROOT"/Sources/CLumenShim/*.c; do
        "$CLANG" -c -g -O1 -fsanitize=address,fuzzer-no-link -I "$ROOT/Sources/CLumenShim/include" "$c" \
            -o "$OUT/$(basename "$c" .c).o"
    done
    local sources
    mapfile -t sources < <(find "$ROOT/Sources/LumenImaging" -name '*.swift' | sort)
    # The engine as a module of its own, so a harness sees only its API.
    "${SWIFTC[@]}" -module-name LumenImaging -wmo -enable-testing "${IMAGING_INCLUDES[@]}" \
        -emit-module -emit-module-path "$OUT/LumenImaging.swiftmodule" \
        -c "${sources[@]}" -o "$OUT/LumenImaging.o"
}

# build_image_target NAME HARNESS: a harness over LumenImaging (with Fuzz/ImageFuzzSupport.swift).
build_image_target() {
    local name="$1" harness="$ROOT/Fuzz/$2" bin="$OUT/$1-fuzzer"
    build_imaging
    stale "$bin" "$harness" "$ROOT/Fuzz/ImageFuzzSupport.swift" "$OUT/LumenImaging.o" || return 0
    "${SWIFTC[@]}" -module-name "$(basename "$2" .swift)" "${IMAGING_INCLUDES[@]}" \
        "$harness" "$ROOT/Fuzz/ImageFuzzSupport.swift" "$OUT/LumenImaging.o" "${SHIM_OBJECTS[@]}" \
        -use-ld=lld "${IMAGING_LIBS[@]}" "${HEIF_LIBS[@]}" -o "$bin"
    echo "built $bin"
}

# The URL folder of LumenServer as a module of that name: it needs only Foundation, CCrypto
# (HMAC) and `ImageServer.isAVIFAvailable`, which Fuzz/ServerURLStubs.swift stands in for
# (with `import Lumen` satisfied by an empty module), so the HTTP and fleet C libraries stay out.
build_server_url() {
    local bin="$OUT/server-url-fuzzer" url="$ROOT/Sources/LumenServer/URL"
    stale "$bin" "$url" "$ROOT/Fuzz/ServerURLFuzzer.swift" "$ROOT/Fuzz/ServerURLStubs.swift" "$ROOT/scripts/fuzz.sh" || return 0
    mkdir -p "$OUT/server-url/stub"
    : > "$OUT/server-url/stub/Lumen.swift"
    "${SWIFTC[@]}" -module-name Lumen -wmo -emit-module -emit-module-path "$OUT/server-url/Lumen.swiftmodule" \
        -c "$OUT/server-url/stub/Lumen.swift" -o "$OUT/server-url/Lumen.o"
    local sources
    mapfile -t sources < <(find "$url" -name '*.swift' | sort)
    "${SWIFTC[@]}" -module-name LumenServer -wmo -enable-testing -I "$ROOT/Sources/CCrypto" -I "$OUT/server-url" \
        -emit-module -emit-module-path "$OUT/server-url/LumenServer.swiftmodule" \
        -c "${sources[@]}" "$ROOT/Fuzz/ServerURLStubs.swift" -o "$OUT/server-url/LumenServer.o"
    "${SWIFTC[@]}" -module-name ServerURLFuzzer -I "$ROOT/Sources/CCrypto" -I "$OUT/server-url" \
        "$ROOT/Fuzz/ServerURLFuzzer.swift" "$OUT/server-url/LumenServer.o" "$OUT/server-url/Lumen.o" \
        -use-ld=lld -lcrypto -o "$bin"
    echo "built $bin"
}

# The disk cache's entry format (with its checksum and metadata types) as a module named Lumen.
build_cache_entry() {
    local bin="$OUT/cache-entry-fuzzer" caching="$ROOT/Sources/Lumen/Caching"
    local sources=("$caching/DataCache+EntryFormat.swift" "$caching/EntryChecksum.swift" "$caching/CacheMetadata.swift")
    stale "$bin" "${sources[@]}" "$ROOT/Fuzz/CacheEntryFuzzer.swift" "$ROOT/scripts/fuzz.sh" || return 0
    mkdir -p "$OUT/cache-entry"
    "${SWIFTC[@]}" -module-name Lumen -wmo -enable-testing \
        -emit-module -emit-module-path "$OUT/cache-entry/Lumen.swiftmodule" \
        -c "${sources[@]}" -o "$OUT/cache-entry/Lumen.o"
    "${SWIFTC[@]}" -module-name CacheEntryFuzzer -I "$OUT/cache-entry" \
        "$ROOT/Fuzz/CacheEntryFuzzer.swift" "$OUT/cache-entry/Lumen.o" -use-ld=lld -o "$bin"
    echo "built $bin"
}

build() {  # build [TARGET...]
    toolchain
    mkdir -p "$OUT"
    local targets=("$@")
    [ ${#targets[@]} -gt 0 ] || targets=("${TARGETS[@]}")
    for t in "${targets[@]}"; do
        case "$t" in
            decoder) build_image_target decoder DecoderFuzzer.swift ;;
            jpeg-reduced) build_image_target jpeg-reduced JPEGReducedFuzzer.swift ;;
            png-rows) build_image_target png-rows PNGRowsFuzzer.swift ;;
            server-url) build_server_url ;;
            cache-entry) build_cache_entry ;;
            seeds) build_image_target seeds SeedWriter.swift ;;
            *) echo "fuzz: unknown target $t (${TARGETS[*]})" >&2; exit 2 ;;
        esac
    done
}

seed() {  # seed FORMAT DIR: the corpus files of FORMAT (jpeg png webp gif heif all)
    local format="$1" dir="$2" f
    mkdir -p "$dir"
    [ -d "$CORPUS_ROOT" ] || return 0
    local files=()
    mapfile -t files < <(find "$CORPUS_ROOT" -type f \
        \( -name '*.jpg' -o -name '*.png' -o -name '*.webp' -o -name '*.gif' -o -name '*.avif*' \) -size -200k | sort)
    for f in "${files[@]}"; do
        local magic
        magic="$(head -c 12 "$f" | od -An -tx1 | tr -d ' \n')"
        case "$format:$magic" in
            jpeg:ffd8ff* | png:89504e47* | gif:474946* | webp:52494646????????57454250 | \
                heif:????????66747970* | all:*)
                cp "$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")" ;;
        esac
    done
}

# target_of NAME: the target a `run` name means (a decoder format or a target), and its
# corpus format (empty for none).
target_of() {
    case "$1" in
        jpeg | png | webp | gif | heif | all) TARGET=decoder; FORMAT="$1" ;;
        decoder) TARGET=decoder; FORMAT=all ;;
        jpeg-reduced) TARGET="$1"; FORMAT=jpeg ;;
        png-rows) TARGET="$1"; FORMAT=png ;;
        server-url | cache-entry) TARGET="$1"; FORMAT="" ;;
        *) echo "fuzz: unknown target or format $1 (${TARGETS[*]}; decoder formats jpeg png webp gif heif all)" >&2; exit 2 ;;
    esac
}

# fuzz NAME SECONDS WORK: runs NAME's target for SECONDS in WORK (corpus, seeds, artifacts,
# log), returning libFuzzer's status.
fuzz() {
    local name="$1" seconds="$2" work="$3"
    target_of "$name"
    local bin="$OUT/$TARGET-fuzzer"
    mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
    [ -z "$FORMAT" ] || seed "$FORMAT" "$work/seeds"
    if [ -d "$SEEDS_ROOT/$TARGET" ]; then cp "$SEEDS_ROOT/$TARGET"/* "$work/seeds/"; fi
    local dict=()
    if [ "$name" = all ] || [ "$name" = decoder ]; then
        cat "$ROOT"/Fuzz/*.dict > "$work/all.dict"
        dict=(-dict="$work/all.dict")
    elif [ -f "$ROOT/Fuzz/$name.dict" ]; then
        dict=(-dict="$ROOT/Fuzz/$name.dict")
    elif [ -n "$FORMAT" ] && [ -f "$ROOT/Fuzz/$FORMAT.dict" ]; then
        dict=(-dict="$ROOT/Fuzz/$FORMAT.dict")
    fi
    local max_len="${FUZZ_MAX_LEN:-65536}"
    [ "$TARGET" != server-url ] || max_len="${FUZZ_MAX_LEN:-4096}"
    (
        cd "$work/artifacts"
        # libFuzzer and ASan report a trap themselves; Swift's backtracer would race them.
        export SWIFT_BACKTRACE=enable=no
        # shellcheck disable=SC2086
        exec nice -n 19 "$bin" "$work/corpus" "$work/seeds" \
            -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb="${FUZZ_MALLOC_LIMIT_MB:-256}" -timeout=25 \
            -max_len="$max_len" -print_final_stats=1 "${dict[@]}" ${FUZZ_FLAGS:-}
    )
}

# smoke: every target from its seeds for FUZZ_SMOKE_SECONDS; one line each; fails on any finding.
smoke() {
    local seconds="${FUZZ_SMOKE_SECONDS:-60}" root="${FUZZ_WORK:-/tmp/lumen-fuzz/smoke}" failed=0
    build
    for t in "${TARGETS[@]}"; do
        local work="$root/$t"
        rm -rf "$work"
        mkdir -p "$work"
        local status=0
        fuzz "$t" "$seconds" "$work" > "$work/log" 2>&1 || status=$?
        # The last status line (`#N DONE cov: C ft: F corp: U/B ...`) and the final stats.
        local done execs cov corp result
        done="$(grep -E '^#[0-9]+[[:space:]]+(DONE|INITED|NEW|REDUCE|pulse)' "$work/log" | tail -n 1 || true)"
        execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)"
        cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done")"
        corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<<"$done")"
        if [ "$status" -eq 0 ]; then
            result=ok
        else
            failed=1
            local artifact
            artifact="$(find "$work/artifacts" -type f | head -n 1)"
            result="FINDING (exit $status${artifact:+, $artifact}; log $work/log)"
        fi
        printf 'fuzz-smoke %-13s %3ss  execs: %-9s cov: %-6s corpus: %-12s %s\n' \
            "$t" "$seconds" "${execs:-?}" "${cov:-?}" "${corp:-?}" "$result"
    done
    return "$failed"
}

# The whole script is parsed before it runs (main is called on the last line), so editing
# this file while a long fuzzing run is going does not derail that run.
main() {
case "${1:-}" in
    build) shift; build "$@" ;;
    run)
        local name="${2:?target or decoder format}" seconds="${3:-300}"
        target_of "$name"
        build "$TARGET"
        fuzz "$name" "$seconds" "${FUZZ_WORK:-/tmp/lumen-fuzz/$name}" ;;
    smoke) smoke ;;
    seeds)  # rewrites the synthetic image seeds in Fuzz/seeds (see Fuzz/SeedWriter.swift)
        build seeds
        LUMEN_SEEDS="$ROOT/Fuzz/seeds" "$OUT/seeds-fuzzer" ;;
    repro)
        shift
        local target=decoder
        if [ $# -gt 0 ] && [[ " ${TARGETS[*]} " == *" $1 "* ]]; then target="$1"; shift; fi
        build "$target"
        SWIFT_BACKTRACE=enable=no "$OUT/$target-fuzzer" -rss_limit_mb=2048 -malloc_limit_mb="${FUZZ_MALLOC_LIMIT_MB:-256}" -timeout=25 "$@" ;;
    *) sed -n '2,/^set -e/{/^set -e/!p}' "$0"; exit 2 ;;
esac
}

main "$@"; exit $?
