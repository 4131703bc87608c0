#!/usr/bin/env bash
# Decode kernels side by side on the H200 (after bench/device-run.sh or any
# build of build-dev): every fp4-sm90 decode variant forced on the decode
# target shapes, cold L2, graphs; then Nsight Compute of the newest variant.
# JSON per variant under $OUT. Usage: bench/decode-study.sh [variants] [shapes]
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
variants=${1:-"v1-decode v3-decode v4-decode"}
shapes=${2:-"1x2048x6144,16x2048x6144,32x2048x6144,64x2048x6144,128x2048x6144,256x2048x6144,16x768x6144,64x768x6144,16x8192x8192,16x28672x4096"}
for v in $variants; do
  FP4_SM90_KERNEL=$v $B run --backend fp4-sm90 --shape "$shapes" --max-time 2 --no-ceilings \
    --quiet --json "$OUT/decode-$v.json" >"$OUT/decode-$v.txt" 2>&1
  echo "== $v"; awk '$5=="fp4-sm90"{printf "%sx%sx%s %s us %s\n",$2,$3,$4,$6,$NF}' "$OUT/decode-$v.txt"
done
