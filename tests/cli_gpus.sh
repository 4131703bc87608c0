#!/usr/bin/env bash
# fp4bench run --gpus from the command line: the help, bad lists as one line
# with exit 2 (before any GPU is looked at, or against the GPUs there are),
# and on a machine without a CUDA device one line "unsupported (no CUDA
# device ...)" with exit 3, while a run without --gpus is unchanged.
source "$(dirname "$0")/lib_cli.sh"

quick=(--shape 4x24x32 --backend cpu-ref --max-time 0.2 --min-samples 3 --quiet)

expect 0 "--gpus all\|0,1,..." -- "$FP4" run --help
expect 0 "node" -- "$FP4" run --help

# the list itself: usage errors wherever it runs
expect 2 "--gpus: 'x' is not a GPU number" -- "$FP4" run --gpus 0,x "${quick[@]}"
expect 2 "--gpus: '-1' is not a GPU number" -- "$FP4" run --gpus=-1 "${quick[@]}"
expect 2 "--gpus: '1e3' is not a GPU number" -- "$FP4" run --gpus 1e3 "${quick[@]}"
expect 2 "--gpus: '99999' is not a GPU number" -- "$FP4" run --gpus 99999 "${quick[@]}"
expect 2 "--gpus: GPU 1 listed twice" -- "$FP4" run --gpus 1,0,1 "${quick[@]}"
expect 2 "--gpus: '0,,1': want 'all'" -- "$FP4" run --gpus 0,,1 "${quick[@]}"
expect 2 "--gpus needs a value, not an empty one" -- "$FP4" run --gpus "" "${quick[@]}"
expect 2 "--gpus: at most 16 GPUs" -- "$FP4" run --gpus 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 "${quick[@]}"
expect 2 "--gpus given twice" -- "$FP4" run --gpus 0 --gpus 1 "${quick[@]}"
expect 2 "--gpus needs a value" -- "$FP4" run --gpus
# a bad name is a usage error with or without a GPU to run on
expect 2 "--backend: unknown backend 'nope'" -- "$FP4" run --gpus 0 --backend nope --shape 16x16x16
expect 2 "--baseline 'nope' is not among the measured backends" -- "$FP4" run --gpus 0 --baseline nope --shape 16x16x16

"$FP4" run --gpus 0 "${quick[@]}" >"$TMP/probe.out" 2>"$TMP/probe.err"
probe_rc=$?
if [ $probe_rc -eq 3 ] && grep -q "unsupported" "$TMP/probe.err"; then
    # no CUDA device: one line, exit 3, for any valid list
    expect 3 "^fp4bench run: unsupported \(no CUDA device" -- "$FP4" run --gpus all "${quick[@]}"
    expect 3 "^fp4bench run: unsupported \(no CUDA device" -- "$FP4" run --gpus 0,1 "${quick[@]}"
    expect 3 "^fp4bench run: unsupported \(no CUDA device" -- "$FP4" run --gpus 7 --json "$TMP/u.json" "${quick[@]}"
    checks=$((checks + 1))
    [ -e "$TMP/u.json" ] && fail "an unsupported --gpus run wrote a JSON file"
    # and the run without --gpus is what it was: the CPU reference, the CSV's
    # columns unchanged, gpu 0 in the JSON
    expect 0 "" -- "$FP4" run "${quick[@]}" --csv "$TMP/r.csv" --json "$TMP/r.json"
    checks=$((checks + 2))
    grep -q " gpu " "$TMP/out" && fail "a run without --gpus shows a gpu column: $(cat "$TMP/out")"
    head -1 "$TMP/r.csv" | grep -q ",prepare_ms$" || fail "the CSV header changed: $(head -1 "$TMP/r.csv")"
    checks=$((checks + 2))
    grep -Eq '"gpu":[[:space:]]*0' "$TMP/r.json" || fail "the JSON row has no gpu 0"
    grep -q '"gpus"' "$TMP/r.json" && fail "a run without --gpus writes a gpus array"
    # compare reads it (keyed by GPU too)
    expect 0 "same" -- "$FP4" compare "$TMP/r.json" "$TMP/r.json"
    finish
    exit $?
fi

# GPUs here: lists beyond them are usage errors, before anything runs
checks=$((checks + 1))
[ $probe_rc -eq 0 ] || fail "--gpus 0 on a GPU machine exited $probe_rc: $(head -c 400 "$TMP/probe.err")"
expect 2 "--gpus: GPU 15 does not exist|--gpus: 16 GPUs listed" -- "$FP4" run --gpus 15 "${quick[@]}"
expect 2 "GPUs listed, [0-9]+ CUDA device" -- "$FP4" run --gpus 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 "${quick[@]}"
finish
