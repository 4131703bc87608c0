#!/usr/bin/env bash
# Nsight Compute of v9-mid's two kernels (token prepass, main) on the H200:
# duration, throughput, occupancy, stall reasons. Needs build-dev.
# Usage: bench/profile-mid9.sh "shape shape ..."
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for shape in ${1:-16x2048x6144 64x2048x6144}; do
  echo "== ncu v9-mid $shape"
  FP4_SM90_KERNEL=v9-mid timeout 150 "$NCU" --clock-control none --kernel-name "regex:mid9_tok|prefill8_kernel" \
    --launch-skip 0 --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum" \
    $B run --backend fp4-sm90 --shape "$shape" --verify-only --no-ceilings --quiet >"$OUT/ncu-v9-$shape.txt" 2>&1
  grep -E "fp4_sm90_|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occ|Registers|Grid Size|Warp Cycles Per Issued|No Eligible|stalled_.*ratio +[0-9.]+[1-9]|inst_executed.sum|dram__bytes" \
    "$OUT/ncu-v9-$shape.txt" | awk '{$1=$1; print}' | grep -vE "ratio +0(\.[0-9])?[0-9]*$" | cut -c1-120 | head -50
done
