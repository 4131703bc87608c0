#!/usr/bin/env bash
# fp4bench nccl from the command line. Everywhere: the help, and bad arguments
# as one line with exit 2 (before anything looks for a GPU). Where nothing can
# run (built without NCCL, no GPU): one line "unsupported (why)", exit 3, and
# a --json file that says why. With NCCL and a GPU: a small run of both
# collectives on every GPU, its JSON and CSV, and a GPU that is not there.
source "$(dirname "$0")/lib_cli.sh"

expect 0 "usage: fp4bench nccl" -- "$FP4" nccl --help
expect 0 "--launcher threads\|mpi" -- "$FP4" nccl --help
expect 0 "nccl +NCCL all-reduce and all-to-all" -- "$FP4" --help

# usage errors: one line, exit 2
expect 2 "--op: unknown op 'all_gather'" -- "$FP4" nccl --op all_gather
expect 2 "--op: unknown op 'allreduce'" -- "$FP4" nccl --op all_to_all,allreduce
expect 2 "--op: 'all_reduce' listed twice" -- "$FP4" nccl --op all_reduce,all_reduce
expect 2 "--op: ',' has an empty field" -- "$FP4" nccl --op ,
expect 2 "--sizes: '1X' is not a size" -- "$FP4" nccl --sizes 1M,1X
expect 2 "--sizes: '0' is not a size" -- "$FP4" nccl --sizes 0
expect 2 "--sizes: '-1M' is not a size" -- "$FP4" nccl --sizes=-1M
expect 2 "--sizes: '65G' is not a size" -- "$FP4" nccl --sizes 65G
expect 2 "--sizes: '1.5M' is not a size" -- "$FP4" nccl --sizes 1.5M
expect 2 "--sizes: '99999999999999999999999' is not a size" -- "$FP4" nccl --sizes 99999999999999999999999
expect 2 "--gpus: 'x' is not a GPU number" -- "$FP4" nccl --gpus 0,x
expect 2 "--gpus: '-1' is not a GPU number" -- "$FP4" nccl --gpus=-1
expect 2 "--gpus: '1e3' is not a GPU number" -- "$FP4" nccl --gpus 1e3
expect 2 "--gpus: GPU 1 listed twice" -- "$FP4" nccl --gpus 1,0,1
expect 2 "--gpus: '0,,1': want 'all'" -- "$FP4" nccl --gpus 0,,1
expect 2 "--gpus needs a value, not an empty one" -- "$FP4" nccl --gpus ""
expect 2 "--launcher: 'threads' or 'mpi', not 'ssh'" -- "$FP4" nccl --launcher ssh
expect 2 "--gpus goes with --launcher threads" -- "$FP4" nccl --launcher mpi --gpus 0,1
expect 2 "--iters must be in 1..100000" -- "$FP4" nccl --iters 0
expect 2 "--iters: 'many' is not an integer" -- "$FP4" nccl --iters many
expect 2 "--reps must be in 1..1000" -- "$FP4" nccl --reps 1001
expect 2 "--warmup must be in 0..100000" -- "$FP4" nccl --warmup -1
expect 2 "would both write to stdout" -- "$FP4" nccl --json - --csv -
expect 2 "--json needs a value" -- "$FP4" nccl --json
expect 2 "unknown option '--frob'" -- "$FP4" nccl --frob

# Can a collective run here? One tiny all-reduce on GPU 0 says.
Q="--iters 2 --reps 3 --warmup 1"
"$FP4" nccl --gpus 0 --op all_reduce --sizes 4K $Q >"$TMP/probe.out" 2>"$TMP/probe.err"
probe_rc=$?
if [ $probe_rc -eq 3 ] && grep -q "unsupported" "$TMP/probe.err"; then
    # nothing runs: the reason in one line, exit 3, whatever is asked
    expect 3 "^fp4bench nccl: unsupported \((built without|no NVIDIA GPU)" -- "$FP4" nccl --json "$TMP/u.json"
    checks=$((checks + 3))
    grep -Eq '"unsupported":[[:space:]]*"(built without|no NVIDIA GPU)' "$TMP/u.json" ||
        fail "the JSON does not say why: $(head -c 400 "$TMP/u.json")"
    grep -Eq '"rows":[[:space:]]*\[\]' "$TMP/u.json" || fail "the JSON of an unsupported run has rows"
    grep -q '"schema":[[:space:]]*"fp4bench-nccl/1"' "$TMP/u.json" || fail "the JSON lacks its schema"
    expect 3 "^fp4bench nccl: unsupported \(" -- "$FP4" nccl --gpus 5 --op all_to_all --sizes 1M
    expect 3 "^fp4bench nccl: unsupported \(" -- "$FP4" nccl --launcher mpi
    expect 3 "^fp4bench nccl: unsupported \(" -- "$FP4" nccl --json - --sizes 1K
    checks=$((checks + 1))
    grep -q '"unsupported"' "$TMP/out" || fail "--json -: stdout does not hold the JSON"
    finish
    exit $?
fi
checks=$((checks + 1))
[ $probe_rc -eq 0 ] || fail "a 4 KiB all_reduce on GPU 0 exited $probe_rc: $(head -c 400 "$TMP/probe.err")"

# a GPU that is not there: unsupported, not a crash
expect 3 "^fp4bench nccl: unsupported \(GPU 4000 is not here" -- "$FP4" nccl --gpus 4000

# both collectives on every GPU, two sizes each (one that all_to_all rounds)
expect 0 "all_to_all +.* ok " -- "$FP4" nccl --sizes 64K,1000001 $Q --json "$TMP/r.json" --csv "$TMP/r.csv"
checks=$((checks + 5))
[ "$(grep -c '"op":' "$TMP/r.json")" -eq 4 ] || fail "want 4 rows in the JSON"
[ "$(grep -c '"state":[[:space:]]*"ok"' "$TMP/r.json")" -eq 4 ] || fail "want 4 verified rows"
[ "$(wc -l <"$TMP/r.csv")" -eq 5 ] || fail "want a header and 4 CSV rows"
head -1 "$TMP/r.csv" | grep -q '^op,dtype,bytes,count,ranks,state,why,iters,reps,time_us,' ||
    fail "CSV header: $(head -1 "$TMP/r.csv")"
grep -q '"nvls":[[:space:]]*false' "$TMP/r.json" || fail "the JSON does not say NVLS is off"
grep -q "NVLS off" "$TMP/out" || fail "the header does not say NVLS is off"

# one GPU: busbw is 0 by the formula, and the output says why
expect 0 "one rank: all_reduce is a copy" -- "$FP4" nccl --gpus 0 --sizes 1M $Q --json - 
checks=$((checks + 1))
grep -Eq '"busbw_gbps":[[:space:]]*0,' "$TMP/out" || fail "one rank: busbw should be 0"
finish
