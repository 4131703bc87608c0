# Sourced (not run) by the device scripts: cJSON from the carried .debs, then
# the Release build in build-dev (sm_90a unless FP4_ARCHS says otherwise,
# warnings are errors); exits the caller on a build failure. Sets OUT (created)
# and LD_LIBRARY_PATH; with DEV_LOG=1 (the default) the caller's output also
# goes to $OUT/device.log. FP4_CMAKE_EXTRA: more configure arguments, e.g.
# -DCMAKE_CUDA_FLAGS=-DP9_TOK_VEC=1 for a kernel switch not yet on by default.
OUT=${OUT:-/tmp/fp4out}
mkdir -p "$OUT" /tmp/cjson
for f in .debs/*.deb; do dpkg -x "$f" /tmp/cjson; done
export LD_LIBRARY_PATH=/tmp/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
[ "${DEV_LOG:-1}" = 1 ] && exec > >(tee -a "$OUT/device.log") 2>&1
fp4_build_t0=$(date +%s)
cmake -S . -B build-dev -DCJSON_ROOT=/tmp/cjson -DFP4_CUDA_ARCHS="${FP4_ARCHS:-90a}" -DFP4_WERROR=ON \
      -DCMAKE_BUILD_TYPE=Release ${FP4_CMAKE_EXTRA:-} >/tmp/c.log 2>&1 && cmake --build build-dev -j16 >>/tmp/c.log 2>&1 ||
  { grep -E "error|warning" -A3 /tmp/c.log | head -40; exit 1; }
echo "== build $(( $(date +%s) - fp4_build_t0 )) s"
