#!/usr/bin/env bash
# One device call (session 10): v16-prefill's grouped tile order
# (fp4_sm90_raster.h). Build; v16's GPU test; memcheck with groups of 3 on a
# 2-CTA grid; v16 in the plain order (FP4_SM90_V16_GROUP=0) and the automatic
# group, each beside cuBLAS bf16 on SHAPES, two interleaved rounds; Nsight
# Compute's DRAM bytes and L2 hit rate of the main kernel at PROF_SHAPE in
# both orders (PROF=1, into the log, last); before it the issue-4 targets on
# this code (TARGETS=1) and v16 in the plain order at 8192^3 in the same kind
# of rounds.
# Output under $OUT (8 files).
set -uo pipefail
source bench/dev-build.sh
B=./build-dev/fp4bench
GPU_FP4_SM90_ONLY=16 timeout 300 ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90-v16.txt" 2>&1
echo "gpu_fp4_sm90 (variant 16): exit $?"; grep -E "CHECK failed" "$OUT/gpu_fp4_sm90-v16.txt" | head; tail -1 "$OUT/gpu_fp4_sm90-v16.txt"
FP4_SM90_V16_GROUP=3 FP4_SM90_V16_CTAS=2 FP4_SM90_KERNEL=v16-prefill timeout 150 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B run --backend fp4-sm90 --shape 1000x770x2880 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
echo "v16 groups of 3, 2 CTAs, memcheck: exit $? ($(grep -c "ERROR SUMMARY: 0 errors" /tmp/san.log) clean summaries)"
SH=${SHAPES:-8192x8192x8192,4096x8192x8192,2048x28672x4096}
for round in 1 2; do
  for g in plain auto; do
    env $([ $g = plain ] && echo FP4_SM90_V16_GROUP=0) FP4_SM90_KERNEL=v16-prefill $B run --shape "$SH" \
      --json "$OUT/v16-$g-r$round.json" --quiet --max-time 1 --no-ceilings --backend cublas-bf16,fp4-sm90 |
      grep -E "fp4-sm90" | sed "s/^/[$g r$round] /"
  done
done
if [ "${TARGETS:-1}" = 1 ]; then
  $B run --preset targets --json "$OUT/targets.json" --quiet --max-time 2 \
    --backend cublas-bf16,cublaslt-fp8,fp4-sm90,w4a4-sm90,quantize | grep -E "ceilings|fp4-sm90"
  FP4_SM90_V16_GROUP=0 FP4_SM90_KERNEL=v16-prefill $B run --shape 8192x8192x8192 --json "$OUT/forced-v16-plain.json" \
    --quiet --max-time 2 --no-ceilings --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | grep fp4-sm90 | sed "s/^/[v16 plain order] /"
fi
if [ "${PROF:-1}" = 1 ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for g in 0 -1; do
    FP4_SM90_V16_GROUP=$g FP4_SM90_KERNEL=v16-prefill timeout 200 "$NCU" --kernel-name regex:prefill16_kernel -c 1 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      $B run --backend fp4-sm90 --shape "${PROF_SHAPE:-8192x8192x8192}" --verify-only --quiet --no-ceilings >/tmp/ncu.txt 2>&1
    echo "ncu group $g:"; grep -E "duration|bytes|hit_rate|hmma|ERROR|rror" /tmp/ncu.txt | head -12
  done
fi
