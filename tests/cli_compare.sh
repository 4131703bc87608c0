#!/usr/bin/env bash
# compare end to end: two identical CPU runs of --preset odd are not a
# regression; each differing setting is one warning line on stderr (none
# when the settings agree); 200k rows a side are matched in linear time.
source "$(dirname "$0")/lib_cli.sh"

# the same run twice on the CPU: no "slower" and exit 0, whatever the drift
# of the machine between them (CPU rows are never regressions)
expect 0 "" -- "$FP4" run --backend cpu-ref --preset odd --json "$TMP/a.json" --quiet
expect 0 "" -- "$FP4" run --backend cpu-ref --preset odd --json "$TMP/b.json" --quiet
expect 0 "6 matched" -- "$FP4" compare "$TMP/a.json" "$TMP/b.json"
grep -qE " slower$" "$TMP/out" && fail "identical CPU runs: a row is 'slower': $(cat "$TMP/out")"
[ -s "$TMP/err" ] && fail "identical settings gave warnings: $(cat "$TMP/err")"
grep -q "0 regressions" "$TMP/out" || fail "identical CPU runs: $(tail -1 "$TMP/out")"
checks=$((checks + 3))

# a row of OLD that NEW lacks is a regression unless --allow-gone; files with
# no row in common are no comparison (exit 3)
echo "1 8 16 odd" >"$TMP/sub.spec"
expect 0 "" -- "$FP4" run --backend cpu-ref --spec "$TMP/sub.spec" --quiet --json "$TMP/sub.json"
expect 1 "" -- "$FP4" compare "$TMP/a.json" "$TMP/sub.json"
grep -qE " gone$" "$TMP/out" || fail "rows missing from NEW are not 'gone': $(cat "$TMP/out")"
expect 0 "" -- "$FP4" compare "$TMP/a.json" "$TMP/sub.json" --allow-gone
expect 0 "" -- "$FP4" run --backend cpu-ref --shape 8x32x48 --quiet --json "$TMP/other.json"
expect 3 "not runs of the same cases" -- "$FP4" compare "$TMP/sub.json" "$TMP/other.json"
# a run stopped before its first row must not pass a CI gate
printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {}, "rows": []}\n' >"$TMP/empty.json"
expect 3 "NEW has no rows: nothing to compare" -- "$FP4" compare "$TMP/a.json" "$TMP/empty.json" --allow-gone
expect 3 "OLD has no rows: nothing to compare" -- "$FP4" compare "$TMP/empty.json" "$TMP/a.json"
expect 3 "NEW has no rows" -- "$FP4" compare "$TMP/empty.json" "$TMP/empty.json"
# settings a report does not give are unknown, not a difference; the page leaves them out
printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {"present": true, "name": "X"}, "settings": {}, "rows": [{"label": "a", "m": 1, "n": 16, "k": 16, "backend": "b", "state": "ok", "l2": "cold", "time_us": {"count": 0}}]}\n' >"$TMP/bare.json"
expect 0 "1 untimed" -- "$FP4" compare "$TMP/bare.json" "$TMP/bare.json"
[ -s "$TMP/err" ] && fail "settings missing from both reports gave warnings: $(cat "$TMP/err")"
expect 0 "" -- "$FP4" report "$TMP/bare.json" --html "$TMP/bare.html"
grep -qw nan "$TMP/bare.html" && fail "the page shows nan for settings the report does not give"
checks=$((checks + 2))
checks=$((checks + 1))

