#!/usr/bin/env bash
# Short recorded call for the end of a session with little device time: build,
# the fp4-sm90 and quantizer GPU tests (every variant forced), racecheck of
# the variants in RACE (CHECKS_ONLY=1 stops there), the issue-4
# targets, the M sweep (optional: SWEEP=0 skips it) and the prefill shapes
# around the decode/prefill switch (PREFILL_M=0 skips them), then the
# quantizer alone (QUANT_ALONE=0 skips it: inside the targets' rounds the GPU
# sits at its power cap). Output under $OUT.
set -uo pipefail
source bench/dev-build.sh
B=./build-dev/fp4bench
$B --version | head -1
# the GPU tests first: what a cut-short call returns is then the correctness.
# TEST_VARIANTS="8 16": only the fp4-sm90 test, once a listed variant (what
# changed since the last full run; little device time left)
if [ -n "${TEST_VARIANTS:-}" ]; then
  for v in $TEST_VARIANTS; do
    GPU_FP4_SM90_ONLY=$v timeout ${TEST_TIMEOUT:-420} ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90-v$v.txt" 2>&1
    echo "gpu_fp4_sm90 (variant $v): exit $?"; grep -E "CHECK failed" "$OUT/gpu_fp4_sm90-v$v.txt" | head -10
    tail -1 "$OUT/gpu_fp4_sm90-v$v.txt"
  done
else
  for t in gpu_fp4_sm90 gpu_quantize; do
    timeout ${TEST_TIMEOUT:-420} ./build-dev/tests/$t >"$OUT/$t.txt" 2>&1
    echo "$t: exit $?"; grep -E "CHECK failed" "$OUT/$t.txt" | head -10; tail -1 "$OUT/$t.txt"
  done
fi
# RACE="v13-mid:3 v12-prefill:0": racecheck of variants (forced) with a K split
# count (0: the rule's) on tail shapes that reuse ring slots
for vs in ${RACE:-}; do
  FP4_SM90_SPLITK=${vs#*:} FP4_SM90_KERNEL=${vs%%:*} timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    $B run --backend fp4-sm90 --shape 17x768x2880,129x1001x2880 --verify-only --quiet --no-ceilings >/tmp/race.log 2>&1
  echo "racecheck ${vs%%:*} splits ${vs#*:}: exit $? ($(grep -c "RACECHECK SUMMARY: 0 hazards" /tmp/race.log) clean summaries)"
  grep -E "RACECHECK SUMMARY|Race reported" /tmp/race.log | sort | uniq -c | sort -rn | head -4
done
[ "${CHECKS_ONLY:-0}" = 1 ] && exit 0 # little device time left: correctness only
$B run --preset targets --json "$OUT/targets.json" --quiet --max-time ${MAXT:-2} \
   --backend cublas-bf16,cublaslt-fp8,fp4-sm90,w4a4-sm90,quantize | grep -E "ceilings|fp4-sm90"
# variants forced on chosen shapes, same rounds with the baselines, one JSON each:
# FORCED="v7-decode:16x2048x6144,64x2048x6144 ..." (not the heuristic's choice yet)
for vs in ${FORCED:-}; do
  v=${vs%%:*}; shapes=${vs#*:}
  FP4_SM90_KERNEL=$v timeout 120 $B run --shape "$shapes" --json "$OUT/forced-$v.json" --quiet --max-time 1 \
    --no-ceilings --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | grep -E "fp4-sm90" | sed "s/^/[$v] /"
done
[ "${SWEEP:-1}" = 1 ] && $B run --preset sweep-m --json "$OUT/sweep-m.json" --quiet --max-time 1 \
   --no-ceilings --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | grep fp4-sm90 | head -40
[ "${PREFILL_M:-1}" = 1 ] && $B run --shape 512x2048x6144,1024x2048x6144,2048x2048x6144,512x768x6144,1024x768x6144,8192x768x6144 \
   --json "$OUT/prefill-m.json" --quiet --max-time 1 --no-ceilings \
   --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | grep fp4-sm90
[ "${QUANT_ALONE:-1}" = 1 ] && $B run --backend quantize --shape 8192x2048x8192,16384x2048x4096 \
   --json "$OUT/quantize-alone.json" --quiet --max-time 2 --no-ceilings | grep quantize
