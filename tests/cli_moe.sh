#!/usr/bin/env bash
# fp4bench moe end to end on the CPU (moe-cpu-ref, small custom layers): every
# routing mode, a trace file (int32 and int64), every step and mode, the JSON
# and CSV fields, and bad input as one clear line with exit 2 (usage) or 3
# (a bad file). On a machine without a GPU the GPU backends say so.
source "$(dirname "$0")/lib_cli.sh"

D="--dims 96,32,8,2"  # H != 2I: the steps' widths differ
Q="--quiet --max-time 0.2 --warmup-ms 0 --min-samples 3 --backend moe-cpu-ref"

# npy_ints FILE DESCR BYTES T K V...: a C-order .npy of little-endian integers
npy_ints() {
    local file=$1 descr=$2 size=$3 t=$4 k=$5
    shift 5
    local dict="{'descr': '$descr', 'fortran_order': False, 'shape': ($t, $k), }"
    local pad=$(((64 - (${#dict} + 11) % 64) % 64))
    local hlen=$((${#dict} + pad + 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
        printf '%s' "$dict"
        printf "%${pad}s" ""
        printf '\n'
        for v in "$@"; do
            for ((b = 0; b < size; b++)); do printf "\\x$(printf %02x $(((v >> (8 * b)) & 255)))"; done
        done
    } >"$file"
}

expect 0 "usage: fp4bench moe" -- "$FP4" moe --help
expect 0 "moe-cpu-ref +the exact CPU" -- "$FP4" moe --help

# usage errors: one line, exit 2
expect 2 "give the layer" -- "$FP4" moe
expect 2 "--model: .*nope" -- "$FP4" moe --model nope
expect 2 "--dims" -- "$FP4" moe --dims 60,32,8,2
expect 2 "--dims: want H,I,E,K" -- "$FP4" moe --dims 64,32,8
expect 2 "K = 9" -- "$FP4" moe --dims 64,32,8,9
expect 2 "--dims: .*activation|--dims: .*unknown" -- "$FP4" moe --dims 64,32,8,2,relu
expect 2 "give one of --model and --dims" -- "$FP4" moe --model glm5 $D
expect 2 "--tp 3" -- "$FP4" moe --model glm5 --tp 3
expect 2 "--tp 8" -- "$FP4" moe --model gpt-oss-120b --tp 8
expect 2 "--routing: .*nope" -- "$FP4" moe $D --routing nope
expect 2 "needs --trace" -- "$FP4" moe $D --routing trace
expect 2 "--zipf applies to --routing skewed" -- "$FP4" moe $D --zipf 1.5
expect 2 "--step: .*gate_up" -- "$FP4" moe $D --step up
expect 2 "--mode: unknown mode 'w8a8'" -- "$FP4" moe $D --mode w8a8
expect 2 "--backend: unknown MoE backend 'nope'" -- "$FP4" moe $D --backend nope
expect 2 "--tokens: 0 is not a positive" -- "$FP4" moe $D --tokens 0
expect 2 "--tokens: 'x' is not an integer" -- "$FP4" moe $D --tokens 1,x
expect 2 "--tokens: '1,,2' has an empty field" -- "$FP4" moe $D --tokens 1,,2
expect 2 "--tokens: 1000000000 is more than 16777216" -- "$FP4" moe $D --tokens 4,1000000000
expect 2 "--dims: '96,32,8,2,' has an empty field" -- "$FP4" moe --dims 96,32,8,2,
expect 2 "--dims: ',96,32,8,2' has an empty field" -- "$FP4" moe --dims ,96,32,8,2
expect 2 "--step: ',,' has an empty field" -- "$FP4" moe $D --step ,,
expect 2 "--mode needs a value, not an empty one" -- "$FP4" moe $D --mode ""
expect 2 "--backend needs a value, not an empty one" -- "$FP4" moe $D --backend=
expect 2 "--json needs a value, not an empty one" -- "$FP4" moe $D --json ""
expect 2 "--seed must be >= 0" -- "$FP4" moe $D --seed -1
expect 2 "--warmup-ms must be in 0..60000" -- "$FP4" moe $D --warmup-ms 1e12
expect 2 "give one of --tokens and --sweep" -- "$FP4" moe $D --tokens 4 --sweep
expect 2 "--baseline 'moe-cublas-bf16' is not among" -- "$FP4" moe $D --backend moe-cpu-ref --baseline moe-cublas-bf16
expect 2 "--data" -- "$FP4" moe $D --data wide
expect 2 "unknown option '--frob'" -- "$FP4" moe $D --frob

# trace files: 6 tokens, top-2 of 8 experts; expert 3 on every token, 2, 4, 6 idle
ids="3 0 3 1 3 5 3 0 3 1 3 7"
npy_ints "$TMP/t32.npy" '<i4' 4 6 2 $ids
npy_ints "$TMP/t64.npy" '<i8' 8 6 2 $ids
npy_ints "$TMP/bad_id.npy" '<i4' 4 2 2 3 0 9 1
npy_ints "$TMP/dup.npy" '<i4' 4 2 2 3 0 1 1
npy_ints "$TMP/k3.npy" '<i4' 4 2 3 0 1 2 3 4 5
npy_ints "$TMP/f32.npy" '<f4' 4 2 2 0 0 0 0
echo "not numpy" >"$TMP/text.npy"
expect 3 "cannot open" -- "$FP4" moe $D --trace "$TMP/missing.npy"
expect 3 "not a .npy" -- "$FP4" moe $D --trace "$TMP/text.npy"
expect 3 "int32 or int64" -- "$FP4" moe $D --trace "$TMP/f32.npy"
expect 3 "token 1, slot 0: expert 9 is outside 0..7" -- "$FP4" moe $D --trace "$TMP/bad_id.npy"
expect 3 "token 1 names expert 1 twice" -- "$FP4" moe $D --trace "$TMP/dup.npy"
expect 2 "3 experts per token, the layer's top-k is 2" -- "$FP4" moe $D --trace "$TMP/k3.npy"
# read as strictly as every .npy: no bytes after the data, no 1-D or 3-D ids
cp "$TMP/t32.npy" "$TMP/tail.npy" && printf 'junk' >>"$TMP/tail.npy"
expect 3 "4 unexpected bytes after the data" -- "$FP4" moe $D --trace "$TMP/tail.npy"
npy_ints "$TMP/oned.npy" '<i4' 4 4 "" 3 0 3 1
expect 3 "ids must have a 2-D shape" -- "$FP4" moe $D --trace "$TMP/oned.npy"
npy_ints "$TMP/big.npy" '<i8' 8 2 2 3 0 4294967297 1
expect 3 "big.npy: \[1, 0\]: 4294967297 does not fit int32" -- "$FP4" moe $D --trace "$TMP/big.npy"
expect 2 "--tokens 7: the trace .* has 6 tokens" -- "$FP4" moe $D --trace "$TMP/t32.npy" --tokens 7
expect 2 "--trace goes with --routing trace" -- "$FP4" moe $D --trace "$TMP/t32.npy" --routing random

# shared experts: E and top-k grow by N, the shared ones take every token, the label says so;
# a trace gives the routed slots alone
expect 0 "E 9, top-3 \(1 of them shared" -- "$FP4" moe $D --shared 1 --tokens 5 --step gate_up,layer \
    --mode w4a16 $Q --json "$TMP/sh.json"
checks=$((checks + 2))
grep -qE "random\(seed=1,shared=1\) +5 moe-cpu-ref .*/5 " "$TMP/out" ||
    fail "--shared 1: no row whose busiest expert has the 5 tokens: $(cat "$TMP/out")"
python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
sys.exit(not (len(rows) == 2 and all(r["moe"]["experts"] == 9 and r["moe"]["top_k"] == 3 and
    r["moe"]["tokens_per_expert"]["max"] == 5 and r["moe"]["routing"] == "random(seed=1,shared=1)" for r in rows)))' \
    "$TMP/sh.json" || fail "--shared 1: the JSON rows' experts, top-k, tokens or routing"
expect 0 "moe-cpu-ref" -- "$FP4" moe $D --shared 2 --trace "$TMP/t32.npy" $Q
expect 2 "--shared 65: want 0..64" -- "$FP4" moe $D --shared 65
expect 2 "--shared" -- "$FP4" moe $D --shared -1

# every routing mode, every step and mode: 2 T x 3 steps x 2 modes = 12 rows
for r in balanced random "skewed --zipf 1.2"; do
    expect 0 "moe-cpu-ref" -- "$FP4" moe $D --tokens 1,5 --routing $r --step gate_up,down --step layer \
        --mode w4a4,w4a16 $Q --json "$TMP/r.json" --csv "$TMP/r.csv"
    checks=$((checks + 3))
    [ "$(grep -c '"moe":' "$TMP/r.json")" -eq 12 ] || fail "routing $r: want 12 MoE rows in the JSON"
    [ "$(wc -l <"$TMP/r.csv")" -eq 13 ] || fail "routing $r: want a header and 12 CSV rows"
    grep -q "reference" "$TMP/out" || fail "routing $r: the table has no verified rows: $(cat "$TMP/out")"
done
checks=$((checks + 5))
grep -q '"routing":[[:space:]]*"skewed(s=1.2,seed=1)"' "$TMP/r.json" || fail "JSON lacks the routing"
grep -q '"tokens_per_expert":' "$TMP/r.json" || fail "JSON lacks tokens_per_expert"
grep -q '"weight_bytes":' "$TMP/r.json" || fail "JSON lacks weight_bytes"
grep -q '"tokens_per_s":' "$TMP/r.json" || fail "JSON lacks tokens_per_s"
head -1 "$TMP/r.csv" | grep -q ',moe_model,moe_step,moe_mode,moe_routing,tokens,active_experts,' ||
    fail "CSV header lacks the MoE columns: $(head -1 "$TMP/r.csv")"
expect 0 "" -- "$FP4" compare "$TMP/r.json" "$TMP/r.json"

# the trace, int32 and int64: the counts it implies; a prefix with --tokens
for f in t32 t64; do
    expect 0 "custom down w4a4 trace" -- "$FP4" moe $D --trace "$TMP/$f.npy" --step down $Q --json "$TMP/$f.json"
    checks=$((checks + 2))
    grep -q '"active_experts":[[:space:]]*5' "$TMP/$f.json" || fail "$f: want 5 active experts"
    grep -Eq '"max":[[:space:]]*6' "$TMP/$f.json" || fail "$f: want one expert with all 6 tokens"
done
expect 0 "custom gate_up w4a4 trace +3 " -- "$FP4" moe $D --trace "$TMP/t32.npy" --tokens 3 --step gate_up $Q
# --sweep with a trace: its prefixes 1, 2, 4, then its 6 tokens
expect 0 "" -- "$FP4" moe $D --trace "$TMP/t32.npy" --sweep --verify-only --step gate_up --backend moe-cpu-ref \
    --quiet --json "$TMP/ts.json"
checks=$((checks + 1))
[ "$(grep -Eo '"tokens":[[:space:]]*[0-9]+' "$TMP/ts.json" | grep -Eo '[0-9]+$' | sort -nu | tr '\n' ' ')" = "1 2 4 6 " ] ||
    fail "--sweep with a 6-token trace: want T = 1 2 4 6, got $(grep -Eo '"tokens":[[:space:]]*[0-9]+' "$TMP/ts.json" | tr '\n' ' ')"

# --verify-only: verified, not timed; --sweep gives T = 1 .. 8192
expect 0 "" -- "$FP4" moe $D --sweep --verify-only --step gate_up --backend moe-cpu-ref --quiet --json "$TMP/v.json"
checks=$((checks + 2))
[ "$(grep -c '"moe":' "$TMP/v.json")" -eq 14 ] || fail "--sweep: want 14 rows"
grep -q '"count":[[:space:]]*0' "$TMP/v.json" || fail "--verify-only rows should have no samples"

# --json -: the document alone on stdout
"$FP4" moe $D --tokens 2 --step gate_up $Q --json - >"$TMP/stdout.json" 2>/dev/null
checks=$((checks + 1))
head -c 1 "$TMP/stdout.json" | grep -q '{' || fail "--json -: stdout is not the JSON document"

# a model preset at a size the CPU reference refuses: an unsupported row, not a failure
expect 0 "unsupported: moe-cpu-ref: .* multiply-adds" -- "$FP4" moe --model qwen3-30b --tokens 128 --step gate_up \
    --data codes $Q --verbose

# without a GPU every GPU backend says so, and the reference still runs
if "$FP4" moe --help | grep -q "moe-fp4-sm90" && ! "$FP4" list | grep -qE "^cuda-ref +yes"; then
    expect 0 "moe-fp4-sm90 +unsupported: no NVIDIA GPU" -- "$FP4" moe $D --tokens 2 --step gate_up --backend all \
        --quiet --max-time 0.2 --warmup-ms 0
    grep -qE "moe-cpu-ref +[0-9.]+ " "$TMP/out" || fail "moe-cpu-ref did not run: $(cat "$TMP/out")"
    checks=$((checks + 1))
    # GPU backends alone: the rows at once, without GLM-5's 5.4 GB of weights made first
    expect 0 "moe-cublaslt-fp8 +unsupported: no NVIDIA GPU" -- timeout 20 "$FP4" moe --model glm5 --tokens 4 \
        --step layer --mode w4a16 --backend moe-cublaslt-fp8,moe-fp4-sm90 --quiet
    # a preset with a shared expert says when the rows leave it out
    checks=$((checks + 1))
    grep -qF "E 256, top-8 (routed only: --shared 1 adds the model's shared expert)" "$TMP/out" ||
        fail "glm5 without --shared: no hint in $(head -c 600 "$TMP/out")"
fi
finish