# settings that differ: one warning line each, on stderr, the table on stdout
quick=(--backend cpu-ref --shape 4x24x32 --quiet --warmup-ms 0)
expect 0 "" -- "$FP4" run "${quick[@]}" --max-time 0.2 --json "$TMP/s1.json"
expect 0 "" -- "$FP4" run "${quick[@]}" --max-time 0.3 --data codes --noise 0.01 --json "$TMP/s2.json"
"$FP4" compare "$TMP/s1.json" "$TMP/s2.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] || fail "compare of differing settings exited $rc: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" -eq 3 ] || fail "want 3 warning lines (data, noise target, max time): $(cat "$TMP/err")"
[ "$(grep -c "^fp4bench compare: warning: " "$TMP/err")" -eq 3 ] || fail "warnings lack their prefix: $(cat "$TMP/err")"
grep -q "different data (old: gaussian, new: codes)" "$TMP/err" || fail "no data warning: $(cat "$TMP/err")"
grep -q "different noise targets (old: 0.5%, new: 1%)" "$TMP/err" || fail "no noise warning: $(cat "$TMP/err")"
grep -q "different max times (old: 0.2 s, new: 0.3 s)" "$TMP/err" || fail "no max-time warning: $(cat "$TMP/err")"
grep -q "warning" "$TMP/out" && fail "warnings on stdout: $(cat "$TMP/out")"
checks=$((checks + 8))

# 200k rows each side, NEW in the reverse order of OLD, one of them 50%
# slower on the GPU: matched by a hash, so the time grows with the rows, not
# with their square (a scan per row took about a minute at 200k). Judged by
# the growth from 50k to 200k rows (16x for a quadratic match; about 8x here,
# 4x for the match itself plus the memory of 2.5 KB rows), which depends little
# on how fast or how loaded the machine is, and by a bound far under the
# minute a quadratic match takes.
gen() { # gen FILE ORDER(fwd|rev) ROWS
    awk -v order="$2" -v n="$3" 'BEGIN {
        printf "{\"schema\": \"fp4bench/1\", \"schema_version\": 1, \"device\": {\"present\": true, \"name\": \"NVIDIA H200\"},\n\"settings\": {}, \"rows\": [\n"
        for (j = 0; j < n; j++) {
            i = order == "rev" ? n - 1 - j : j
            t = (order == "rev" && i == 4242) ? 150 : 100
            printf "%s{\"label\": \"L%d\", \"m\": %d, \"n\": 2048, \"k\": 6144, \"backend\": \"%s\", \"state\": \"ok\", \"l2\": \"cold\", \"timing\": \"graph\", \"time_us\": {\"count\": 50, \"median\": %d, \"p10\": %d, \"p90\": %d, \"noise\": 0.001}}\n",
                j ? "," : "", i % 1000, 1 + int(i / 1000), i % 2 ? "fp4-sm90" : "cublas-bf16", t, t - 1, t + 1
        }
        printf "]}\n"
    }' >"$1"
}
gen "$TMP/small-old.json" fwd 50000
gen "$TMP/small-new.json" rev 50000
start=$(date +%s%N)
expect 1 "" -- "$FP4" compare "$TMP/small-old.json" "$TMP/small-new.json"
ms_small=$(( ($(date +%s%N) - start) / 1000000 ))
rm -f "$TMP/small-old.json" "$TMP/small-new.json"
gen "$TMP/big-old.json" fwd 200000
gen "$TMP/big-new.json" rev 200000
start=$(date +%s%N)
expect 1 "" -- "$FP4" compare "$TMP/big-old.json" "$TMP/big-new.json"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
grep -q "200000 matched: 0 faster, 1 slower, 199999 same" "$TMP/out" || fail "200k compare: $(tail -1 "$TMP/out")"
grep -qE "^cublas-bf16 +L242 +5x2048x6144 .* slower$" "$TMP/out" || fail "200k compare: the slower row is not L242 5x2048x6144"
[ "$ms" -lt $(( 12 * ms_small + 1000 )) ] ||
    fail "200k rows took ${ms} ms, 50k ${ms_small} ms: growing like a quadratic match (reading the JSON included)"
[ "$ms" -lt 30000 ] || fail "200k rows took ${ms} ms (limit 30 s)"
echo "50k rows compared in ${ms_small} ms, 200k in ${ms} ms"
checks=$((checks + 4))

finish
