#!/usr/bin/env bash
# compare and report refuse a report that fp4bench could not have written:
# each file below is a real `run --json` output with one field changed, and
# both commands must exit 3 with one line naming the file and the field.
source "$(dirname "$0")/lib_cli.sh"

expect 0 "" -- "$FP4" run --backend cpu-ref --shape 16x64x64 --json "$TMP/real.json" --max-time 0.2 \
    --warmup-ms 0 --quiet
expect 0 "1 matched" -- "$FP4" compare "$TMP/real.json" "$TMP/real.json"
expect 0 "wrote" -- "$FP4" report "$TMP/real.json" --html "$TMP/r.html"

# edit NAME SED_SCRIPT: real.json changed by the script, as NAME.json
edit() {
    sed -E "$2" "$TMP/real.json" >"$TMP/$1.json"
    checks=$((checks + 1))
    cmp -s "$TMP/real.json" "$TMP/$1.json" && fail "edit $1: the script changed nothing"
}
# refused NAME PATTERN: compare and report exit 3 with "NAME.json: PATTERN"
refused() {
    expect 3 "$1\.json: $2" -- "$FP4" compare "$TMP/real.json" "$TMP/$1.json"
    expect 3 "$1\.json: $2" -- "$FP4" report "$TMP/$1.json" --html "$TMP/bad.html"
    checks=$((checks + 1))
    [ -e "$TMP/bad.html" ] && fail "report of $1.json wrote a page"
}
# accepted NAME: compare and report take it
accepted() {
    expect 0 "1 matched" -- "$FP4" compare "$TMP/real.json" "$TMP/$1.json"
    expect 0 "wrote" -- "$FP4" report "$TMP/$1.json" --html "$TMP/r.html"
}

# shapes: M, N, K >= 1 and K a multiple of 16, as for every case a run takes
edit mneg 's/^(\t+"m":\t)16,/\1-16,/'
refused mneg 'rows\[0\]\.m: expected a positive integer'
edit mzero 's/^(\t+"m":\t)16,/\10,/'
refused mzero 'rows\[0\]\.m: expected a positive integer'
edit nzero 's/^(\t+"n":\t)64,/\10,/'
refused nzero 'rows\[0\]\.n: expected a positive integer'
edit k60 's/^(\t+"k":\t)64,/\160,/'
refused k60 'rows\[0\]\.k: not a multiple of 16'

# times: a row with samples has a positive median; noise is a width, >= 0
edit median0 's/^(\t+"median":\t)[^,]+,/\10,/'
refused median0 'rows\[0\]\.time_us\.median: expected a positive time'
edit medianneg 's/^(\t+"median":\t)[^,]+,/\1-3.5,/'
refused medianneg 'rows\[0\]\.time_us\.median: expected a positive time'
edit noiseneg 's/^(\t+"noise":\t).*$/\1-0.01/'
refused noiseneg 'rows\[0\]\.time_us\.noise: negative'
# a noise above 100% is possible (one far outlier among few samples): kept
edit noisebig 's/^(\t+"noise":\t).*$/\12.5/'
accepted noisebig
# an untimed row (count 0) has median 0, as the writer puts it
edit untimed 's/^(\t+"count":\t)[0-9]+,/\10,/; s/^(\t+"median":\t)[^,]+,/\10,/'
accepted untimed

# not an fp4bench report
edit other 's/^(\t"schema":\t)"fp4bench\/1"/\1"other\/1"/'
refused other 'schema: "other/1", expected "fp4bench/1": not an fp4bench report'
edit noschema '/^\t"schema":/d'
refused noschema 'schema: missing: not an fp4bench report'
edit nodevice '/^\t"device":\t\{/,/^\t\},$/d'
refused nodevice 'device: missing: not an fp4bench report'
edit nosettings '/^\t"settings":\t\{/,/^\t\},$/d'
refused nosettings 'settings: missing: not an fp4bench report'

# the modes are names the writer uses
edit l2 's/^(\t+"l2":\t)"[^"]*"/\1"banana"/'
refused l2 'rows\[0\]\.l2: expected "cold", "hot", "warm" or "n/a"'
edit timing 's/^(\t+"timing":\t)"[^"]*"/\1"banana"/'
refused timing 'rows\[0\]\.timing: expected "graph", "graph-nogate", "launch" or "host"'

# a NUL in a string would cut it short without a word
edit nul 's/^(\t+"label":\t)"custom"/\1"cus\\u0000tom"/'
refused nul 'a string holds .u0000 \(a NUL character\)'
finish
