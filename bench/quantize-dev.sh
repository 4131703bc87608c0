#!/usr/bin/env bash
# Development run of the GPU NVFP4 quantizer on the device: build the three
# targets it needs, run the bit-exactness test (gpu_quantize must pass), time
# the `quantize` backend on the large and the decode shapes, and (optional,
# QZ_NCU=1) count its instructions with Nsight Compute. Logs go to $OUT.
set -u -o pipefail
OUT=${OUT:-./qzout}
mkdir -p "$OUT" /tmp/cjson
for f in .debs/*.deb; do dpkg -x "$f" /tmp/cjson; done
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
cmake -S . -B build-q -DCJSON_ROOT=/tmp/cjson -DFP4_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release \
    > "$OUT/build.log" 2>&1 &&
  cmake --build build-q -j"$(nproc)" --target fp4bench gpu_quantize test_w4a4 >> "$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "== gpu_quantize"
timeout 120 build-q/tests/gpu_quantize 2>&1 | tee "$OUT/gpu_quantize.txt" | tail -5
rc=${PIPESTATUS[0]}
echo "gpu_quantize: exit $rc"
[ "$rc" = 0 ] || { echo "gpu_quantize FAILED"; exit 1; }
echo "== timing"
timeout 120 build-q/fp4bench run --backend quantize --shape 8192x1x8192,16384x1x4096,16x1x6144,2048x1x6144 \
    --no-ceilings --max-time 2 --json "$OUT/quantize.json" 2>&1 | tee "$OUT/quantize.txt"
if [ "${QZ_NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  echo "== ncu 8192x8192"
  timeout 60 ncu --clock-control none -k regex:fp4_quantize_bf16 --section SpeedOfLight \
      --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
      --metrics smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      build-q/fp4bench run --backend quantize --shape 8192x1x8192 --verify-only --no-ceilings --quiet \
      > "$OUT/ncu-quantize-8192x1x8192.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Compute \(SM\)|inst_executed|dram__bytes|Registers|Achieved Occupancy|Issued Warp|No Eligible" \
      "$OUT/ncu-quantize-8192x1x8192.txt" | head -20
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a "$OUT/gpu.txt"
