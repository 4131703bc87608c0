#!/usr/bin/env bash
# Development run for fp4-sm90 v5-prefill on the H200: standalone nvcc build of
# bench/prefill5_harness.cu (no CMake, no cJSON), exactness checks, a
# compute-sanitizer pass on small shapes, timings against v2 and cuBLAS bf16,
# and ablation builds (P5_DEV_ABLATE: 1 = no B dequantization, 3 = none; wrong
# results, timing only). Logs go to $OUT (or ./p5out).
set -u -o pipefail
OUT=${OUT:-./p5out}
mkdir -p "$OUT"
B=/tmp/p5build
mkdir -p $B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
SRCS="bench/prefill5_harness.cu src/kernels/fp4_sm90_prefill5.cu src/kernels/fp4_sm90_prefill.cu src/format/nvfp4.c src/core/status.c src/reference/gemm_ref.c"
FLAGS="-gencode=arch=compute_90a,code=sm_90a -O3 -lineinfo -I include -I src -D_POSIX_C_SOURCE=200809L"
for a in 1 3; do
  nvcc $FLAGS -DP5_DEV_ABLATE=$a -DP5_NO_CUBLAS -o $B/h$a $SRCS -lpthread > $B/build$a.log 2>&1 &
done
nvcc $FLAGS -Xptxas -v -o $B/h $SRCS -lcublas -lpthread > $B/build.log 2>&1 ||
  nvcc $FLAGS -DP5_NO_CUBLAS -Xptxas -v -o $B/h $SRCS -lpthread > $B/build.log 2>&1 || { cat $B/build.log; exit 1; }
grep -E "prefill5|registers|spill|C75|warning|error" $B/build.log | tee "$OUT/ptxas.txt"
echo "== check"
timeout 80 $B/h check 2>&1 | tee "$OUT/check.txt"
echo "== time"
timeout 80 $B/h time 2>&1 | tee "$OUT/time.txt"
echo "== sanitizer (small shapes)"
timeout 60 compute-sanitizer --tool memcheck $B/h small 2>&1 | tail -8 | tee "$OUT/sanitizer.txt"
wait
echo "== ablations"
for a in 1 3; do
  [ -x $B/h$a ] && (timeout 25 $B/h$a ablate 2>&1 | grep ABLATE | sed "s/^/[abl$a] /" | tee -a "$OUT/ablate.txt")
done
if [ "${P5_NCU:-1}" = 1 ]; then
  echo "== ncu (4096x2048x6144, one launch per tile width)"
  timeout 50 ncu --clock-control none -k regex:prefill5 --section SpeedOfLight --section SchedulerStats \
      --section WarpStateStats --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg \
      $B/h one > "$OUT/ncu.txt" 2>&1
  grep -E "prefill5_kernel|Duration|Throughput|Issue Slots|Issued Warp|No Eligible|Active Warps|hmma|inst_executed|cycles_elapsed|Stall|stall" "$OUT/ncu.txt" | head -40
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv | tee -a "$OUT/gpu.txt"
echo "== summary"
grep -E "FAIL|ALL PASS|FAILED" "$OUT/check.txt" | head -20
grep TIME "$OUT/time.txt"
cat "$OUT/ablate.txt" 2>/dev/null
