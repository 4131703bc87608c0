#!/usr/bin/env bash
# Per-CTA timestamps of v9-mid's main kernel on the H200 (a -DFP4_DEV_STAMPS=ON
# build, bench/stamps_harness.c): start skew against main-loop durations, i.e.
# whether the idle SM time Nsight Compute shows (SMs active 40-59% of the
# kernel's cycles) comes from CTAs starting late or from uneven CTA durations.
# Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
mkdir -p "$OUT" /tmp/cjson
for f in .debs/*.deb; do dpkg -x "$f" /tmp/cjson; done
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
cmake -S . -B build-stamps -DCJSON_ROOT=/tmp/cjson -DFP4_CUDA_ARCHS=90a -DFP4_DEV_STAMPS=ON \
      -DCMAKE_BUILD_TYPE=Release >/tmp/s.log 2>&1 &&
  cmake --build build-stamps -j16 --target fp4stamps >>/tmp/s.log 2>&1 || { tail -30 /tmp/s.log; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
V=${VARIANT:-v9-mid} # v9-mid or v11-mid (same main kernel)
for shape in ${SHAPES:-16x2048x6144 128x2048x6144 256x2048x6144 1024x768x6144}; do
  f="$OUT/stamps-${V%%-*}-$shape.txt"
  FP4_SM90_KERNEL=$V timeout 60 ./build-stamps/fp4stamps ${shape//x/ } >"$f" 2>&1
  echo "$shape: exit $?"; grep -E "fp4stamps|summary" "$f"
done
