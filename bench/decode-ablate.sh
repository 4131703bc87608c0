#!/usr/bin/env bash
# Where a decode kernel's time goes, on the H200: extra builds of fp4bench with
# its ablation flag (KERNEL=v4-decode, FLAG=D4_DEV_ABLATE, LEVELS="1 2 3": 1 no
# dequantization/MMA, 2 no reduction, 3 neither; KERNEL=v10-decode
# FLAG=D10_DEV_ABLATE LEVELS=1: no dequantization/MMA). Their
# results are wrong, so fp4bench will not time them (it times verified rows
# only): Nsight Compute measures one cold launch per shape instead (cache
# flush, no graph), for every build including the real one. Needs build-dev.
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
shapes=${1:-"1x2048x6144,16x2048x6144,64x2048x6144,16x768x6144,16x8192x8192"}
KERNEL=${KERNEL:-v4-decode}; FLAG=${FLAG:-D4_DEV_ABLATE}; LEVELS=${LEVELS:-1 2 3}
for a in $LEVELS; do
  ( cmake -S . -B build-abl$a -DCJSON_ROOT=/tmp/cjson -DFP4_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_FLAGS="-D$FLAG=$a" >/tmp/abl$a.log 2>&1 &&
    cmake --build build-abl$a -j6 --target fp4bench >>/tmp/abl$a.log 2>&1 || echo "ablation build $a failed" ) &
done
wait
echo "build, kernel, grid, duration (ns), in the order of: $shapes" | tee "$OUT/decode-ablate-$KERNEL.txt"
for b in build-dev $(for a in $LEVELS; do echo build-abl$a; done); do
  [ -x $b/fp4bench ] || continue
  FP4_SM90_KERNEL=$KERNEL timeout 120 "$NCU" --clock-control none --kernel-name regex:fp4_sm90 --csv \
    --metrics gpu__time_duration.sum,launch__grid_size $b/fp4bench run --backend fp4-sm90 \
    --shape "$shapes" --verify-only --no-ceilings --quiet 2>/dev/null |
    awk -F'","' -v b=$b '/gpu__time_duration|launch__grid_size/ { k=$5 "|" $(NF-3); split($5,f,"("); v=$NF; gsub(/[",]/,"",v);
       if ($0 ~ /grid_size/) g[$1]=v; else { t[$1]=v; name[$1]=f[1] } }
       END { for (i in t) printf "%s %s %s grid %s %s ns\n", i, b, name[i], g[i], t[i] }' | sort -n | cut -d" " -f2-
done | tee -a "$OUT/decode-ablate-$KERNEL.txt"
