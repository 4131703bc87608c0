#!/usr/bin/env bash
# Study the fp4-sm90 kernels on the GPU machine (after bench/device-run.sh built
# build-dev): Nsight Compute sections for decode and prefill, and a sweep of
# decode's K split. Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
prof() { # kernel-regex shape variant
  FP4_SM90_KERNEL=$3 timeout 120 "$NCU" --clock-control none --kernel-name "regex:$1" \
    --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    $B run --backend fp4-sm90 --shape "$2" --verify-only --no-ceilings --quiet 2>&1 |
    grep -E "Duration|Throughput|Achieved Occupancy|Registers|Block Limit|Waves|Grid Size|Stall|Warp Cycles|Issued|Eligible|L2 Hit|Dynamic Shared|Theoretical Occ" | head -40
}
echo "== ncu decode 16x2048x6144"; prof decode 16x2048x6144 decode
echo "== ncu decode 64x2048x6144"; prof decode 64x2048x6144 decode
echo "== ncu prefill 4096x2048x6144"; prof prefill 4096x2048x6144 prefill
echo "== split-K sweep (cold, graph)"
for shape in 16x2048x6144 64x2048x6144 16x768x6144; do
  for s in 1 2 4 6 9 12 16 24; do
    t=$(FP4_SM90_SPLITK=$s $B run --backend fp4-sm90 --shape $shape --no-ceilings --quiet --max-time 2 |
        awk '$5=="fp4-sm90"{print $6}')
    echo "$shape splits $s: $t us"
  done
done
