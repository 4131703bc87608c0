#!/usr/bin/env bash
# Output of run and list: --csv - / --json - on stdout (the table on stderr),
# list --preset, the exit status of a bad --shape in every help text and the
# README, --verbose, the quantizer's missing ratio, and one line (not one per
# backend) saying there is no GPU.
source "$(dirname "$0")/lib_cli.sh"
README="$(dirname "$0")/../README.md"
quick=(--quiet --max-time 0.2 --warmup-ms 0)

# --csv -: the CSV alone on stdout, header and table on stderr
expect 0 "" -- "$FP4" run --backend cpu-ref --shape 4x24x32,3x200x48 --csv - "${quick[@]}"
[ "$(wc -l <"$TMP/out")" -eq 3 ] || fail "--csv - stdout is not header + 2 rows: $(cat "$TMP/out")"
head -1 "$TMP/out" | grep -q "^label,m,n,k,backend," || fail "--csv - lacks the CSV header: $(head -1 "$TMP/out")"
grep -qE "^custom +4 +24 +32 +cpu-ref" "$TMP/err" || fail "--csv -: the table is not on stderr: $(cat "$TMP/err")"
grep -q "^settings:" "$TMP/out" && fail "--csv -: header lines on stdout"
checks=$((checks + 4))

# --json -: one JSON document on stdout that compare reads back
expect 0 "" -- "$FP4" run --backend cpu-ref --shape 4x24x32 --json - "${quick[@]}"
cp "$TMP/out" "$TMP/stdout.json"
grep -q '"schema_version"' "$TMP/stdout.json" || fail "--json - wrote no JSON: $(head -c 300 "$TMP/stdout.json")"
grep -qE "^custom .*cpu-ref" "$TMP/err" || fail "--json -: the table is not on stderr"
checks=$((checks + 2))
expect 0 "1 matched" -- "$FP4" compare "$TMP/stdout.json" "$TMP/stdout.json"
expect 2 "both write to stdout" -- "$FP4" run --shape 4x24x32 --json - --csv -
expect 0 "'-': to stdout" -- "$FP4" run --help

# list --preset NAME: "M N K label" lines, usable as a --spec file
expect 0 "" -- "$FP4" list --preset odd
[ "$(head -1 "$TMP/out")" = "1 8 16 odd" ] || fail "list --preset odd starts with '$(head -1 "$TMP/out")'"
[ "$(grep -cE '^[0-9]+ [0-9]+ [0-9]+ odd$' "$TMP/out")" -eq "$(wc -l <"$TMP/out")" ] ||
    fail "list --preset odd: not all lines are 'M N K label': $(cat "$TMP/out")"
[ "$(wc -l <"$TMP/out")" -eq 6 ] || fail "list --preset odd: $(wc -l <"$TMP/out") shapes, want 6"
checks=$((checks + 3))
cp "$TMP/out" "$TMP/odd.spec"
expect 0 "" -- "$FP4" run --backend cpu-ref --spec "$TMP/odd.spec" --verify-only --quiet
[ "$(grep -cE '^odd .*cpu-ref' "$TMP/out")" -eq 6 ] || fail "the listed preset does not run as a spec: $(cat "$TMP/out")"
checks=$((checks + 1))
expect 0 "^16 2048 6144 moe-up$" -- "$FP4" list --preset seed
expect 2 "unknown preset 'nope' \(known: seed, sweep-m, targets, models, odd\)" -- "$FP4" list --preset nope
expect 2 "--preset needs a value" -- "$FP4" list --preset
expect 0 "--preset NAME" -- "$FP4" list --help

# a bad --shape is a usage error (2), and every help text and the README say so
expect 2 "--shape: .*not a multiple of 16" -- "$FP4" run --shape 16x2048x6100
expect 2 "--shape" -- "$FP4" --shape 16x2048x6100
for c in "" run list quantize gemm check compare; do
    "$FP4" $c --help >"$TMP/help" 2>&1
    # the exit-status paragraph: from "exit status" to the end
    sed -n '/exit status/,$p' "$TMP/help" | tr '\n' ' ' >"$TMP/exit"
    if grep -qiE "3 runtime error \([^)]*shape" "$TMP/exit"; then
        fail "fp4bench $c --help: a bad shape under exit status 3: $(cat "$TMP/exit")"
    fi
    checks=$((checks + 1))
