#!/usr/bin/env bash
# Where do the decode kernels spend their time? Nsight Compute on the H200:
# speed of light, occupancy (clusters included), launch statistics, warp stall
# reasons per issued instruction and the top stall locations. Needs build-dev
# (bench/device-run.sh builds it). Usage: bench/profile-decode.sh "variant:shape ..."
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for vs in ${1:-"v1-decode:16x2048x6144 v3-decode:16x2048x6144 v3-decode:64x2048x6144"}; do
  v=${vs%%:*}; shape=${vs#*:}
  echo "== ncu $v $shape"
  FP4_SM90_KERNEL=$v timeout 150 "$NCU" --clock-control none --kernel-name "regex:fp4_sm90" \
    --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    $B run --backend fp4-sm90 --shape "$shape" --verify-only --no-ceilings --quiet \
    >"$OUT/ncu-$v-$shape.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Compute \(SM\)|Achieved Occ|Theoretical Occ|Registers|Cluster|Grid Size|Block Size|Waves|Warp Cycles Per Issued|Issue Slots|No Eligible|Active Warps Per|Eligible Warps|stalled_.*ratio +[0-9.]+[1-9]|Shared Memory Config" \
    "$OUT/ncu-$v-$shape.txt" | awk '{$1=$1; print}' | grep -vE "ratio +0(\.0+)?$" | head -60
done
