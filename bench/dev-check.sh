#!/usr/bin/env bash
# One device call for kernel work in progress: build (sm_90a), the GPU tests,
# the decode variants side by side, the quantizer and W4A4 rows, and Nsight
# Compute of the newest decode kernel. Output under $OUT.
set -uo pipefail
DEV_LOG=0
source bench/dev-build.sh
t0=$(date +%s)
B=./build-dev/fp4bench
(cd build-dev && timeout 300 ctest --output-on-failure -R "gpu_|test_w4a4" -j 3) >"$OUT/ctest.txt" 2>&1
grep -E "tests passed|Failed|Passed|\*\*\*|CHECK" "$OUT/ctest.txt" | head -30
echo "== ctest $(( $(date +%s) - t0 )) s"
echo "== verify every backend on the odd and seed presets"
$B run --preset odd --backend all --verify-only --quiet --no-ceilings | grep -vE " ok |reference|^$" | tail -n +7
$B run --preset seed --backend all --verify-only --quiet --no-ceilings | grep -vE " ok |reference|^$" | tail -n +7
for v in v4-decode v8-prefill ${SANITIZE_VARIANTS:-v7-decode}; do
  for tool in memcheck racecheck; do
    FP4_SM90_KERNEL=$v timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
      --backend fp4-sm90,w4a4-sm90,quantize --shape 3x200x48,17x768x2880 --verify-only --quiet \
      --no-ceilings >/tmp/san.log 2>&1
    echo "$v $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
  done
done
bench/decode-study.sh "${DECODE_VARIANTS:-v1-decode v3-decode v4-decode}"
echo "== quantize and w4a4 rows"
$B run --backend quantize --shape 8192x1x8192,16384x1x4096 --no-ceilings --quiet --max-time 2 | tail -n +9 | head -8
$B run --backend quantize,w4a4-sm90,cublas-bf16,fp4-sm90 --shape 16x2048x6144,1024x2048x6144 \
  --no-ceilings --quiet --max-time 2 | tail -n +9 | head -12
echo "== $(( $(date +%s) - t0 )) s"
[ -n "${PROFILE:-}" ] && bench/profile-decode.sh "$PROFILE"
echo "== done $(( $(date +%s) - t0 )) s"
