#!/usr/bin/env bash
# One device call for mid-M work (v11-mid; v9-mid with SAN_VARIANT, VARIANTS,
# TEST_VARIANTS): build (sm_90a), the fp4-sm90 GPU test on the variants
# TEST_VARIANTS (GPU_FP4_SM90_ONLY), the sanitizers on SAN_VARIANT (split and
# unsplit), VARIANTS forced beside cuBLAS on the mid shapes, v11's split sweep
# (SPLITS) and its per-CTA stamps. Output under $OUT. (Replaces session 4's
# mid9-dev.sh.)
set -uo pipefail
source bench/dev-build.sh
t0=$(date +%s)
B=./build-dev/fp4bench
for v in ${TEST_VARIANTS:-11}; do
  GPU_FP4_SM90_ONLY=$v timeout ${TEST_TIMEOUT:-240} ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90-v$v.txt" 2>&1
  echo "gpu_fp4_sm90 (variant $v): exit $?"; grep -E "FAIL" "$OUT/gpu_fp4_sm90-v$v.txt" | head -10; tail -1 "$OUT/gpu_fp4_sm90-v$v.txt"
done
echo "== tests $(( $(date +%s) - t0 )) s"
for tool in memcheck racecheck; do
  for sk in 0 3; do
    FP4_SM90_SPLITK=$sk FP4_SM90_KERNEL=${SAN_VARIANT:-v11-mid} timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
      --backend fp4-sm90 --shape 3x200x48,17x768x2880,300x2000x48 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
    echo "${SAN_VARIANT:-v11-mid} splits $sk $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
  done
done
S=${SHAPES:-16x2048x6144,32x2048x6144,64x2048x6144,128x2048x6144,256x2048x6144,512x2048x6144,1024x2048x6144,32x768x6144,64x768x6144,256x768x6144,1024x768x6144}
for v in ${VARIANTS:-v11-mid v9-mid}; do
  FP4_SM90_KERNEL=$v $B run --shape "$S" --json "$OUT/forced-$v.json" --quiet --max-time 1 --no-ceilings \
    --backend cublas-bf16,fp4-sm90 | grep -E "fp4-sm90|cublas-bf16" | sed "s/^/[$v] /"
done
echo "== timings $(( $(date +%s) - t0 )) s"
[ -n "${SPLITS:-}" ] && bash bench/splitk-sweep.sh v11-mid "${SPLIT_SHAPES:-64x2048x6144,256x2048x6144,1024x768x6144}" "$SPLITS"
[ "${STAMPS:-1}" = 1 ] && VARIANT=v11-mid SHAPES="${STAMP_SHAPES:-64x2048x6144 256x2048x6144 1024x768x6144}" bash bench/stamps-mid9.sh
echo "== done $(( $(date +%s) - t0 )) s"
