#!/usr/bin/env bash
# Nsight Compute of v8-prefill's main kernel beside cuBLAS bf16's GEMM kernel at
# one prefill shape (default 4096x2048x6144): speed of light (L2, DRAM, SM),
# launch statistics (cluster size, registers, shared memory), warp stalls,
# tensor-pipe activity, L2 traffic. Question it answers: is v8's main loop
# bound by the L2 -> shared-memory traffic of its fp16 B tiles, by its
# per-step barrier, or by A's dequantization. Needs build-dev.
# PROF_VARIANTS: the fp4-sm90 variants profiled (default v8-prefill; each
# variant's main kernel is prefill<n>_kernel); CUBLAS=0 skips cuBLAS.
# Usage: [SHAPE=MxNxK] [PROF_VARIANTS="v8-prefill v14-prefill"] bench/profile-prefill.sh
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
B=./build-dev/fp4bench
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
SHAPE=${SHAPE:-4096x2048x6144}
prof() { # name backend kernel-regex [variant]
  local f="$OUT/ncu-$1-$SHAPE.txt"
  echo "== ncu $1 $SHAPE"
  FP4_SM90_KERNEL=${4:-} timeout 180 "$NCU" --clock-control none --kernel-name "regex:$3" \
    --launch-skip 0 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_bytes.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,regex:l1tex__m_xbar2l1tex_read_bytes.sum" \
    $B run --backend "$2" --shape "$SHAPE" --verify-only --no-ceilings --quiet >"$f" 2>&1
  grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput|Compute \(SM\)|Achieved Occ|Registers|Grid Size|Block Size|Cluster Size|Shared Memory Config|Dynamic Shared|Warp Cycles Per Issued|No Eligible|Issued Warp|stalled_.*ratio +[0-9.]+[1-9]|pipe_tensor|inst_executed.sum|dram__bytes|lts__t_|xbar2l1tex" \
    "$f" | awk '{$1=$1; print}' | grep -vE "ratio +0(\.[0-9])?[0-9]*$" | cut -c1-130 | head -60
}
for v in ${PROF_VARIANTS:-v8-prefill}; do
  n=${v%%-*}
  prof "$v" fp4-sm90 "prefill${n#v}_kernel" "$v"
done
# cuBLAS's own kernel (nvjet on CUDA 13; "gemm" alone also matches the
# verification's ref_gemm_kernel)
[ "${CUBLAS:-1}" = 1 ] && prof cublas-bf16 cublas-bf16 "nvjet|xmma|cutlass"