done
grep -qE "2 usage error \([^)]*--shape" <("$FP4" --help | tr '\n' ' ') || fail "--help: exit 2 does not name --shape"
grep -qE "2 usage error \([^)]*--shape" <("$FP4" run --help | tr '\n' ' ') || fail "run --help: exit 2 does not name --shape"
grep -A1 "Exit status" "$README" | tr '\n' ' ' | grep -qE "2 usage error \([^)]*--shape" ||
    fail "README: the exit-status line does not put a bad --shape under 2"
grep -A1 "Exit status" "$README" | tr '\n' ' ' | grep -qiE "3 runtime error \([^)]*shape" &&
    fail "README: the exit-status line puts a shape under 3"
checks=$((checks + 4))

# --verbose is a run flag (the table's full reasons: tests/test_compare.c)
expect 0 "reasons in full" -- "$FP4" run --help
expect 0 "cpu-ref" -- "$FP4" run --backend cpu-ref --shape 4x24x32 --verbose "${quick[@]}"

# one line about the missing GPU, whatever the backends: the reason appears
# once, and the GPU backends' rows say only "no NVIDIA GPU"
"$FP4" list >"$TMP/list" 2>&1
if grep -q "^GPU: none (" "$TMP/list"; then
    why=$(sed -n 's/^GPU: none (\(.*\))$/\1/p' "$TMP/list")
    [ -n "$why" ] || fail "list: no reason on the GPU line: $(head -1 "$TMP/list")"
    [ "$(grep -cF -- "$why" "$TMP/list")" -eq 1 ] || fail "list repeats '$why': $(cat "$TMP/list")"
    expect 0 "" -- "$FP4" run --backend all --shape 16x64x64 "${quick[@]}"
    [ "$(cat "$TMP/out" "$TMP/err" | grep -cF -- "$why")" -eq 1 ] ||
        fail "run --backend all repeats '$why': $(cat "$TMP/out" "$TMP/err")"
    checks=$((checks + 3))
    if grep -q '^cuda-ref' "$TMP/list"; then # a CUDA build: GPU backends compiled in
        grep -q "no NVIDIA GPU/driver found" <<<"$why" || fail "the GPU line does not say 'no NVIDIA GPU/driver found': $why"
        n_gpu=$(grep -cE "^custom .*(cuda-ref|cublas|fp4-sm90|quantize|w4a4)" "$TMP/out")
        n_short=$(grep -cE "^custom .* unsupported: no NVIDIA GPU$" "$TMP/out")
        [ "$n_gpu" -ge 1 ] && [ "$n_gpu" -eq "$n_short" ] ||
            fail "GPU rows without a GPU: $n_short of $n_gpu say 'unsupported: no NVIDIA GPU': $(cat "$TMP/out")"
        [ "$(grep -c "unsupported: no NVIDIA GPU$" "$TMP/list")" -ge 1 ] || fail "list: GPU backends lack the short reason"
        checks=$((checks + 3))
        # no baseline that is not a GEMM
        expect 2 "--baseline 'quantize' is not a GEMM" -- "$FP4" run --backend cpu-ref,quantize --baseline quantize --shape 16x64x64
    fi
fi

# the quantizer's row (on a GPU): no ratio in the table, CSV or JSON
if grep -qE "^quantize +yes" "$TMP/list" && grep -qE "^cublas-bf16 +yes" "$TMP/list"; then
    expect 0 "" -- "$FP4" run --backend cublas-bf16,quantize --shape 64x768x6144 --csv "$TMP/q.csv" --json "$TMP/q.json" "${quick[@]}"
    grep -E "^custom .* quantize " "$TMP/out" | grep -qE "[0-9]x \[" && fail "quantize row has a ratio in the table"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "ratio") c = i } $5 == "quantize" && $c != "" { bad = 1 } END { exit bad }' "$TMP/q.csv" ||
        fail "quantize row has a ratio in the CSV"
    grep -A40 '"backend": *"quantize"' "$TMP/q.json" | grep -qE '"ratio": *\{' && fail "quantize row has a ratio in the JSON"
    checks=$((checks + 3))
fi

finish
