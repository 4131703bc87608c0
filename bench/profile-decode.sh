#!/usr/bin/env bash
# Where do the kernels spend their time? Nsight Compute on the H200: speed of
# light, occupancy (clusters included), launch statistics, warp stall reasons
# per issued instruction, instruction counts. Needs build-dev (bench/dev-check.sh
# builds it). Usage: bench/profile-decode.sh "variant:shape ..." where variant is
# an fp4-sm90 kernel (v4-decode, ...) or "quantize" (the GPU quantizer row).
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for vs in ${1:-"v4-decode:16x2048x6144 v4-decode:64x2048x6144"}; do
  v=${vs%%:*}; shape=${vs#*:}
  if [ "$v" = quantize ]; then backend=quantize; kern="regex:quantize"; else backend=fp4-sm90; kern="regex:fp4_sm90"; fi
  echo "== ncu $v $shape"
  FP4_SM90_KERNEL=$v timeout 150 "$NCU" --clock-control none --kernel-name "$kern" \
    --launch-skip 0 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section MemoryWorkloadAnalysis --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read.sum" \
    $B run --backend $backend --shape "$shape" --verify-only --no-ceilings --quiet \
    >"$OUT/ncu-$v-$shape.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occ|Theoretical Occ|Registers|Cluster|Grid Size|Block Size|Waves|Warp Cycles Per Issued|Issue Slots|No Eligible|Active Warps Per|Eligible Warps|stalled_.*ratio +[0-9.]+[1-9]|inst_executed.sum|dram__bytes_read|lts__t_sectors|Executed Ipc" \
    "$OUT/ncu-$v-$shape.txt" | awk '{$1=$1; print}' | grep -vE "ratio +0(\.0+)?$" | head -60
done
