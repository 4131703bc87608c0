#!/usr/bin/env bash
# The program end to end: help, version, list, a run with JSON/CSV output,
# compare, and the default suite (the seed table, verified, in under 2 min).
source "$(dirname "$0")/lib_cli.sh"

expect 0 "usage: fp4bench" -- "$FP4" --help
for c in run list quantize gemm check compare; do
    expect 0 "usage: fp4bench $c" -- "$FP4" $c --help
done
expect 0 "fp4bench [0-9.]+ \(commit [0-9a-f]+" -- "$FP4" --version
expect 0 "cpu-ref +yes" -- "$FP4" list
expect 0 "sweep-m" -- "$FP4" list

expect 0 "cpu-ref" -- "$FP4" run --shape 16x256x64,3x200x48 --json "$TMP/r.json" --csv "$TMP/r.csv" --samples --quiet
grep -q "reference" "$TMP/out" || fail "table lacks the verified column: $(cat "$TMP/out")"
[ "$(wc -l <"$TMP/r.csv")" -eq 3 ] || fail "CSV should have a header and 2 rows: $(cat "$TMP/r.csv")"
grep -q '"schema_version"' "$TMP/r.json" || fail "JSON lacks schema_version"
grep -q '"samples_us"' "$TMP/r.json" || fail "JSON lacks samples with --samples"
checks=$((checks + 4))
expect 0 "" -- "$FP4" compare "$TMP/r.json" "$TMP/r.json"

# GPU backends on a machine without a GPU: unsupported rows, not a crash
if "$FP4" list | grep -q '^cuda-ref'; then
    expect 0 "unsupported" -- "$FP4" run --backend all --shape 16x64x64 --quiet
fi

# the default suite: 8 seed shapes, every row verified, under two minutes
start=$(date +%s)
expect 0 "moe-up" -- "$FP4" --quiet
elapsed=$(( $(date +%s) - start ))
rows=$(grep -cE "^(moe-up|attn-tp8) " "$TMP/out")
[ "$rows" -eq 8 ] || fail "default suite printed $rows rows, expected 8: $(cat "$TMP/out")"
ok=$(grep -E "^(moe-up|attn-tp8) " "$TMP/out" | grep -c "reference")
[ "$ok" -eq 8 ] || fail "only $ok of 8 rows verified"
[ "$elapsed" -lt 120 ] || fail "default suite took ${elapsed}s (limit 120 s)"
checks=$((checks + 3))

finish
