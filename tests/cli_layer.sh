#!/usr/bin/env bash
# fp4bench layer from the command line. Everywhere: the help, and bad
# arguments as one line with exit 2 (before anything looks for a GPU). Where
# nothing can run (built without NCCL, no GPU): every row "unsupported
# (why)", one line "unsupported (why)" on stderr, exit 3, and a --json file
# that says why. With NCCL and Hopper GPUs: a small TP, EP and attention run
# on one GPU, their JSON, and a degree larger than the GPUs present.
source "$(dirname "$0")/lib_cli.sh"

expect 0 "usage: fp4bench layer" -- "$FP4" layer --help
expect 0 "--attention" -- "$FP4" layer --help
expect 0 "layer +an MoE" -- "$FP4" --help

D="--dims 512,256,8,2"
# usage errors: one line, exit 2
expect 2 "give the layer" -- "$FP4" layer --tp 1
expect 2 "give exactly one of --tp LIST and --ep LIST" -- "$FP4" layer $D
expect 2 "give exactly one of --tp LIST and --ep LIST" -- "$FP4" layer $D --tp 1 --ep 1
expect 2 "give the layer" -- "$FP4" layer --model glm5 $D --tp 1
expect 2 "--model: " -- "$FP4" layer --model nosuchmodel --tp 1
expect 2 "--dims: want H,I,E,K" -- "$FP4" layer --dims 512,256 --tp 1
expect 2 "--dims: " -- "$FP4" layer --dims 500,256,8,2 --tp 1
expect 2 "--tp: 0 is not in 1..128" -- "$FP4" layer $D --tp 0
expect 2 "--tp: 2 listed twice" -- "$FP4" layer $D --tp 2,2
expect 2 "--ep: '1,,2' has an empty field" -- "$FP4" layer $D --ep 1,,2
expect 2 "--tokens: 0 is not in" -- "$FP4" layer $D --tp 1 --tokens 0
expect 2 "--tokens: 'x' is not an integer|--tokens: .*x" -- "$FP4" layer $D --tp 1 --tokens x
expect 2 "--mode: 'w4a4' or 'w4a16', not 'fp8'" -- "$FP4" layer $D --tp 1 --mode fp8
expect 2 "--routing: 'balanced', 'random' or 'skewed', not 'trace'" -- "$FP4" layer $D --tp 1 --routing trace
expect 2 "--attention is tensor parallel" -- "$FP4" layer --attention --ep 2
expect 2 "--attention needs --tp" -- "$FP4" layer --attention
expect 2 "--attention takes --attn-dims" -- "$FP4" layer --attention $D --tp 1
expect 2 "--attn-dims: want H,QH,KVH,D" -- "$FP4" layer --attention --attn-dims 1024,16 --tp 1
expect 2 "--attn-dims goes with --attention" -- "$FP4" layer $D --tp 1 --attn-dims 1024,16,8,64
expect 2 "--attn-dims: H = 1000 is not a multiple of 16" -- "$FP4" layer --attention --attn-dims 1000,16,8,64 --tp 1
expect 2 "--attn-dims: 16 query heads do not group evenly over 3 kv heads" -- "$FP4" layer --attention --attn-dims 1024,16,3,64 --tp 1
expect 2 "--reps must be in 1..1000" -- "$FP4" layer $D --tp 1 --reps 0
expect 2 "--gpus: 3 listed twice" -- "$FP4" layer $D --tp 1 --gpus 3,3
expect 2 "unknown option '--frob'" -- "$FP4" layer $D --tp 1 --frob

# a degree the layer cannot be split over says so, GPU or not (the sharding
# rules come before any GPU is looked for)
expect 3 "I = 2048 over tp = 3 gives 682 and a remainder" -- "$FP4" layer --model glm5 --tp 3 --tokens 4

Q="--iters 2 --reps 3 --warmup 1"
# Can a layer run here? One tiny TP layer on one GPU says.
"$FP4" layer $D --tp 1 --tokens 4 $Q --gpus 0 >"$TMP/probe.out" 2>"$TMP/probe.err"
probe_rc=$?
if [ $probe_rc -eq 3 ] && grep -q "^fp4bench layer: unsupported" "$TMP/probe.err"; then
    # nothing runs: every row says why, one line on stderr, exit 3
    expect 3 "^fp4bench layer: unsupported \(" -- "$FP4" layer $D --tp 1,8 --tokens 4,16 --json "$TMP/u.json"
    checks=$((checks + 4))
    [ "$(grep -c ' unsupported (' "$TMP/out")" -eq 4 ] || fail "want 4 unsupported rows: $(cat "$TMP/out")"
    grep -q '"schema":[[:space:]]*"fp4bench-layer/1"' "$TMP/u.json" || fail "the JSON lacks its schema"
    grep -Eq '"unsupported":[[:space:]]*"[^"]' "$TMP/u.json" || fail "the JSON does not say why"
    [ "$(grep -c '"state":[[:space:]]*"unsupported"' "$TMP/u.json")" -eq 4 ] || fail "want 4 unsupported JSON rows"
    expect 3 "^fp4bench layer: unsupported \(" -- "$FP4" layer --attention --tp 8,4 --tokens 16,64,256
    expect 3 "^fp4bench layer: unsupported \(" -- "$FP4" layer --model glm5 --ep 8
    finish
    exit $?
fi
checks=$((checks + 1))
[ $probe_rc -eq 0 ] || fail "a 4-token TP layer on GPU 0 exited $probe_rc: $(head -c 600 "$TMP/probe.err" "$TMP/probe.out")"

# one GPU: TP, EP (both modes) and attention verify and time
expect 0 "tp/w4a4 +1 +16 ok" -- "$FP4" layer $D --tp 1 --tokens 16 $Q --gpus 0 --json "$TMP/tp.json"
expect 0 "ep/w4a16 +1 +16 ok" -- "$FP4" layer $D --ep 1 --tokens 16 --mode w4a16 $Q --gpus 0
expect 0 "ep/w4a4 +1 +64 ok" -- "$FP4" layer $D --ep 1 --tokens 64 --routing skewed $Q --gpus 0
expect 0 "attention +1 +16 ok" -- "$FP4" layer --attention --attn-dims 1024,16,8,64 --tp 1 --tokens 16 $Q --gpus 0
checks=$((checks + 3))
grep -q '"state":[[:space:]]*"ok"' "$TMP/tp.json" || fail "the TP JSON has no verified row"
grep -q '"allreduce_us":[[:space:]]*[0-9]' "$TMP/tp.json" || fail "the TP JSON has no all-reduce time"
grep -q '"nvls":[[:space:]]*false' "$TMP/tp.json" || fail "the JSON does not say NVLS is off"

# a degree larger than the GPUs listed: unsupported rows beside the ones that ran (exit 0)
expect 0 "attention +2 +16 unsupported \(needs 2 GPUs, found 1\)" -- \
    "$FP4" layer --attention --attn-dims 1024,16,8,64 --tp 2,1 --tokens 16 $Q --gpus 0
# nothing can run: exit 3
expect 3 "^fp4bench layer: unsupported \(needs 2 GPUs, found 1\)" -- "$FP4" layer $D --tp 2 --tokens 4 --gpus 0
finish
