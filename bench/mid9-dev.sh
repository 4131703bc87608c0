#!/usr/bin/env bash
# One device call for v9-mid work: build (sm_90a), the fp4-sm90 GPU test, the
# sanitizers on v9, v9 forced against the heuristic's choice and the baselines
# on the M sweep and the decode targets, and v9's split sweep. Output under $OUT.
set -uo pipefail
source bench/dev-build.sh
t0=$(date +%s)
B=./build-dev/fp4bench
timeout ${TEST_TIMEOUT:-240} ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90.txt" 2>&1
echo "gpu_fp4_sm90: exit $?"; grep -E "FAIL|v9" "$OUT/gpu_fp4_sm90.txt" | head -20; tail -1 "$OUT/gpu_fp4_sm90.txt"
echo "== tests $(( $(date +%s) - t0 )) s"
for tool in memcheck racecheck; do
  for sk in 0 3; do
    FP4_SM90_SPLITK=$sk FP4_SM90_KERNEL=v9-mid timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
      --backend fp4-sm90 --shape 3x200x48,17x768x2880,300x2000x48 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
    echo "v9-mid splits $sk $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
  done
done
S=${SHAPES:-1x2048x6144,16x2048x6144,64x2048x6144,128x2048x6144,256x2048x6144,512x2048x6144,1024x2048x6144,2048x2048x6144,16x768x6144,64x768x6144,256x768x6144,1024x768x6144,16x8192x8192,16x28672x4096}
FP4_SM90_KERNEL=v9-mid $B run --shape "$S" --json "$OUT/forced-v9.json" --quiet --max-time 1 --no-ceilings \
  --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | grep -E "fp4-sm90|cublas-bf16" | sed "s/^/[v9] /"
$B run --shape "$S" --json "$OUT/auto.json" --quiet --max-time 1 --no-ceilings \
  --backend fp4-sm90 | grep -E "fp4-sm90" | sed "s/^/[auto] /"
echo "== timings $(( $(date +%s) - t0 )) s"
bash bench/splitk-sweep.sh v9-mid "16x2048x6144,64x2048x6144,256x2048x6144,16x768x6144,1024x2048x6144" "${SPLITS:-1 2 4 6 8 12 16}"
echo "== done $(( $(date +%s) - t0 )) s"
