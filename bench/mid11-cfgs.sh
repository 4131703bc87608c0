#!/usr/bin/env bash
# v11-mid's development settings side by side on the mid shapes (needs
# build-dev): each CFGS entry is "NAME=VALUE" for one FP4_SM90_V11_<NAME>
# variable (PDL=0, BN=64|128|256), "-" for the defaults. Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
S=${SHAPES:-64x2048x6144,128x2048x6144,256x2048x6144,512x2048x6144,1024x2048x6144,256x768x6144,1024x768x6144}
for c in ${CFGS:-- PDL=0 BN=64 BN=128 BN=256}; do
  if [ "$c" = - ]; then envs=(); else envs=("FP4_SM90_V11_$c"); fi
  env "${envs[@]}" FP4_SM90_KERNEL=v11-mid $B run --shape "$S" --json "$OUT/cfg-v11-${c//=/}.json" --quiet \
    --max-time 1 --no-ceilings --backend fp4-sm90 2>&1 |
    awk -v c="$c" '$5=="fp4-sm90"{printf "[%s] %sx%sx%s %s us %s\n", c, $2,$3,$4,$6,$NF}'
done | tee "$OUT/cfgs-v11.txt"
