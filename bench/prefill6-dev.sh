#!/usr/bin/env bash
# Development run for fp4-sm90 v6-prefill on the H200 (modelled on
# bench/prefill5-dev.sh): standalone nvcc build of bench/prefill5_harness.cu with
# -DP6_HARNESS (no CMake, no cJSON), exactness checks of v6 (every tail shape
# against the exact CPU reference, NaN-poisoned output, bit equality with v5),
# v5's own check again (its file now shares fp4_sm90_wgmma.cuh), compute-sanitizer
# memcheck on small shapes, timings of v5, v6 (prepass included, main kernel
# alone, prepass alone) and cuBLAS bf16 interleaved in one process, ablation
# builds (P6_DEV_ABLATE: 1 = no B copies, 2 = no A dequantization, 3 = both;
# wrong results, timing only) and Nsight Compute on one call.
# Logs go to $OUT (or ./p6out); at most 7 files (the device tool returns 8).
# P6_QUICK=1 skips v5's check, the sanitizer, the ablations and ncu; P6_V5CHECK=0,
# P6_ABLATE=0 and P6_NCU=0 skip one each.
set -u -o pipefail
OUT=${OUT:-./p6out}
mkdir -p "$OUT"
B=/tmp/p6build
mkdir -p $B
LOG="$OUT/build.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$LOG"
FLAGS="-gencode=arch=compute_90a,code=sm_90a -O3 -lineinfo -I include -I src -D_POSIX_C_SOURCE=200809L"
CSRCS="src/format/nvfp4.c src/core/status.c src/reference/gemm_ref.c"
CUBLAS=-lcublas
build_harness() { # $1: extra flags
  nvcc $FLAGS $1 -DP6_HARNESS -c -o $B/h6.o bench/prefill5_harness.cu > $B/h6.log 2>&1 &
  nvcc $FLAGS $1 -c -o $B/h5.o bench/prefill5_harness.cu > $B/h5.log 2>&1 &
  wait
}
start=$(date +%s)
build_harness "" &
nvcc $FLAGS -Xptxas -v -c -o $B/p5.o src/kernels/fp4_sm90_prefill5.cu > $B/p5.log 2>&1 &
nvcc $FLAGS -c -o $B/p2.o src/kernels/fp4_sm90_prefill.cu > $B/p2.log 2>&1 &
nvcc $FLAGS -Xptxas -v -c -o $B/p6.o src/kernels/fp4_sm90_prefill8.cu > $B/p6.log 2>&1 &
for a in 1 2 3; do
  nvcc $FLAGS -DP6_DEV_ABLATE=$a -c -o $B/p6a$a.o src/kernels/fp4_sm90_prefill8.cu > $B/p6a$a.log 2>&1 &
done
for c in $CSRCS; do
  nvcc $FLAGS -c -o $B/$(basename $c .c).o $c > $B/$(basename $c .c).log 2>&1 &
done
wait
COBJS="$B/nvfp4.o $B/status.o $B/gemm_ref.o"
link() { nvcc $FLAGS -o "$@" $COBJS $CUBLAS -lpthread; }
if ! link $B/h6 $B/h6.o $B/p5.o $B/p2.o $B/p6.o > $B/link.log 2>&1; then
  echo "link with cuBLAS failed, building without:" | tee -a "$LOG"; cat $B/link.log | tee -a "$LOG"
  CUBLAS=""
  build_harness "-DP5_NO_CUBLAS"
  link $B/h6 $B/h6.o $B/p5.o $B/p2.o $B/p6.o > $B/link.log 2>&1 || { cat $B/*.log; exit 1; }
fi
link $B/h5 $B/h5.o $B/p5.o $B/p2.o >> $B/link.log 2>&1 || { cat $B/*.log; exit 1; }
for a in 1 2 3; do link $B/h6a$a $B/h6.o $B/p5.o $B/p2.o $B/p6a$a.o >> $B/link.log 2>&1; done
echo "build: $(( $(date +%s) - start )) s" | tee -a "$LOG"
{ echo "== ptxas (v6, v5)"; grep -hE "Compiling entry|registers|spill|C75|warning|error" $B/p6.log $B/p5.log | sed 's/ for .sm_90a.//'; } | tee -a "$LOG"
{
  echo "== SASS opcode counts, v6 main kernel 256/s6 cp.async and bulk, and the prepass"
  for f in '_Z24fp4_sm90_prefill8_kernelILi256ELi1ELi6ELb0EEvPKhS1_S1_P13__nv_bfloat16iiiif' '_Z24fp4_sm90_prefill8_kernelILi256ELi1ELi6ELb1EEvPKhS1_S1_P13__nv_bfloat16iiiif' '_Z27fp4_sm90_prefill8_dq_kernelPKhS0_P5uint4l'; do
    echo "-- $f"
    cuobjdump -sass -fun "$f" $B/p6.o 2>/dev/null | grep -oE '^ +/\*[0-9a-f]+\*/ +[A-Z][A-Z0-9.]*' | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '
    echo
  done
} >> "$LOG" 2>&1

