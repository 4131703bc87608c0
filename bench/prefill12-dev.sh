#!/usr/bin/env bash
# One device call for the warp-specialized variants, v12-prefill / v13-mid
# (the defaults) or v14-prefill / v15-mid (PV=v14-prefill MV=v15-mid
# TEST_VARIANTS="14 15"): build (sm_90a), the fp4-sm90 GPU test on
# TEST_VARIANTS (default 12 13), memcheck and racecheck of PV (each tile width,
# FP4_SM90_V<n>_BN) and MV (MID_SAN) on tail shapes, VARIANTS (default PV and
# v8-prefill) forced beside cuBLAS bf16 on the prefill shapes (SHAPES),
# MID_VARIANTS (default MV and v11-mid) on MID_SHAPES, v12's tile widths and
# ring depths (CFGS, "BNxST ..."), Nsight Compute of the main kernels at
# PROF_SHAPE (PROF=1; PROF_VARIANTS; PROF_REGEX and PROF_COUNT pick other
# kernels, e.g. the prepasses) and their static SASS mix (SASS=1).
# SAN=first (default) | last | 0: the sanitizers before the timings, after
# them, or not at all. Output under $OUT.
set -uo pipefail
source bench/dev-build.sh
t0=$(date +%s)
B=./build-dev/fp4bench
PV=${PV:-v12-prefill}
MV=${MV:-v13-mid}
pn=${PV%%-*}; pn=${pn#v} # 12 or 14: its tile width variable FP4_SM90_V<n>_BN
for v in ${TEST_VARIANTS:-12 13}; do
  GPU_FP4_SM90_ONLY=$v timeout ${TEST_TIMEOUT:-240} ./build-dev/tests/gpu_fp4_sm90 >"$OUT/gpu_fp4_sm90-v$v.txt" 2>&1
  echo "gpu_fp4_sm90 (variant $v): exit $?"; grep -E "CHECK failed" "$OUT/gpu_fp4_sm90-v$v.txt" | head -10; tail -1 "$OUT/gpu_fp4_sm90-v$v.txt"
done
echo "== tests $(( $(date +%s) - t0 )) s"
sanitize() {
for tool in memcheck racecheck; do
  for bn in 128 256; do
    env FP4_SM90_V${pn}_BN=$bn FP4_SM90_KERNEL=$PV timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
      --backend fp4-sm90 --shape 3x200x48,300x2000x48,129x1001x2880,1000x770x6144 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
    echo "$PV BN $bn $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|Race reported|at .*prefill1[24]|FAILED" /tmp/san.log | sort | uniq -c | sort -rn | head -8
  done
done
for tool in ${MID_SAN:-memcheck racecheck}; do
  for sk in 0 3; do
    FP4_SM90_SPLITK=$sk FP4_SM90_KERNEL=$MV timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B run \
      --backend fp4-sm90 --shape 3x200x48,17x768x2880,300x2000x48 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
    echo "$MV splits $sk $tool: exit $? ($(grep -cE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" /tmp/san.log) clean summaries)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|Race reported|at .*prefill1[24]|FAILED" /tmp/san.log | sort | uniq -c | sort -rn | head -6
  done
done
}
[ "${SAN:-first}" = first ] && sanitize
echo "== sanitizers $(( $(date +%s) - t0 )) s"
S=${SHAPES:-1024x2048x6144,2048x2048x6144,4096x2048x6144,8192x2048x6144,8192x8192x8192}
for v in ${VARIANTS:-$PV v8-prefill}; do
  FP4_SM90_KERNEL=$v $B run --shape "$S" --json "$OUT/forced-$v.json" --quiet --max-time 1 --no-ceilings \
    --backend cublas-bf16,fp4-sm90 | grep -E "fp4-sm90|cublas-bf16" | sed "s/^/[$v] /"
done
MS=${MID_SHAPES:-64x2048x6144,128x2048x6144,256x2048x6144,512x2048x6144,1024x2048x6144,256x768x6144,1024x768x6144}
for v in ${MID_VARIANTS:-$MV v11-mid}; do
  FP4_SM90_KERNEL=$v $B run --shape "$MS" --json "$OUT/forced-$v.json" --quiet --max-time 1 --no-ceilings \
    --backend cublas-bf16,fp4-sm90 | grep -E "fp4-sm90|cublas-bf16" | sed "s/^/[$v] /"
done
echo "== timings $(( $(date +%s) - t0 )) s"
[ "${SAN:-first}" = last ] && sanitize && echo "== sanitizers $(( $(date +%s) - t0 )) s"
for c in ${CFGS:-}; do
  FP4_SM90_V12_BN=${c%x*} FP4_SM90_V12_ST=${c#*x} FP4_SM90_KERNEL=v12-prefill $B run --shape "$S" --quiet \
    --max-time 1 --no-ceilings --backend fp4-sm90 | awk -v c="$c" '$5=="fp4-sm90"{print "[v12 " c "] " $2 "x" $3 "x" $4 " " $6 " us"}'
done
if [ "${PROF:-1}" = 1 ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for v in ${PROF_VARIANTS:-$PV v8-prefill}; do
    f="$OUT/ncu-$v-${PROF_SHAPE:-4096x2048x6144}.txt"
    FP4_SM90_KERNEL=$v timeout 150 "$NCU" --clock-control none --kernel-name "regex:${PROF_REGEX:-prefill(8|12|14)_kernel}" \
      --launch-skip 0 --launch-count ${PROF_COUNT:-1} --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum" \
      $B run --backend fp4-sm90 --shape "${PROF_SHAPE:-4096x2048x6144}" --verify-only --no-ceilings --quiet >"$f" 2>&1
    echo "== ncu $v"
    grep -E "Duration|L2 Cache Throughput|Compute \(SM\)|Registers|Issued Warp|No Eligible|pipe_tensor|inst_executed.sum|stalled_.*ratio +[0-9.]+[1-9]" "$f" |
      awk '{$1=$1; print}' | grep -vE "ratio +0(\.[0-9])?[0-9]*$" | cut -c1-120 | head -30
  done
  [ "${SASS:-1}" = 1 ] && bash bench/sass-mix.sh "prefill(8|12|14)_kernel" >"$OUT/sass-mix.txt" 2>&1
  [ "${SASS:-1}" = 1 ] && grep -E "^== |TOTAL|HGMMA|LOP3|BAR|SYNCS|LDS|LDGSTS" "$OUT/sass-mix.txt" | head -60
fi
echo "== done $(( $(date +%s) - t0 )) s"
