#!/usr/bin/env bash
# Nsight Compute of v9-mid's or v11-mid's two kernels (token prepass, main;
# VARIANT=v11-mid) on the H200: duration, throughput, occupancy, stall
# reasons, L2 and DRAM traffic. Needs build-dev.
# Usage: [VARIANT=v11-mid] bench/profile-mid9.sh "shape shape ..."
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for shape in ${1:-16x2048x6144 64x2048x6144}; do
  V=${VARIANT:-v9-mid}
  f="$OUT/ncu-${V%%-*}-$shape.txt"
  echo "== ncu $V $shape"
  FP4_SM90_KERNEL=$V timeout 150 "$NCU" --clock-control none --kernel-name "regex:mid9_tok|prefill8_kernel" \
    --launch-skip 0 --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum" \
    $B run --backend fp4-sm90 --shape "$shape" --verify-only --no-ceilings --quiet >"$f" 2>&1
  grep -E "fp4_sm90_|Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Compute \(SM\)|Achieved Occ|Registers|Grid Size|Warp Cycles Per Issued|No Eligible|stalled_.*ratio +[0-9.]+[1-9]|inst_executed.sum|dram__bytes|lts__t_" \
    "$f" | awk '{$1=$1; print}' | grep -vE "ratio +0(\.[0-9])?[0-9]*$" | cut -c1-120 | head -50
done
