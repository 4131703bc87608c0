#!/usr/bin/env bash
# One device call for v10-decode work: build (sm_90a), the sanitizers on v10
# (cluster and persistent paths), the fp4-sm90 GPU test (GPU_FP4_SM90_ONLY=10
# by default: v10 only), v10 against v4 and cuBLAS on the decode targets (v10
# with RT 2 / 4 forced), v10's split sweep, Nsight Compute of v10 (NCU="variant:shape .."),
# v10's ablation (ABLATE="shape,shape": one cold launch with and without its arithmetic).
# Output under $OUT.
set -uo pipefail
source bench/dev-build.sh
t0=$(date +%s)
B=./build-dev/fp4bench
for tool in memcheck racecheck; do
  for sk in 0 3; do
    FP4_SM90_SPLITK=$sk FP4_SM90_KERNEL=v10-decode timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
      --backend fp4-sm90 --shape 3x200x48,17x768x2880,40x2000x2880 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
    echo "v10-decode splits $sk $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
    grep -m3 -E "Invalid|Hazard|rror" /tmp/san.log
  done
done
echo "== sanitizers $(( $(date +%s) - t0 )) s"
GPU_FP4_SM90_ONLY=${ONLY-10} timeout ${TEST_TIMEOUT:-300} ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90.txt" 2>&1
echo "gpu_fp4_sm90: exit $?"; grep -E "FAIL|clusters|only" "$OUT/gpu_fp4_sm90.txt" | head -20; tail -1 "$OUT/gpu_fp4_sm90.txt"
echo "== tests $(( $(date +%s) - t0 )) s"
S=${SHAPES:-1x2048x6144,16x2048x6144,64x2048x6144,16x768x6144,64x768x6144,16x8192x8192,16x28672x4096,128x2048x6144}
FP4_SM90_KERNEL=v10-decode $B run --shape "$S" --json "$OUT/forced-v10.json" --quiet --max-time 1 --no-ceilings \
  --backend cublas-bf16,fp4-sm90 | grep -E "fp4-sm90|cublas-bf16" | sed "s/^/[v10] /"
for rt in ${RTS:-2 4}; do
  FP4_SM90_V10_RT=$rt FP4_SM90_KERNEL=v10-decode $B run --shape "$S" --json "$OUT/forced-v10-rt$rt.json" --quiet \
    --max-time 1 --no-ceilings --backend fp4-sm90 | grep -E "fp4-sm90" | sed "s/^/[v10 rt$rt] /"
done
FP4_SM90_KERNEL=v4-decode $B run --shape "$S" --json "$OUT/forced-v4.json" --quiet --max-time 1 --no-ceilings \
  --backend fp4-sm90 | grep -E "fp4-sm90" | sed "s/^/[v4] /"
echo "== timings $(( $(date +%s) - t0 )) s"
[ -n "${SPLITS-1 2 3 4}" ] && bash bench/splitk-sweep.sh v10-decode "16x2048x6144,64x2048x6144,16x768x6144,64x768x6144" "${SPLITS-1 2 3 4}"
[ -n "${NCU-}" ] && bash bench/profile-decode.sh "$NCU"
[ -n "${ABLATE-}" ] && KERNEL=v10-decode FLAG=D10_DEV_ABLATE LEVELS=1 bash bench/decode-ablate.sh "$ABLATE"
echo "== done $(( $(date +%s) - t0 )) s"
