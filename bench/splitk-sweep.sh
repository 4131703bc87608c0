#!/usr/bin/env bash
# K-split sweep of one decode variant (FP4_SM90_SPLITK) on the H200, cold L2,
# graphs: which split count the shape wants, against the heuristic's own.
# Needs build-dev. Usage: bench/splitk-sweep.sh variant "shape,shape" "1 2 4 ..."
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
v=${1:-v4-decode}; shapes=${2:-16x2048x6144}
for s in 0 ${3:-"1 2 3 4 6 8 12 16 24 32"}; do
  FP4_SM90_KERNEL=$v FP4_SM90_SPLITK=$s $B run --backend fp4-sm90 --shape "$shapes" --max-time 1 \
    --no-ceilings --quiet 2>&1 | awk -v s="$s" '$5=="fp4-sm90"{printf "splits %s (0 = heuristic) %sx%sx%s %s us\n", s, $2,$3,$4,$6}'
done | tee "$OUT/splitk-$v.txt"
