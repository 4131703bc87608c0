#!/usr/bin/env bash
# make install: the Makefile's target runs cmake --install with the PREFIX,
# and the installed program runs. Skipped (77) while CMakeLists.txt has no
# install() rule for fp4bench.
source "$(dirname "$0")/lib_cli.sh"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="$(cd "$(dirname "$FP4")" && pwd)"

# the target's commands (a dry run: nothing is built or installed here)
make -n -C "$SRC" install BUILD="$BUILD_DIR" PREFIX="$TMP/p" >"$TMP/make" 2>&1 ||
    fail "make -n install failed: $(cat "$TMP/make")"
grep -qF "cmake --install $BUILD_DIR --prefix $TMP/p" "$TMP/make" ||
    fail "make install does not run cmake --install with PREFIX: $(cat "$TMP/make")"
PREFIX= make -n -C "$SRC" install BUILD="$BUILD_DIR" >"$TMP/make" 2>&1
grep -qF -- "--prefix /usr/local" "$TMP/make" || fail "make install's default prefix is not /usr/local: $(cat "$TMP/make")"
checks=$((checks + 2))

if [ $failures -gt 0 ]; then finish; exit 1; fi
if ! grep -qE 'TYPE EXECUTABLE FILES "[^"]*/fp4bench"' "$BUILD_DIR/cmake_install.cmake" 2>/dev/null; then
    echo "CMakeLists.txt has no install() rule for fp4bench: skipped" >&2
    exit 77
fi
expect 0 "" -- cmake --install "$BUILD_DIR" --prefix "$TMP/prefix"
expect 0 "fp4bench [0-9.]+ \(commit" -- "$TMP/prefix/bin/fp4bench" --version
finish
