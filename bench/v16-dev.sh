#!/usr/bin/env bash
# One device call for v16-prefill (session 9): build, its GPU test, v16 and
# v8 forced beside cuBLAS bf16 on SHAPES (prefill12-dev.sh), v16 with one
# tile a CTA (not persistent) on ONETILE_SHAPES, memcheck and racecheck with
# a 2-CTA persistent grid (a CTA walks many tiles), and Nsight Compute of the
# A prepass and the main kernel (PROF=1). Output under $OUT.
set -uo pipefail
export PV=v16-prefill MV=v11-mid TEST_VARIANTS=16 MID_SAN=" " MID_VARIANTS=" " SAN=0 SASS=0
export PROF=${PROF:-1} PROF_VARIANTS=v16-prefill PROF_REGEX="a_tiles_kernel|prefill16_kernel" PROF_COUNT=2
bash bench/prefill12-dev.sh
B=./build-dev/fp4bench
FP4_SM90_V16_CTAS=1000000 FP4_SM90_KERNEL=v16-prefill $B run --shape "${ONETILE_SHAPES:-4096x2048x6144,8192x8192x8192}" \
  --json "$OUT/forced-v16-onetile.json" --quiet --max-time 1 --no-ceilings --backend cublas-bf16,fp4-sm90 |
  grep -E "fp4-sm90|cublas-bf16" | sed "s/^/[v16 one tile a CTA] /"
for tool in memcheck racecheck; do
  FP4_SM90_V16_CTAS=2 FP4_SM90_KERNEL=v16-prefill timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
    --backend fp4-sm90 --shape 300x2000x48,129x1001x2880,1000x770x6144 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
  echo "v16 2 CTAs $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|FAILED" /tmp/san.log | sort | uniq -c | sort -rn | head -6
done
