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

expect 0 "cpu-ref" -- "$FP4" run --backend cpu-ref --shape 16x256x64,3x200x48 --json "$TMP/r.json" --csv "$TMP/r.csv" --samples --quiet
grep -q "reference" "$TMP/out" || fail "table lacks the verified column: $(cat "$TMP/out")"
[ "$(wc -l <"$TMP/r.csv")" -eq 3 ] || fail "CSV should have a header and 2 rows: $(cat "$TMP/r.csv")"
grep -q '"schema_version"' "$TMP/r.json" || fail "JSON lacks schema_version"
grep -q '"samples_us"' "$TMP/r.json" || fail "JSON lacks samples with --samples"
checks=$((checks + 4))
expect 0 "" -- "$FP4" compare "$TMP/r.json" "$TMP/r.json"

# an external backend loaded as a plugin is verified and timed like the others
expect 0 "plugin-good" -- "$FP4" run --plugin "$TOOLS/libfp4_plugin_good.so" --backend cpu-ref --shape 4x24x32 --quiet --max-time 0.5
grep -E "^custom .*plugin-good .*ok" "$TMP/out" >/dev/null || fail "plugin row not verified: $(cat "$TMP/out")"
checks=$((checks + 1))
expect 3 "API version 0" -- "$FP4" run --plugin "$TOOLS/libfp4_plugin_oldabi.so" --shape 4x24x32
# without --backend a plugin joins the default backends instead of replacing them
if ! "$FP4" list | grep -qE "^(cuda-ref|fp4-sm90) +yes"; then
    expect 0 "plugin-good" -- "$FP4" run --plugin "$TOOLS/libfp4_plugin_good.so" --shape 4x24x32 --quiet --max-time 0.5
    grep -qE "^custom .*cpu-ref " "$TMP/out" || fail "--plugin dropped the default cpu-ref: $(cat "$TMP/out")"
    checks=$((checks + 1))
fi
expect 2 "--backend: unknown backend" -- "$FP4" run --backend cpu-ref,cpu-ref,nope --shape 4x24x32
expect 2 "--backend: ',' has an empty field" -- "$FP4" run --backend , --shape 4x24x32
expect 2 "--backend needs a value, not an empty one" -- "$FP4" run --backend "" --shape 4x24x32
expect 2 "--json needs a value, not an empty one" -- "$FP4" run --backend cpu-ref --shape 4x24x32 --json ""
expect 2 "--plugin needs a value, not an empty one" -- "$FP4" run --plugin "" --shape 4x24x32
expect 2 "--seed must be >= 0" -- "$FP4" run --backend cpu-ref --shape 4x24x32 --seed -1
expect 2 "--warmup-ms must be in 0..60000" -- "$FP4" run --backend cpu-ref --shape 4x24x32 --warmup-ms 1e12
# a case larger than the machine's memory is refused up front, with the numbers
expect 3 "100000x100000x100000 needs about [0-9.]+ GB of host memory" -- "$FP4" run --backend cpu-ref --shape 100000x100000x100000 --verify-only
# --backend names a plugin's backend once its --plugin is loaded (in any order)
expect 0 "plugin-good" -- "$FP4" run --backend plugin-good --plugin "$TOOLS/libfp4_plugin_good.so" --shape 4x24x32 --quiet --max-time 0.5
grep -E "^custom .*plugin-good .*ok" "$TMP/out" >/dev/null || fail "--backend plugin-good: $(cat "$TMP/out")"
expect 2 "needs its --plugin" -- "$FP4" run --backend plugin-good --shape 4x24x32

# Ctrl-C keeps the work: the rows measured so far, the JSON marked interrupted,
# exit 130 (the CPU reference on shapes slow enough to be caught mid-run)
"$FP4" run --backend cpu-ref --shape 16x256x64,512x512x512,512x512x1024,512x1024x1024 --max-time 3 \
    --min-samples 1000 --noise 0.0001 --json "$TMP/int.json" --quiet >"$TMP/int.out" 2>"$TMP/int.err" &
pid=$!
sleep 2
kill -INT $pid
wait $pid
rc=$?
checks=$((checks + 3))
[ $rc -eq 130 ] || fail "Ctrl-C: exit $rc, expected 130: $(cat "$TMP/int.err")"
grep -qE '"interrupted":[[:space:]]*true' "$TMP/int.json" || fail "Ctrl-C: JSON not marked interrupted"
grep -qE "^custom +16 +256 +64 +cpu-ref" "$TMP/int.out" || fail "Ctrl-C: the first row is not in the table: $(cat "$TMP/int.out")"
# a row stopped before it was measured is left out, not reported as a broken backend
grep -qE '"state":[[:space:]]*"FAILED"' "$TMP/int.json" && fail "Ctrl-C: a FAILED row in the JSON"
grep -q FAILED "$TMP/int.out" && fail "Ctrl-C: a FAILED row in the table: $(cat "$TMP/int.out")"
checks=$((checks + 2))

# GPU backends on a machine without a GPU: unsupported rows, not a crash
if "$FP4" list | grep -q '^cuda-ref'; then
    expect 0 "unsupported" -- "$FP4" run --backend all --shape 16x64x64 --quiet
fi

# the default suite: the 8 seed shapes, every row verified (or unsupported with
# a reason), in under two minutes (without a GPU: the CPU reference only)
start=$(date +%s)
expect 0 "moe-up" -- "$FP4" --quiet
elapsed=$(( $(date +%s) - start ))
shapes=$(grep -E "^(moe-up|attn-tp8) " "$TMP/out" | awk '{print $1, $2, $3, $4}' | sort -u | wc -l)
[ "$shapes" -eq 8 ] || fail "default suite printed $shapes shapes, expected 8: $(cat "$TMP/out")"
rows=$(grep -cE "^(moe-up|attn-tp8) " "$TMP/out")
good=$(grep -E "^(moe-up|attn-tp8) " "$TMP/out" | grep -cE "reference|ok [0-9]|unsupported:")
[ "$good" -eq "$rows" ] || fail "only $good of $rows rows verified or unsupported: $(cat "$TMP/out")"
if ! "$FP4" list | grep -qE "^(cuda-ref|fp4-sm90) +yes"; then
    [ "$elapsed" -lt 120 ] || fail "default suite took ${elapsed}s on the CPU (limit 120 s)"
fi
checks=$((checks + 3))

# output lost on a full stdout is a runtime error, not a success
if [ -w /dev/full ]; then
    checks=$((checks + 2))
    "$FP4" --help >/dev/full 2>"$TMP/full.err"
    [ $? -eq 3 ] && grep -q "cannot write to stdout" "$TMP/full.err" || fail "--help into a full stdout: $(cat "$TMP/full.err")"
    "$FP4" list >/dev/full 2>"$TMP/full.err"
    [ $? -eq 3 ] || fail "list into a full stdout did not exit 3: $(cat "$TMP/full.err")"
    # a CSV that cannot be written fails the run, whether its lines or its close fail
    checks=$((checks + 2))
    "$FP4" run --backend cpu-ref --shape 16x64x64 --max-time 0.05 --csv /dev/full >"$TMP/full.out" 2>"$TMP/full.err"
    [ $? -eq 3 ] && grep -q "cannot write the CSV" "$TMP/full.err" || fail "run --csv /dev/full: $(cat "$TMP/full.err")"
    "$FP4" run --backend cpu-ref --shape 16x64x64 --max-time 0.05 --csv - >/dev/full 2>"$TMP/full.err"
    [ $? -eq 3 ] || fail "run --csv - into a full stdout did not exit 3: $(cat "$TMP/full.err")"
fi

finish
