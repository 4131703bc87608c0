#!/usr/bin/env bash
# One device call on the final code (session 10): memcheck and racecheck with
# the rule's own choice (no variant forced) on small shapes that reach each
# chosen variant (v4-decode, v11-mid, v8-prefill, v16-prefill; K tails
# included), then the models preset with the rule beside the baselines, and
# v16 / v8 forced on the shapes where the rule now takes v16 (FORCED_SHAPES).
# Output under $OUT.
set -uo pipefail
source bench/dev-build.sh
B=./build-dev/fp4bench
SAN_SHAPES=${SAN_SHAPES:-17x768x2880,129x1001x2880,2048x2048x160,2048x4096x176}
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 $B run --backend fp4-sm90 --shape "$SAN_SHAPES" \
    --verify-only --no-ceilings >"$OUT/san-$tool.txt" 2>&1
  echo "$tool (the rule's choice) on $SAN_SHAPES: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$OUT/san-$tool.txt") clean summaries)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|fp4-sm90" "$OUT/san-$tool.txt" | sort | uniq -c | head -12
done
$B run --preset models --json "$OUT/models.json" --quiet --max-time 1 --no-ceilings \
  --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | grep -E "command|fp4-sm90"
for v in v16-prefill v8-prefill; do
  FP4_SM90_KERNEL=$v $B run --shape "${FORCED_SHAPES:-2048x28672x4096,2048x4096x14336}" --json "$OUT/forced-$v.json" \
    --quiet --max-time 1 --no-ceilings --backend cublas-bf16,fp4-sm90 | grep fp4-sm90 | sed "s/^/[$v] /"
done
