#!/usr/bin/env bash
# Coverage-guided fuzzing of LumenImaging's decoder with libFuzzer + AddressSanitizer.
#
# A development tool, not part of the package: it compiles Sources/LumenImaging, the
# CLumenShim C files and Fuzz/DecoderFuzzer.swift directly with swiftc/clang
# (`-sanitize=fuzzer,address`), so `swift build` and the product are unaffected.
#
#   scripts/fuzz.sh build                 # build .build/fuzz/decoder-fuzzer
#   scripts/fuzz.sh run FORMAT [SECONDS]  # FORMAT: jpeg | png | webp | gif | heif | all (300 s)
#   FUZZ_HEIF=1 scripts/fuzz.sh ...       # the same with libheif (LUMEN_HEIF); needed for heif
#   scripts/fuzz.sh repro FILE...         # run the fuzzer on given inputs once (crash repro)
#
# `run` seeds a temporary corpus from ../shared/corpus (pngsuite, real-world,
# exif-orientation) for that format; the working corpus and any crash-*/leak-*/timeout-*/
# oom-* artifacts go to $FUZZ_WORK (default /tmp/lumen-fuzz/FORMAT). Corpus copies are
# never written inside the repository. It runs one process under `nice -n 19` with
# -rss_limit_mb=2048, -malloc_limit_mb=256 (a 4 MP image needs far less: a bigger single
# allocation is a memory bomb) and -max_len=$FUZZ_MAX_LEN (default 65536); extra libFuzzer
# flags can be passed in $FUZZ_FLAGS; Fuzz/FORMAT.dict (chunk names, markers) is the dictionary.
# Minimise a crasher with:
#   .build/fuzz/decoder-fuzzer -minimize_crash=1 -max_total_time=60 crash-XXXX
# and turn it into a test in Tests/LumenImagingTests/FuzzRegressionTests.swift.
# The harness recomputes PNG chunk CRCs before decoding (set LUMEN_FUZZ_DUMP=path with `repro`
# to get the bytes it actually decoded). The C libraries are Debian's (not instrumented), so
# coverage guidance comes from Lumen's Swift code and ASan catches misuse at the boundary
# (bad buffers, leaks from missed frees). Known: Debian's libheif 1.15 leaks 40 bytes in its
# dav1d plug-in when an AV1 payload is rejected (not Lumen's handles); fuzz heif with
# FUZZ_FLAGS=-detect_leaks=0.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.build/fuzz"
# FUZZ_HEIF=1 builds with libheif (LUMEN_HEIF) into a binary of its own.
if [ "${FUZZ_HEIF:-0}" = 1 ]; then
    OUT="$OUT/heif"
    HEIF_FLAGS=(-D LUMEN_HEIF -I "$ROOT/Sources/CHeif")
    HEIF_LIBS=(-lheif)
else
    HEIF_FLAGS=()
    HEIF_LIBS=()
fi
BIN="$OUT/decoder-fuzzer"
CORPUS_ROOT="$(cd "$ROOT/.." && pwd)/shared/corpus"

build() {
    mkdir -p "$OUT/shim-module"
    # The module map SwiftPM would generate for the CLumenShim target's include/ directory.
    cat > "$OUT/shim-module/module.modulemap" <<MAP
module CLumenShim {
    umbrella "$ROOT/Sources/CLumenShim/include"
    export *
}
MAP
    local includes=()
    for m in CTurboJPEG CSpng CWebP CGif CLcms2 CIsal; do includes+=(-I "$ROOT/Sources/$m"); done
    local shim_objects=()
    for c in "$ROOT"/Sources/CLumenShim/*.c; do
        local o="$OUT/$(basename "$c" .c).o"
        clang -c -g -O1 -fsanitize=address,fuzzer-no-link -I "$ROOT/Sources/CLumenShim/include" "$c" -o "$o"
        shim_objects+=("$o")
    done
    local sources
    mapfile -t sources < <(find "$ROOT/Sources/LumenImaging" -name '*.swift' | sort)
    # The engine as a module of its own, so the harness sees only the public API.
    swiftc -module-name LumenImaging -parse-as-library -wmo -O -g \
        -sanitize=fuzzer,address "${HEIF_FLAGS[@]}" \
        "${includes[@]}" -I "$OUT/shim-module" \
        -emit-module -emit-module-path "$OUT/LumenImaging.swiftmodule" \
        -c "${sources[@]}" -o "$OUT/LumenImaging.o"
    swiftc -module-name DecoderFuzzer -parse-as-library -O -g \
        -sanitize=fuzzer,address \
        "${includes[@]}" "${HEIF_FLAGS[@]}" -I "$OUT/shim-module" -I "$OUT" \
        "$ROOT/Fuzz/DecoderFuzzer.swift" "$OUT/LumenImaging.o" "${shim_objects[@]}" \
        -use-ld=lld -lturbojpeg -lspng -lisal -lwebp -lwebpdemux -lwebpmux -lgif -llcms2 "${HEIF_LIBS[@]}" \
        -o "$BIN"
    echo "built $BIN"
}

seed() {  # seed FORMAT DIR
    local format="$1" dir="$2" f
    mkdir -p "$dir"
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

# The whole script is parsed before it runs (main is called on the last line), so editing
# this file while a long fuzzing run is going does not derail that run.
main() {
case "${1:-}" in
    build) build ;;
    run)
        format="${2:?format: jpeg|png|webp|gif|all}"
        seconds="${3:-300}"
        [ -x "$BIN" ] || build
        work="${FUZZ_WORK:-/tmp/lumen-fuzz/$format}"
        mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
        seed "$format" "$work/seeds"
        dict=()
        if [ "$format" = all ]; then
            cat "$ROOT"/Fuzz/*.dict > "$work/all.dict"
            dict=(-dict="$work/all.dict")
        elif [ -f "$ROOT/Fuzz/$format.dict" ]; then
            dict=(-dict="$ROOT/Fuzz/$format.dict")
        fi
        cd "$work/artifacts"
        # shellcheck disable=SC2086
        nice -n 19 "$BIN" "$work/corpus" "$work/seeds" \
            -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=${FUZZ_MALLOC_LIMIT_MB:-256} -timeout=25 \
            -max_len="${FUZZ_MAX_LEN:-65536}" -print_final_stats=1 "${dict[@]}" ${FUZZ_FLAGS:-} ;;
    repro)
        shift
        [ -x "$BIN" ] || build
        "$BIN" -rss_limit_mb=2048 -malloc_limit_mb="${FUZZ_MALLOC_LIMIT_MB:-256}" -timeout=25 "$@" ;;
    *) sed -n '2,/^set -e/{/^set -e/!p}' "$0"; exit 2 ;;
esac
}

main "$@"; exit $?
