#!/usr/bin/env bash
# Build fp4bench on the GPU machine and run its checks and timings in one go.
# Results land under $OUT (at most 8 files come back: keep it to that).
#   bench/device-run.sh check    build, ctest (GPU tests included), sanitizer, seed verify
#   bench/device-run.sh bench    build, the independent cuBLAS script, the recorded runs
#   bench/device-run.sh all      both (over 10 minutes: the device tool's limit per call)
# Called from the device tool with carry [".debs", ".fp4-commit"]: .debs holds
# libcjson1/libcjson-dev .deb files (apt-get download here), unpacked to /tmp/cjson.
set -uo pipefail
mode=${1:-bench}
OUT=${OUT:-/tmp/fp4out}
mkdir -p "$OUT"
log=$OUT/device.log
exec > >(tee -a "$log") 2>&1
echo "== $(date -u +%FT%TZ) commit $(cat .fp4-commit 2>/dev/null || echo unknown) mode $mode"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv

mkdir -p /tmp/cjson
for f in .debs/*.deb; do dpkg -x "$f" /tmp/cjson; done
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

t0=$(date +%s)
cmake -S . -B build-dev -DCJSON_ROOT=/tmp/cjson -DFP4_CUDA_ARCHS="${FP4_ARCHS:-90a}" \
      -DFP4_WERROR=ON -DCMAKE_BUILD_TYPE=Release >/tmp/cmake.log 2>&1 &&
  cmake --build build-dev -j 16 >>/tmp/cmake.log 2>&1
rc=$?
if [ $rc -ne 0 ]; then grep -E "error|warning" -A3 /tmp/cmake.log | head -60; exit 1; fi
echo "== build $(( $(date +%s) - t0 )) s"
B=./build-dev/fp4bench
$B --version
$B list

if [ "$mode" = bench ]; then
  echo "== independent script: torch cuBLAS bf16, same rules (issue 3)"
  timeout 150 python3 bench/independent_bf16.py 4096 2048 6144 8192 8192 8192
fi

if [ "$mode" != bench ]; then
echo "== ctest"
(cd build-dev && ctest --output-on-failure -j 4 --timeout 300 ${FP4_CTEST_ARGS:-}) >/tmp/ctest.log 2>&1
grep -E "tests passed|Failed|Skipped|\*\*\*" /tmp/ctest.log | head -30
grep -B2 -A30 "FAILED\|CHECK failed" /tmp/ctest.log | head -80

echo "== verify every backend on odd and seed shapes"
$B run --preset odd --backend all --verify-only --quiet --no-ceilings | tail -n +8
$B run --preset seed --backend all --verify-only --quiet --no-ceilings | tail -n +8

if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer (memcheck, racecheck) on a few shapes"
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 $B run --backend fp4-sm90,cuda-ref \
      --shape 3x200x48,17x768x2880,129x256x6144 --verify-only --quiet --no-ceilings >/tmp/san.log 2>&1
    echo "$tool: exit $? ($(grep -c "ERROR SUMMARY: 0 errors" /tmp/san.log) clean summaries)"
    grep -m5 "=========" /tmp/san.log | grep -v "ERROR SUMMARY: 0" | head -5
  done
fi
fi
[ "$mode" = check ] && exit 0

echo "== benchmarks"
# the seed suite twice (run-to-run reproducibility), with every sample and the
# plain-launch figure, then hot L2, the issue-4 targets, the M sweep and the models
$B run --preset seed --json "$OUT/seed-cold-1.json" --samples --launch --quiet
$B run --preset seed --json "$OUT/seed-cold-2.json" --samples --launch --quiet | tail -n 4
$B compare "$OUT/seed-cold-1.json" "$OUT/seed-cold-2.json" --threshold 0.02
$B run --preset seed --hot --json "$OUT/seed-hot.json" --quiet --no-ceilings | tail -n 4
# targets: the quantize row at 8192x8192x8192 is the quantizer's target (M*K = 64M);
# cuda-ref is left out here (seconds a call at 8192^3; it verifies, it is not a contender)
$B run --preset targets --json "$OUT/targets.json" --quiet --max-time 4 \
   --backend cublas-bf16,cublaslt-fp8,cublaslt-nvfp4,fp4-sm90,w4a4-sm90,quantize
$B run --preset sweep-m --json "$OUT/sweep-m.json" --quiet --max-time 3 --no-ceilings \
   --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | tail -n 70
$B run --preset models --json "$OUT/models.json" --quiet --max-time 3 --no-ceilings \
   --backend cublas-bf16,cublaslt-fp8,fp4-sm90 | tail -n 4
echo "== done $(( $(date +%s) - t0 )) s"
