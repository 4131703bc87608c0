# Helpers for the CLI tests (sourced). $FP4 is the program, $TMP a scratch dir.
FP4=$1
TOOLS=${FP4_TOOLS:-$2}
MKFILE=$TOOLS/mkfile
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
checks=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect CODE PATTERN -- command...: exit status CODE, and (for errors) one
# line on stderr matching PATTERN (grep -E), never a crash (status >= 128).
expect() {
    local code=$1 pattern=$2
    shift 3
    checks=$((checks + 1))
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ $rc -ne "$code" ]; then
        fail "'$*' exited $rc, expected $code; stderr: $(head -c 400 "$TMP/err")"
        return
    fi
    if [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$TMP/err" "$TMP/out"; then
        fail "'$*': output does not match '$pattern': $(head -c 400 "$TMP/err")"
        return
    fi
    if [ "$code" -ge 2 ] && [ "$(wc -l <"$TMP/err")" -ne 1 ]; then
        fail "'$*': error is not one line: $(cat "$TMP/err")"
    fi
}

finish() {
    if [ $checks -eq 0 ]; then echo "no checks ran" >&2; exit 1; fi
    echo "$checks checks, $failures failed"
    [ $failures -eq 0 ]
}