echo "== check6"
timeout 200 $B/h6 check6 > "$OUT/check6.txt" 2>&1; echo "check6 rc=$?" >> "$OUT/check6.txt"
grep -E "FAIL|ALL PASS|FAILED|rc=" "$OUT/check6.txt" | head -20
echo "== time6"
timeout 150 $B/h6 time6 > "$OUT/time6.txt" 2>&1; echo "time6 rc=$?" >> "$OUT/time6.txt"
cat "$OUT/time6.txt" | grep -vE "^v6 .* PASS"
if [ "${P6_QUICK:-0}" != 1 ]; then
  if [ "${P6_V5CHECK:-1}" = 1 ]; then
    echo "== v5 check (prefill5_harness check: its file now uses fp4_sm90_wgmma.cuh)"
    timeout 150 $B/h5 check > "$OUT/check5.txt" 2>&1; echo "check5 rc=$?" >> "$OUT/check5.txt"
    grep -cE "PASS" "$OUT/check5.txt"; grep -E "FAIL|ALL PASS|rc=" "$OUT/check5.txt" | head
  fi
  echo "== sanitizer (small shapes, memcheck)"
  timeout 150 compute-sanitizer --tool memcheck $B/h6 small6 > "$OUT/sanitizer.txt" 2>&1
  echo "sanitizer rc=$?" >> "$OUT/sanitizer.txt"
  tail -4 "$OUT/sanitizer.txt"
  if [ "${P6_ABLATE:-1}" = 1 ]; then
    echo "== ablations (main kernel only)"
    for a in 1 2 3; do
      [ -x $B/h6a$a ] && timeout 60 $B/h6a$a ablate6 $a 2>&1 | tee -a "$OUT/ablate6.txt"
    done
  fi
  if [ "${P6_NCU:-1}" = 1 ]; then
  echo "== ncu (4096x2048x6144: v6 prepass + main 256/s6 cp.async, main 256/s6 bulk, v5)"
  timeout 90 ncu --clock-control none -k regex:prefill --section SpeedOfLight --section WarpStateStats \
      --section MemoryWorkloadAnalysis \
      --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      $B/h6 one6 > "$OUT/ncu.txt" 2>&1
  grep -E "prefill[56]_(dq_)?kernel|Duration|Throughput|hmma|inst_executed|mem_shared|lts__t_sectors|dram__bytes|Stall Long|Stall Barrier|Stall Math|Issued Warp" "$OUT/ncu.txt" | head -60
  fi
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv | tee -a "$LOG"
echo "== summary"
grep -E "ALL PASS|FAILED|rc=" "$OUT"/check6.txt "$OUT"/check5.txt "$OUT"/time6.txt 2>/dev/null
grep -E "ERROR SUMMARY|ALL PASS|FAILED" "$OUT/sanitizer.txt" 2>/dev/null
grep SUMMARY6 "$OUT/time6.txt"
grep -E "ABL6|main only" "$OUT/ablate6.txt" 2>/dev/null
echo "total: $(( $(date +%s) - start )) s"
