#!/usr/bin/env bash
# A bounded run of every fuzz target of tests/fuzz, for CI and by hand.
# Usage: run.sh [SECONDS [BUILD_DIR]]
#   Configures BUILD_DIR (default: build-fuzz in the repository) with clang,
#   FP4_FUZZ=ON and no CUDA, builds fuzz_npy, fuzz_safetensors, fuzz_spec and
#   fuzz_json, and runs each for SECONDS (default 10) from its seed corpus in
#   tests/fuzz/corpus/<target>/. New inputs go to BUILD_DIR/corpus/<target>,
#   never into the seed corpus; a crash, leak or sanitizer report leaves its
#   input in BUILD_DIR/artifacts/ and fails the run (exit 1).
#   Exit 77 (a CTest skip) when clang cannot build libFuzzer programs here.
set -uo pipefail
SECS=${1:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${2:-$ROOT/build-fuzz}
TARGETS="npy safetensors spec json"

case $SECS in '' | *[!0-9]*) echo "run.sh: SECONDS must be a whole number, not '$SECS'" >&2; exit 2 ;; esac
CLANG=${FP4_FUZZ_CC:-clang}
if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "run.sh: $CLANG not found: fuzzing skipped (install clang to run it)"
    exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "run.sh: $CLANG cannot build libFuzzer programs (no libFuzzer runtime?): fuzzing skipped"
    exit 77
fi

mkdir -p "$BUILD" || exit 1
CC="$CLANG" cmake -S "$ROOT" -B "$BUILD" -DFP4_FUZZ=ON -DFP4_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug \
    >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log" >&2; echo "run.sh: configure failed" >&2; exit 1; }
# shellcheck disable=SC2046
cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target $(for t in $TARGETS; do echo "fuzz_$t"; done) \
    >"$BUILD/build.log" 2>&1 || { cat "$BUILD/build.log" >&2; echo "run.sh: build failed" >&2; exit 1; }

mkdir -p "$BUILD/artifacts"
fail=0
for t in $TARGETS; do
    mkdir -p "$BUILD/corpus/$t"
    log="$BUILD/fuzz_$t.log"
    # rss_limit: the parsers bound their allocations, so 1 GiB is plenty;
    # ASan's leak check runs at exit and on every input (-detect_leaks=1).
    if "$BUILD/tests/fuzz_$t" -max_total_time="$SECS" -timeout=5 -rss_limit_mb=1024 -detect_leaks=1 \
        -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" \
        "$BUILD/corpus/$t" "$HERE/corpus/$t" >"$log" 2>&1; then
        echo "fuzz_$t: ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${SECS} s"
    else
        echo "fuzz_$t: FAILED (log: $log)"
        grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -10
        fail=1
    fi
done
exit $fail
