#!/usr/bin/env bash
# One device call (session 10): v4-decode with the weights loaded under an L2
# evict-first policy (this tree) against the same kernel without it (the tree
# in $BASE_TREE, built beside it), both forced on the decode shapes, rounds
# interleaved; v4's GPU test on this tree; and the fp8-conversion decode probe
# (bench/cvt_probe.cu: correctness, throughput, its SASS). Output under $OUT.
set -uo pipefail
source bench/dev-build.sh
BASE_TREE=${BASE_TREE:-/tmp/srcbase}
( cd "$BASE_TREE" && DEV_LOG=0 OUT=/tmp/baseout source bench/dev-build.sh ) || { echo "base build failed"; exit 1; }
GPU_FP4_SM90_ONLY=4 timeout 240 ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90-v4.txt" 2>&1
echo "gpu_fp4_sm90 (variant 4, evict-first): exit $?"; grep -E "CHECK failed" "$OUT/gpu_fp4_sm90-v4.txt" | head; tail -1 "$OUT/gpu_fp4_sm90-v4.txt"
SH=${SHAPES:-1x2048x6144,16x2048x6144,32x2048x6144,16x768x6144,64x768x6144,16x8192x8192,16x28672x4096}
for round in 1 2; do
  for t in base hint; do
    b=./build-dev/fp4bench; [ $t = base ] && b=$BASE_TREE/build-dev/fp4bench
    FP4_SM90_KERNEL=v4-decode $b run --shape "$SH" --json "$OUT/v4-$t-r$round.json" --quiet --max-time 1 \
      --no-ceilings --backend cublas-bf16,fp4-sm90 | grep fp4-sm90 | sed "s/^/[$t r$round] /"
  done
done
nvcc -O3 -arch=sm_90a -I src bench/cvt_probe.cu -o /tmp/cvt_probe && /tmp/cvt_probe
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
"$CUOBJ" -sass /tmp/cvt_probe >"$OUT/cvt_probe.sass" 2>&1
grep -oE "F2FP[.A-Z0-9_]*|F2F[.A-Z0-9_]*|PRMT|I2F[.A-Z0-9_]*" "$OUT/cvt_probe.sass" | sort | uniq -c
