#!/usr/bin/env bash
# bench/device-run.sh: build fp4bench on a machine with an NVIDIA Hopper GPU and
# check it, time it, compare it with an older tree or profile it. Run it from
# the repository root; `bench/device-run.sh help` prints the usage below.
#
# Every mode goes on after a failing step (a failed build stops the steps that
# need its binary) and exits 1 at the end if any step failed. It only reads
# the GPU's state: clocks, power limits and other settings are left as they are.
set -uo pipefail

usage() {
  cat <<'EOF'
usage: bench/device-run.sh MODE [MODE ...]   (from the repository root)

Several modes run one after the other on one build. Modes:
  build    configure and build build-dev only
  check    build; ctest (GPU tests included); every backend verified on the odd
           and seed presets; compute-sanitizer memcheck and racecheck on each
           fp4-sm90 kernel forced on small tail shapes, and on the GPU
           quantizer test
  bench    build; the independent cuBLAS bf16 cross-check (PyTorch); the
           baseline: one fp4bench run (M sweep, prefill-wide and decode
           bandwidth shapes; cublas-bf16, cublaslt-fp8, fp4-sm90)
  compare  build this tree and OLD_TREE; both binaries on the seed and sweep-m
           presets (old/new alternated), then fp4bench compare on each pair
  profile  build; Nsight Compute on the fp4-sm90 kernels for SHAPES
           (--clock-control none: the GPU keeps its own clocks)
  engine   build; the measurement engine's acceptance: the seed preset twice
           (medians within 2% on rows over 10 us, 3% on 5-10 us rows);
           cublas-bf16 at 64x768x6144 in the seed preset and beside fp4-sm90
           alone (within 2%); the planted faults (tests/plugins/plugin_fault.c:
           a backend ignoring the copy index, an off-by-one-code quantizer, a 5%
           wrong fp8 alpha) each FAILED with exit 1
  moe      moe-stream, then moe-models: every run of bench/moe-runs.txt
  multigpu build; the NCCL and multi-GPU GPU tests, fp4bench nccl on every GPU
           (JSON in OUT)
  moe-wide build; the grouped kernel's test with every case on the wide path
           and its timing (FP4_SM90_MOE_PATH=wide), Nsight Compute on the wide
           kernel, then fp4bench moe beside the baselines: GLM-5 gate_up/down
           at T = 1 .. 8192, the layer, skewed routing (JSON in OUT)
  final    build; the MoE and multi-GPU GPU tests (FINAL_TESTS), the baseline,
           then (unless FINAL_SHORT is set) fp4bench layer
           (TP, EP, attention) and run --gpus on every GPU, GLM-5 gate_up at
           T = 512 and 8192 beside both baselines (JSON files in OUT)
  moe-stream build; the MoE GPU tests, moe-san, the grouped kernel timed alone
           (FP4_MOE_TIME=1), then fp4bench moe beside the baselines: GLM-5
           gate_up/down at T = 1 .. 8192, balanced routing at T = 512 and 2048,
           skewed routing, the layer (JSON in OUT)
  moe-san  build; memcheck and racecheck of moe-fp4-sm90 on small layers:
           random and skewed routing (gate_up, down), the whole layer at
           K = 2880 (SwiGLU) and with the W4A4 prepass (SiLU)
  moe-models build; fp4bench moe: GLM-5 in W4A16 beside moe-cublas-bf16,
           gpt-oss-120b gate_up, down and the layer (JSON in OUT)
  moe-json build; only the fp4bench moe runs of moe (every run of
           bench/moe-runs.txt, no tests or sanitizers first)
  moe-json-stream  the first half of moe-json (glm5, glm5-balanced, glm5-skewed,
           glm5-layer)
  refresh  build; every result file of bench/results/<gpu>/ (the baseline and
           the runs of bench/moe-runs.txt), GLM-5 first, at MAX_TIME=1 unless
           set; with DEADLINE=S only the steps that fit S seconds from the
           start (the others are reported failed): for a time-limited GPU;
           REFRESH="NAME ..." runs only those
  moe-time build; the grouped kernel alone (FP4_MOE_TIME=1: its checks, then
           GLM-5 timed), as in moe-stream
  moe-quick the grouped kernel's test and timing, fp4bench moe GLM-5 T = 1, 512
  moe-fixed build; moe-fp4-sm90 at T = 1 (W4A16, random routing, E = 256,
           top-8) with H and I varied, gate_up and down: time against the
           weight bytes read, and a line fitted to each (the intercept is the
           cost of a launch whatever its bytes, the slope the streaming rate)
  tensor-rate build; fp4_tensor_rate (bench/tensor_rate.cu): the bf16 tensor
           rate of mma.sync and of wgmma (A from registers or shared memory)
           at N = 8 .. 32, into OUT/tensor-rate.txt
  ifetch   build; fp4_ifetch (bench/ifetch.cu): the SM clocks of straight-line
           kernels of 16, 64 and 160 KB of code run again, after another
           kernel, and after an L2 flush, into OUT/ifetch.txt
  sass     build; the SASS of every fp4-sm90 kernel file (cuobjdump) with each
           instruction's scheduling control decoded (bench/sass_ctl.py:
           stall, scoreboards set and waited on) into OUT/sass, the runs
           of global loads that share one scoreboard, and the waits on a
           load issued fewer than 64 instructions before
  moe-ab   this tree beside each of ALT_TREES (source folders): their MoE
           tests, then the same fp4bench moe rows (AB_TOKENS [1,512,1024,2048])
  moe-kab  a kernel A/B against ALT_TREE and ALT_TREES (source folders,
           their grouped-kernel test built into build-alt1, build-alt2, ...):
           this tree's grouped-kernel test with every case on the wide path,
           memcheck and racecheck of it forced wide on a small layer, then
           every tree's grouped kernel alone (FP4_MOE_TIME=1; its checks
           first) alternated KAB_ROUNDS [2] times each, and this tree's with
           every timing case on the wide path; FP4_MOE_TIME_CASES=a,b times
           only the cases whose names hold one of the strings
  moe-prof Nsight Compute on both MoE paths: stall reasons and the SASS
           source page (CSV) of each of PROF_CASES [stream-t512 stream-t64
           wide-t512; also stream-t1]
  moe-tree ALT_TREE names another source tree: built into build-alt, its
           wide MoE path tested and timed beside this tree's
  moe-alt  MOE_ALT names another src/kernels/sm90/moe.cu: it replaces the
           tree's, the tests are rebuilt, its own test and timing run
  all      check, then bench
  ctest, verify, sanitize         the three parts of check alone (ctest, the
           whole suite with the CLI tests on the GPU, takes over 6 minutes
           on an H100: give it a run of its own)
  gpu-tests build; only the tests/gpu_*.c programs (about 1 minute)
  independent, baseline           the two parts of bench alone

environment (defaults in brackets):
  OUT          results folder [/tmp/fp4out]; one log (device-run.log) plus
               the JSON/report files of the mode
  FP4_ARCHS    CUDA architectures to build [90a]
  CJSON_DEBS   a folder of libcjson .deb files (libcjson1, libcjson-dev),
               unpacked into CJSON_PREFIX [/tmp/cjson] when libcjson-dev is
               not installed [.debs]
  MAX_TIME     fp4bench --max-time per measurement, seconds
               [2 for bench and the MoE runs, 1 for compare and refresh, 3 for engine]
  DEADLINE     refresh: seconds from the start within which a step must fit
  REFRESH      refresh: only these results ("baseline glm5-layer ...")
  BASELINE_TIMEOUT  seconds the baseline run may take [420]
  AB_CHECK     moe-ab: "first" checks only this tree's gpu_moe_kernel [all]
  FP4_CTEST_ARGS  more ctest arguments (check), e.g. "-E cli_"
  SAN_CASES    sanitizer cases, "kernel:MxNxK,... kernel:..." (check)
               [decode, mid, prefill and prefill-wide on tail shapes]
  SAN_TIMEOUT  seconds per sanitizer run [240]
  COMPARE_SHAPES  compare: MxNxK,... timed instead of the seed and sweep-m
               presets (old, new, new, old: two comparisons)
  OLD_TREE     compare: a folder with the source of the older commit, e.g.
                 bench/alt-tree.sh sm90-experiments .old
  SHAPES       profile: MxNxK,... [16x8192x8192,256x2048x6144,4096x2048x6144,8192x8192x8192]
  FP4_SM90_KERNEL  profile only: force this fp4-sm90 kernel (decode, mid,
               prefill, prefill-wide) instead of the built-in choice; every
               other mode clears all FP4_SM90_* variables first
  NCU_SET      profile: Nsight Compute section set [detailed]

The commit is read from .fp4-commit when there is one (the tree may be a copy
without .git), else from git.
EOF
}

modes=("$@")
[ ${#modes[@]} -gt 0 ] || { usage >&2; exit 2; }
for mode in "${modes[@]}"; do
  case "$mode" in
    build | check | bench | compare | profile | engine | moe | moe-alt | moe-wide | moe-tree | moe-prof | moe-stream | moe-san | moe-models | moe-json | moe-json-stream | refresh | moe-time | moe-quick | moe-fixed | moe-ab | moe-kab | tensor-rate | ifetch | sass | multigpu | final | all) ;;
    ctest | gpu-tests | verify | sanitize | independent | baseline) ;;
    help | -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
mode="${modes[*]}"
[ -f CMakeLists.txt ] && [ -d bench ] || { echo "run from the repository root" >&2; exit 2; }

OUT=${OUT:-/tmp/fp4out}
mkdir -p "$OUT"
log=$OUT/device-run.log
tmp=$(mktemp -d /tmp/fp4run.XXXXXX) # scratch outputs that are summarized, not kept
failed=()

# say: a line for the terminal and the log. Long outputs go to the log only
# (>>"$log"), so the terminal shows summaries and the log has everything.
say() { printf '%s\n' "$*" | tee -a "$log"; }
fail() { failed+=("$1"); say "!! FAILED: $1"; }

commit=$(cat .fp4-commit 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
say "== $(date -u +%FT%TZ) bench/device-run.sh $mode, commit $commit, host $(hostname)"

# A forced kernel or split count left in the caller's environment would
# silently change what the tests, baseline and comparison measure; profile
# keeps FP4_SM90_KERNEL, its way to pick the kernel.
for v in $(compgen -e | grep '^FP4_SM90_'); do
  [[ " $mode " == *" profile "* ]] && [ "$v" = FP4_SM90_KERNEL ] && continue
  say "note: clearing $v=${!v} from the environment"
  unset "$v"
done

# ---- the GPU, read only --------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
    --format=csv 2>&1 | tee -a "$log"
else
  say "nvidia-smi not found: no GPU information"
fi

# ---- cJSON ------------------------------------------------------------------------------
cmake_args=(-DFP4_CUDA_ARCHS="${FP4_ARCHS:-90a}" -DFP4_WERROR=ON -DCMAKE_BUILD_TYPE=Release)
CJSON_DEBS=${CJSON_DEBS:-.debs}
if [ -f /usr/include/cjson/cJSON.h ]; then
  say "cJSON: the system's libcjson-dev"
elif compgen -G "$CJSON_DEBS/*.deb" >/dev/null; then
  prefix=${CJSON_PREFIX:-/tmp/cjson}
  mkdir -p "$prefix"
  for f in "$CJSON_DEBS"/*.deb; do dpkg -x "$f" "$prefix" || fail "unpack $f"; done
  cmake_args+=(-DCJSON_ROOT="$prefix")
  for d in "$prefix"/usr/lib/*-linux-gnu; do LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}; done
  export LD_LIBRARY_PATH
  say "cJSON: unpacked $CJSON_DEBS/*.deb into $prefix"
else
  say "cJSON: no libcjson-dev and no .deb files in $CJSON_DEBS (cmake will stop if it finds none)"
fi

# ---- build ------------------------------------------------------------------------------
# build SRC DIR [TARGET...]: configure and build (every target unless some are
# named); the compiler's output stays in $tmp, only its errors reach the log
# (warnings are errors: FP4_WERROR).
build() {
  local src=$1 dir=$2 t0=$SECONDS out=$tmp/build-${2##*/}.txt targets=() target
  shift 2
  for target in "$@"; do targets+=(--target "$target"); done
  # the binary's commit stamp: SRC/.fp4-commit when the caller wrote one (a
  # copy of the tree may sit inside a git checkout of another revision)
  local stamp
  stamp=$(cat "$src/.fp4-commit" 2>/dev/null || true)
  if cmake -S "$src" -B "$dir" "${cmake_args[@]}" >"$out" 2>&1 &&
     FP4_COMMIT=$stamp cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >>"$out" 2>&1; then
    say "== build $src -> $dir${targets[*]:+ (${targets[*]})}: $((SECONDS - t0)) s"
    grep -E "^-- (NCCL|MPI):" "$out" | tee -a "$log"
    return 0
  fi
  say "== build $src -> $dir failed after $((SECONDS - t0)) s; its errors:"
  grep -E "error|warning|Error" -A3 "$out" | head -80 | tee -a "$log"
  return 1
}

B=./build-dev/fp4bench
built=0
if build . build-dev; then
  built=1
  $B --version 2>&1 | tee -a "$log"
  $B list 2>&1 | tee -a "$log"
else
  fail "build of build-dev"
fi

# ---- helpers for fp4bench output -------------------------------------------------------
# rows_summary CSV: "N ok, N unsupported, N FAILED" and the rows that are not ok
# (columns: label,m,n,k,backend,variant,state,reason,...; the reason is cut
# at its first comma, the log has the whole table).
rows_summary() {
  awk -F, 'NR > 1 { n[$7]++; if ($7 != "ok") bad = bad sprintf("    %s %sx%sx%s %s: %s\n", $5, $2, $3, $4, $7, $8) }
           END { printf "%d ok, %d unsupported, %d FAILED\n%s", n["ok"], n["unsupported"], n["FAILED"], bad }' "$1"
}

# ---- check ------------------------------------------------------------------------------
check_ctest() {
  say "== ctest ${1:+$1 }(GPU tests included; the whole output is in the log)"
  # written straight into OUT: a run stopped by its time limit still returns
  # the tests finished until then
  local t=$OUT/ctest${1:+-$1}.txt
  (cd build-dev && ctest --output-on-failure -j 4 --timeout 300 ${1:+-R "^$1"} ${FP4_CTEST_ARGS:-}) >"$t" 2>&1
  local rc=$?
  cat "$t" >>"$log"
  grep -E "tests passed|tests failed" "$t" | tee -a "$log"
  # the GPU tests by name (the quantizer's among them), then any test not passed
  grep -E "Test +#[0-9]+: gpu_" "$t" | sed 's/^ *[0-9]*\/[0-9]* *//' | tee -a "$log"
  grep -E "Test +#[0-9]+: " "$t" | grep -vE "Passed|: gpu_" | sed 's/^ *[0-9]*\/[0-9]* *//' | tee -a "$log"
  [ $rc -eq 0 ] || fail "ctest (exit $rc)"
  # a GPU test that exits 77 is reported as skipped, and ctest still exits 0
  if grep -E "Test +#[0-9]+: gpu_" "$t" | grep -q "Skipped"; then fail "GPU tests skipped (no GPU seen)"; fi
}

check_verify() {
  local p rc
  for p in odd seed; do
    timeout 600 $B run --preset $p --backend all --verify-only --quiet --no-ceilings \
      --csv "$tmp/verify-$p.csv" >>"$log" 2>&1
    rc=$?
    say "verify --preset $p, every backend: exit $rc; $(rows_summary "$tmp/verify-$p.csv" 2>/dev/null)"
    [ $rc -eq 0 ] || fail "verify --preset $p (exit $rc)"
  done
}

# san_verdict TOOL FILE: "clean" when the tool's summary line reports nothing
san_verdict() {
  local line
  if [ "$1" = memcheck ]; then
    line=$(grep -E "ERROR SUMMARY:" "$2" | tail -1)
    [[ $line == *"ERROR SUMMARY: 0 errors"* ]]
  else
    line=$(grep -E "RACECHECK SUMMARY:" "$2" | tail -1)
    [[ $line == *"RACECHECK SUMMARY: 0 hazards"* ]]
  fi
  local clean=$?
  echo "${line#*========= }"
  return $clean
}

# one_variant_ok KERNEL VARIANTS: every row ran the forced kernel, by its name
# or its numbered name (the ones bench/perf_table.py reads too). An unknown
# FP4_SM90_KERNEL falls back to the built-in choice and would check another kernel.
one_variant_ok() {
  local k=$1 v numbered
  case $k in
    decode) numbered=v4-decode ;;
    mid) numbered=v11-mid ;;
    prefill) numbered=v8-prefill ;;
    prefill-wide) numbered=v16-prefill ;;
    *) numbered=$k ;;
  esac
  [ -n "$2" ] || return 1
  for v in ${2//\// }; do [ "$v" = "$k" ] || [ "$v" = "$numbered" ] || return 1; done
}

check_sanitizer() {
  local SAN
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$SAN" ]; then fail "compute-sanitizer not found"; return; fi
  # Small shapes that the forced kernel accepts: M and N not multiples of the
  # tiles, K with a tail past the 64/128-wide K steps (48, 176, 496), K splits
  # (6144, 2880). Large K on the large-M kernels makes racecheck very slow.
  local cases=${SAN_CASES:-"decode:3x200x48,12x200x2080,17x768x2880 mid:129x256x6144,200x1001x2880,77x1001x176 prefill:2048x384x2880,2100x200x176 prefill-wide:2048x4096x176,2100x4100x496"}
  local tool kc k shapes rc summary variants verdict t=$tmp/san.txt csv=$tmp/san.csv
  say "== compute-sanitizer ($SAN), one line per tool and kernel"
  for tool in memcheck racecheck; do
    for kc in $cases; do
      k=${kc%%:*} shapes=${kc#*:}
      rm -f "$csv"
      FP4_SM90_KERNEL=$k timeout -k 10 "${SAN_TIMEOUT:-240}" "$SAN" --tool $tool --error-exitcode 9 \
        $B run --backend fp4-sm90 --shape "$shapes" --verify-only --quiet --no-ceilings --csv "$csv" >"$t" 2>&1
      rc=$?
      { echo "---- $tool FP4_SM90_KERNEL=$k $shapes (first 200 lines)"; head -200 "$t"; } >>"$log"
      variants=$(awk -F, 'NR > 1 { print $6 }' "$csv" 2>/dev/null | sort -u | paste -sd/ -)
      summary=$(san_verdict $tool "$t") && verdict=clean || verdict=NOT-CLEAN
      say "$(printf '%-9s %-13s exit %-3s %-9s %s | ran %s; rows %s' $tool "$k" $rc $verdict \
        "${summary:-no summary}" "${variants:-nothing}" "$(rows_summary "$csv" 2>/dev/null | head -1)")"
      [ $rc -eq 0 ] && [ $verdict = clean ] || fail "$tool $k (exit $rc, $verdict)"
      # a shape the kernel did not run (unsupported) was not checked either
      if [ "$(awk -F, 'NR > 1 && $7 != "ok"' "$csv" 2>/dev/null | wc -l)" -gt 0 ] || [ ! -s "$csv" ]; then
        fail "$tool $k: not every shape ran"
      elif ! one_variant_ok "$k" "$variants"; then
        fail "$tool $k: FP4_SM90_KERNEL=$k ran ${variants:-nothing}, not that kernel (unknown name?)"
      fi
    done
    # the GPU quantizer's own test (odd shapes, bit-exact against the host)
    timeout -k 10 "${SAN_TIMEOUT:-240}" "$SAN" --tool $tool --error-exitcode 9 \
      ./build-dev/tests/gpu_quantize build-dev/tests >"$t" 2>&1
    rc=$?
    { echo "---- $tool gpu_quantize (first 200 lines)"; head -200 "$t"; } >>"$log"
    summary=$(san_verdict $tool "$t") && verdict=clean || verdict=NOT-CLEAN
    say "$(printf '%-9s %-13s exit %-3s %-9s %s' $tool gpu_quantize $rc $verdict "${summary:-no summary}")"
    [ $rc -eq 0 ] && [ $verdict = clean ] || fail "$tool gpu_quantize (exit $rc, $verdict)"
  done
}

mode_check() {
  check_ctest
  check_verify
  check_sanitizer
}

# ---- bench ------------------------------------------------------------------------------
mode_bench() {
  mode_independent
  mode_baseline
}

mode_independent() {
  local rc
  # torch.mm with none of fp4bench's code, on fp4bench's timing rules: are
  # the cublas-bf16 numbers that every ratio divides by plausible?
  say "== independent cross-check: torch cuBLAS bf16 on NVFP4-valued operands"
  timeout 150 python3 bench/independent_bf16.py 4096 2048 6144 8192 8192 8192 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || fail "independent_bf16.py (exit $rc)"
}

mode_baseline() {
  local rc
  # The baseline in one run, so that every row shares the ceilings, the
  # clocks and the interleaved rounds: the M sweep on both seed (N, K) pairs,
  # the prefill-wide shapes (N >= 4096) and the decode bandwidth shapes.
  say "== baseline: $OUT/baseline.json"
  timeout "${BASELINE_TIMEOUT:-420}" $B run --preset sweep-m \
    --shape 4096x4096x4096,8192x8192x8192,2048x28672x4096,4096x8192x8192,16x8192x8192,16x28672x4096 \
    --backend cublas-bf16,cublaslt-fp8,fp4-sm90 --max-time "${MAX_TIME:-2}" --quiet \
    --json "$OUT/baseline.json" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || fail "baseline run (exit $rc; the JSON holds the rows written until then)"
}

# ---- compare ----------------------------------------------------------------------------
mode_compare() {
  if [ -z "${OLD_TREE:-}" ] || [ ! -f "${OLD_TREE}/CMakeLists.txt" ]; then
    fail "compare: OLD_TREE must name a source tree (got '${OLD_TREE:-}')"
    return
  fi
  # Without this, CMake's `git rev-parse` in OLD_TREE would find this
  # repository's .git above it and stamp the old binary with the new commit;
  # OLD_TREE/.fp4-commit then names the old one.
  local old_abs
  old_abs=$(cd "$OLD_TREE" && pwd)
  if ! GIT_CEILING_DIRECTORIES=$(dirname "$old_abs") build "$OLD_TREE" build-old; then
    fail "build of $OLD_TREE into build-old"
    return
  fi
  local O=./build-old/fp4bench
  say "old: $($O --version 2>&1 | head -1); new: $($B --version 2>&1 | head -1)"
  local common=(--backend cublas-bf16,fp4-sm90 --quiet --no-ceilings --max-time "${MAX_TIME:-1}")
  # old, new, new, old: a slow drift of the GPU (heat, clocks) favours neither
  local step which bin p rc sets=(seed sweep-m) steps=(old:seed new:seed new:sweep-m old:sweep-m)
  # COMPARE_SHAPES: those shapes instead of the presets (old, new, new, old)
  [ -n "${COMPARE_SHAPES:-}" ] && sets=(shapes) steps=(old:shapes new:shapes new:shapes2 old:shapes2)
  for step in "${steps[@]}"; do
    which=${step%%:*} p=${step#*:}
    [ $which = old ] && bin=$O || bin=$B
    local what=(--preset "$p")
    [ "${p#shapes}" != "$p" ] && what=(--shape "$COMPARE_SHAPES")
    say "== $which binary, ${what[*]} -> $OUT/$which-$p.json"
    timeout 300 $bin run "${what[@]}" "${common[@]}" --json "$OUT/$which-$p.json" >>"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "$which ${what[*]} (exit $rc)"
  done
  [ -n "${COMPARE_SHAPES:-}" ] && sets=(shapes shapes2)
  for p in "${sets[@]}"; do
    say "== fp4bench compare old-$p.json new-$p.json --threshold 0.02"
    $B compare "$OUT/old-$p.json" "$OUT/new-$p.json" --threshold 0.02 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    say "compare $p: exit $rc (0: no regression, 1: a row slower beyond threshold and noise, or broken)"
    [ $rc -eq 0 ] || fail "compare $p (exit $rc)"
  done
}

# ---- engine -----------------------------------------------------------------------------
mode_engine() {
  local rc p
  for p in a b; do
    say "== seed preset, run $p -> $OUT/seed-$p.json"
    timeout 400 $B run --preset seed --max-time "${MAX_TIME:-3}" --quiet --json "$OUT/seed-$p.json" \
      >>"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "seed run $p (exit $rc)"
  done
  say "== 64x768x6144: cublas-bf16 beside fp4-sm90 alone -> $OUT/pair.json"
  timeout 200 $B run --shape 64x768x6144 --backend cublas-bf16,fp4-sm90 --max-time "${MAX_TIME:-3}" \
    --quiet --json "$OUT/pair.json" >>"$log" 2>&1 || fail "pair run (exit $?)"
  python3 - "$OUT/seed-a.json" "$OUT/seed-b.json" "$OUT/pair.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
def rows(path):
    return {(r["backend"], r["label"], r["m"], r["n"], r["k"]): r for r in json.load(open(path))["rows"]}
a, b, pair = (rows(p) for p in sys.argv[1:4])
bad = 0
for key in sorted(a):
    ra, rb = a[key], b.get(key)
    if not rb or ra["state"] != "ok" or rb["state"] != "ok": continue
    if not ra["time_us"]["count"] or not rb["time_us"]["count"]: continue  # verified, not timed
    ma, mb = ra["time_us"]["median"], rb["time_us"]["median"]
    if ma is None or mb is None: continue
    d = abs(mb / ma - 1)
    lim = 0.02 if min(ma, mb) > 10 else 0.03 if min(ma, mb) >= 5 else None
    verdict = "-" if lim is None else ("ok" if d <= lim else "OUT")
    bad += verdict == "OUT"
    print(f"seed twice: {key[0]:13s} {key[2]}x{key[3]}x{key[4]}: {ma:9.3f} {mb:9.3f} us  {100*d:5.2f}%  {verdict}")
seed = [r for k, r in a.items() if k[0] == "cublas-bf16" and (k[2], k[3], k[4]) == (64, 768, 6144)]
alone = [r for k, r in pair.items() if k[0] == "cublas-bf16"]
if seed and alone and seed[0]["state"] == "ok" and alone[0]["state"] == "ok":
    s, p = seed[0]["time_us"]["median"], alone[0]["time_us"]["median"]
    d = abs(p / s - 1)
    print(f"cublas-bf16 64x768x6144: seed preset {s:.3f} us, beside fp4-sm90 alone {p:.3f} us: {100*d:.2f}% {'ok' if d <= 0.02 else 'OUT'}")
    bad += d > 0.02
else:
    print("cublas-bf16 64x768x6144: missing or not ok"); bad += 1
sys.exit(1 if bad else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "engine acceptance: medians out of bounds"
  local f name
  for f in build-dev/tests/libfp4_plugin_fault_*.so build-dev/tests/fp4_plugin_fault_*.so; do
    [ -f "$f" ] || continue
    name=$($B list --plugin "$f" 2>/dev/null | grep -oE "fault-[a-z0-9-]+" | head -1)
    timeout 120 $B run --plugin "$f" --backend "$name" --shape 64x2048x6144 --no-ceilings --quiet \
      --verbose >"$tmp/fault.txt" 2>&1
    rc=$?
    cat "$tmp/fault.txt" >>"$log"
    say "planted fault $name: exit $rc; $(grep -E "FAILED" "$tmp/fault.txt" | head -1 | sed 's/  */ /g')"
    [ $rc -eq 1 ] && grep -q FAILED "$tmp/fault.txt" || fail "planted fault $name not caught (exit $rc)"
  done
  compgen -G "build-dev/tests/*plugin_fault_*.so" >/dev/null || fail "no fault plugins built"
}

# ---- moe --------------------------------------------------------------------------------
# moe_run NAME ARGS...: one fp4bench moe command, its JSON in OUT, its table in the log
moe_run() {
  local name=$1 rc
  shift
  say "== fp4bench moe $* -> $OUT/moe-$name.json"
  timeout 400 $B moe "$@" --max-time "${MAX_TIME:-2}" --json "$OUT/moe-$name.json" >"$tmp/moe.txt" 2>&1
  rc=$?
  cat "$tmp/moe.txt" >>"$log"
  grep -vE "^\s*$" "$tmp/moe.txt" | tail -40
  say "moe $name: exit $rc"
  [ $rc -eq 0 ] || fail "moe $name (exit $rc)"
}

# The committed MoE results (bench/results/<gpu>/moe/NAME.json, listed with
# their arguments in bench/moe-runs.txt): moe_args NAME prints the fp4bench moe
# arguments of NAME, moe_result NAME runs them.
moe_args() {
  local line
  line=$(grep -m1 "^$1: " bench/moe-runs.txt) || return 1
  echo "${line#*: }"
}
moe_result() {
  local args
  args=$(moe_args "$1") || { fail "no MoE result named $1"; return; }
  # shellcheck disable=SC2086 # the arguments hold no spaces
  moe_run "$1" $args
}

# moe_ctest REGEX: the GPU tests it names (a skipped one fails: no GPU seen)
moe_ctest() {
  local rc t=$tmp/moe-ctest.txt
  say "== ctest -R '$1'"
  (cd build-dev && ctest --output-on-failure --timeout 400 -R "$1" -j 2) >"$t" 2>&1
  rc=$?
  cat "$t" >>"$log"
  grep -E "Test +#|tests passed|tests failed" "$t" | tee -a "$log"
  [ $rc -eq 0 ] || fail "MoE GPU tests (exit $rc)"
  if grep -E "Test +#[0-9]+: gpu_" "$t" | grep -q "Skipped"; then fail "GPU tests skipped (no GPU seen)"; fi
}

# Every MoE check and measurement: moe-stream, then moe-models.
mode_moe() {
  mode_moe_stream
  mode_moe_models
}

# The MoE rows beyond GLM-5 W4A4: GLM-5 in W4A16 beside moe-cublas-bf16, and
# gpt-oss-120b (K = 2880) with every backend and the layer.
mode_moe_models() {
  moe_result glm5-w4a16
  moe_result gpt-oss
}

# Nsight Compute on the two MoE paths, with warp stall reasons and the
# per-instruction (SASS) stall samples as CSV, for each of PROF_CASES: the
# streaming path at GLM-5 gate_up sizes, T = 1 (stream-t1), 512 and 64; the
# wide path forced, E = 64, T = 512 (wide-t512).
mode_moe_prof() {
  local NCU name
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -z "$NCU" ]; then fail "ncu (Nsight Compute) not found"; return; fi
  prof_one() { # NAME KERNEL-REGEX fp4bench-moe-arguments...
    local name=$1 kre=$2
    shift 2
    say "== Nsight Compute: $name ($*)"
    timeout -k 10 240 "$NCU" --clock-control none --set detailed --section WarpStateStats \
      --section SourceCounters --section SchedulerStats --section InstructionStats \
      --kernel-name "regex:$kre" --launch-count 1 --export "$OUT/$name" --force-overwrite \
      $B moe "$@" --backend moe-fp4-sm90 --verify-only --quiet >"$tmp/ncu.txt" 2>&1 ||
      fail "ncu $name (exit $?)"
    cat "$tmp/ncu.txt" >>"$log"
    "$NCU" --import "$OUT/$name.ncu-rep" --page details >"$OUT/$name.txt" 2>&1
    "$NCU" --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass \
      >"$OUT/$name-sass.csv" 2>&1 || say "no source page for $name"
    grep -E "Duration|SM Frequency|Throughput|Pipe|Registers|Warp Cycles|Eligible|Issued Warp|No Eligible" "$OUT/$name.txt" | head -30
  }
  local c
  for c in ${PROF_CASES:-stream-t512 stream-t64 wide-t512}; do
    case $c in
      stream-t1) prof_one stream-t1 fp4_sm90_moe_kernel --dims 6144,2048,256,8 --tokens 1 --step gate_up ;;
      stream-t512) prof_one stream-t512 fp4_sm90_moe_kernel --dims 6144,2048,256,8 --tokens 512 --step gate_up ;;
      stream-t64) prof_one stream-t64 fp4_sm90_moe_kernel --dims 6144,2048,256,8 --tokens 64 --step gate_up ;;
      wide-t512) FP4_SM90_MOE_PATH=wide prof_one wide-t512 moe_wide_kernel --dims 6144,2048,64,8 --tokens 512 --step gate_up ;;
      *) fail "moe-prof: unknown case $c (stream-t1, stream-t512, stream-t64, wide-t512)" ;;
    esac
  done
  rm -f "$OUT"/*.ncu-rep
}

# memcheck and racecheck on small MoE layers, every row verified (--verify-only):
# random routing at T = 1 and 77 (the streaming kernel), skewed at 77 (its hot
# experts on the wide kernel), the whole layer at K = 2880 with gpt-oss's
# SwiGLU and with SiLU at 8 to 39 pairs an expert (the W4A4 prepass): the
# routing, quantize, activation and combine kernels as well as the GEMMs.
moe_sanitize() {
  local SAN tool name rc summary verdict t=$tmp/san.txt
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$SAN" ] || { fail "compute-sanitizer not found"; return; }
  local -a cases=(
    "random|--dims 2048,768,128,8 --tokens 1,77 --step gate_up,down"
    "skewed|--dims 2048,768,128,8 --tokens 77 --routing skewed --zipf 1.2 --step gate_up,down"
    "layer-k2880|--dims 2880,2880,16,4,swiglu-oai --tokens 1,40 --step layer"
    "layer-prepass|--dims 2048,768,32,8 --tokens 64 --step layer"
  )
  for tool in memcheck racecheck; do
    for c in "${cases[@]}"; do
      name=${c%%|*}
      # shellcheck disable=SC2086 # the case's options split into words
      timeout -k 10 "${SAN_TIMEOUT:-240}" "$SAN" --tool $tool --error-exitcode 9 $B moe ${c#*|} \
        --mode w4a4,w4a16 --backend moe-fp4-sm90 --verify-only --quiet >"$t" 2>&1
      rc=$?
      head -60 "$t" >>"$log"
      summary=$(san_verdict $tool "$t") && verdict=clean || verdict=NOT-CLEAN
      say "$tool moe-fp4-sm90 $name (${c#*|}; w4a4 and w4a16): exit $rc, $verdict: $summary"
      [ $rc -eq 0 ] && [ $verdict = clean ] || fail "$tool moe $name (exit $rc, $verdict)"
      # a row that did not run checks nothing
      if grep -qE "unsupported|FAILED" "$t"; then fail "$tool moe $name: a row did not run or failed"; fi
    done
  done
}

# The streaming MoE path checked and measured: its GPU tests, memcheck and
# racecheck on small shapes, the kernel alone, then fp4bench moe on GLM-5 with
# the baselines (the JSON of bench/results/h200/moe/).
mode_moe_stream() {
  moe_ctest gpu_moe
  moe_sanitize
  moe_time_alone
  moe_stream_runs
}

# The grouped kernel alone: gpu_moe_kernel's checks, then GLM-5 timed
# (FP4_MOE_TIME=1; the kernel-alone table of docs/PERF.md, "moe")
moe_time_alone() {
  say "== the grouped kernel alone (FP4_MOE_TIME=1)"
  FP4_MOE_TIME=1 timeout 200 ./build-dev/tests/gpu_moe_kernel 2>&1 | grep -E "^TIME|checks" | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "gpu_moe_kernel timing"
}

# Every committed result of a GPU (bench/results/<gpu>/: the baseline and each
# MoE file), the most read first, at MAX_TIME=1 unless set. With DEADLINE
# (seconds from the script's start) a step starts only while the time left
# covers its usual length (about 1.25x its time on an H100), so that a
# time-limited GPU leaves whole files; each step not run is a failed step.
# REFRESH="NAME ..." runs only those (baseline, or names of bench/moe-runs.txt).
mode_refresh() {
  local MAX_TIME=${MAX_TIME:-1} step name need left
  for name in ${REFRESH:-}; do
    [ "$name" = baseline ] || moe_args "$name" >/dev/null || fail "refresh: no result named $name"
  done
  for step in "glm5 160" "baseline 150" "glm5-balanced 70" "glm5-skewed 55" "glm5-w4a16 55" \
    "glm5-layer 80" "gpt-oss 60" "glm5-layer-w4a16 80"; do
    name=${step% *} need=${step#* } left=$((${DEADLINE:-0} - SECONDS))
    if [ -n "${REFRESH:-}" ] && [[ " $REFRESH " != *" $name "* ]]; then
      continue
    elif [ -n "${DEADLINE:-}" ] && [ $left -lt "$need" ]; then
      fail "refresh: $name not run ($((left > 0 ? left : 0)) s left before DEADLINE, it takes about $need)"
    elif [ "$name" = baseline ]; then
      mode_baseline
    else
      moe_result "$name"
    fi
  done
}

# The fp4bench moe runs of moe-stream: GLM-5 gate_up/down beside the baselines
# (random and balanced routing), skewed routing, the layer (the GLM-5 runs of
# bench/moe-runs.txt but W4A16)
moe_stream_runs() {
  moe_result glm5
  moe_result glm5-balanced
  moe_result glm5-skewed
  moe_result glm5-layer
}

# A quick look at a streaming-path change: the grouped kernel's test (every
# case checked, then timed) and fp4bench moe on GLM-5 at T = 1 and 512.
mode_moe_quick() {
  say "== gpu_moe_kernel, then timed (FP4_MOE_TIME=1)"
  FP4_MOE_TIME=1 timeout 120 ./build-dev/tests/gpu_moe_kernel >"$tmp/mq.txt" 2>&1 ||
    fail "gpu_moe_kernel (exit $?)"
  cat "$tmp/mq.txt" >>"$log"
  grep -E "^TIME|CHECK failed|checks" "$tmp/mq.txt" | head -30
  moe_run quick --model glm5 --tokens 1,512 --step gate_up,down --backend moe-fp4-sm90
}

# The streaming kernel's fixed cost: at T = 1 every block runs about one unit,
# so time against bytes, over sizes, separates the start and end of a launch
# (the intercept) from the streaming rate (the slope).
mode_moe_fixed() {
  local d step rc csv=$OUT/moe-fixed.csv
  say "== moe-fp4-sm90 at T = 1, H,I varied -> $csv"
  rm -f "$csv"
  for d in 1536,2048 3072,2048 6144,2048 12288,2048 6144,512 6144,1024 6144,4096; do
    for step in gate_up down; do
      timeout 120 $B moe --dims "$d,256,8" --tokens 1 --step $step --mode w4a16 \
        --backend moe-fp4-sm90 --data codes --max-time "${MAX_TIME:-1}" --no-ceilings --quiet \
        --csv "$tmp/fixed.csv" >"$tmp/fixed.txt" 2>&1
      rc=$?
      cat "$tmp/fixed.txt" >>"$log"
      [ $rc -eq 0 ] || { fail "moe-fixed $d $step (exit $rc)"; continue; }
      if [ -f "$csv" ]; then tail -n +2 "$tmp/fixed.csv" >>"$csv"; else cp "$tmp/fixed.csv" "$csv"; fi
    done
  done
  [ -f "$csv" ] && python3 - "$csv" <<'PY' 2>&1 | tee -a "$log"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for step in ("gate_up", "down"):
    pts = [(float(r["weight_bytes"]) / 1e6, float(r["median_us"]), r) for r in rows if r["moe_step"] == step]
    for mb, us, r in pts:
        print("%-7s N %6s K %6s  %8.2f us  %6.1f MB  %5.0f GB/s  %s MHz" % (step, r["n"], r["k"], us, mb, mb / us * 1e3, r["sm_clock_mhz"]))
    if len(pts) >= 2:
        n = len(pts); sx = sum(p[0] for p in pts); sy = sum(p[1] for p in pts)
        sxx = sum(p[0] * p[0] for p in pts); sxy = sum(p[0] * p[1] for p in pts)
        slope = (n * sxy - sx * sy) / (n * sxx - sx * sx); icpt = (sy - slope * sx) / n
        print("%-7s fit: %.2f us + bytes at %.0f GB/s" % (step, icpt, 1e3 / slope))
PY
}

# MoE candidates side by side: this tree and each of ALT_TREES (folders with
# another tree's source) built, each one's grouped-kernel test run (only this
# tree's with AB_CHECK=first), then the same fp4bench moe rows (moe-fp4-sm90
# only, no ceilings: GLM-5 at AB_TOKENS, and skewed routing) for every tree
# in turn.
mode_moe_ab() {
  local trees=(.) dirs=(build-dev) i t d rc n=0
  for t in ${ALT_TREES:-}; do
    n=$((n + 1))
    d=build-ab$n
    if build "$t" "$d"; then trees+=("$t"); dirs+=("$d"); else fail "build of $t"; fi
  done
  for i in "${!trees[@]}"; do
    t=${trees[$i]} d=${dirs[$i]}
    [ "${AB_CHECK:-all}" = first ] && [ "$i" -gt 0 ] && break
    say "== tree $i: $t ($(cat "$t/.fp4-commit" 2>/dev/null || echo "$commit")): gpu_moe_kernel"
    timeout 240 "./$d/tests/gpu_moe_kernel" >"$tmp/ab.txt" 2>&1
    rc=$?
    cat "$tmp/ab.txt" >>"$log"
    grep -E "CHECK failed|checks" "$tmp/ab.txt" | tail -3 | tee -a "$log"
    [ $rc -eq 0 ] || fail "gpu_moe_kernel of $t (exit $rc)"
  done
  for i in "${!trees[@]}"; do
    B=./${dirs[$i]}/fp4bench moe_run "ab$i" --model glm5 --tokens "${AB_TOKENS:-1,512,1024,2048}" \
      --step gate_up,down --backend moe-fp4-sm90 --no-ceilings
    B=./${dirs[$i]}/fp4bench moe_run "ab$i-skewed" --model glm5 --tokens 512,2048 --routing skewed \
      --zipf 1.2 --step gate_up --backend moe-fp4-sm90 --no-ceilings
  done
}

# A kernel change measured against other trees in one run (ALT_TREE and
# ALT_TREES: source folders, only their grouped-kernel test built): this
# tree's wide path checked (every test case forced onto it, then the
# sanitizers), then the grouped kernel alone timed in every tree, alternated
# (this, alt 1, alt 2, ..., this, ...) so that drift in clocks shows as a
# spread, not as a difference; each timed run checks its tree's cases first.
mode_moe_kab() {
  local rc SAN tool r i t d n=0 trees=(.) dirs=(build-dev)
  for t in ${ALT_TREE:-} ${ALT_TREES:-}; do
    n=$((n + 1))
    if [ ! -f "$t/CMakeLists.txt" ]; then fail "moe-kab: $t is not a source tree"; continue; fi
    if build "$t" "build-alt$n" gpu_moe_kernel; then trees+=("$t"); dirs+=("build-alt$n"); else fail "build of $t"; fi
  done
  if [ ${#trees[@]} -lt 2 ]; then fail "moe-kab: ALT_TREE or ALT_TREES must name a source tree that builds"; return; fi
  say "== gpu_moe_kernel, every case on the wide path"
  FP4_SM90_MOE_PATH=wide timeout 240 ./build-dev/tests/gpu_moe_kernel >"$tmp/kab.txt" 2>&1
  rc=$?
  cat "$tmp/kab.txt" >>"$log"
  grep -E "CHECK failed|checks" "$tmp/kab.txt" | tail -5 | tee -a "$log"
  [ $rc -eq 0 ] || fail "gpu_moe_kernel, wide path (exit $rc)"
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  for tool in memcheck racecheck; do
    [ -n "$SAN" ] || { fail "compute-sanitizer not found"; break; }
    FP4_SM90_MOE_PATH=wide timeout -k 10 150 "$SAN" --tool $tool --error-exitcode 9 $B moe \
      --dims 2048,768,128,8 --tokens 77,300 --step gate_up,down --mode w4a4,w4a16 \
      --backend moe-fp4-sm90 --verify-only --quiet >"$tmp/san.txt" 2>&1
    rc=$?
    head -60 "$tmp/san.txt" >>"$log"
    say "$tool moe-fp4-sm90 forced wide (2048,768,128,8; T = 77, 300): exit $rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$tmp/san.txt" | tail -1)"
    [ $rc -eq 0 ] || fail "$tool moe wide (exit $rc)"
  done
  for r in $(seq "${KAB_ROUNDS:-2}"); do
    for i in "${!trees[@]}"; do
      t=${trees[$i]} d=${dirs[$i]}
      say "== round $r, tree $i: $t ($(cat "$t/.fp4-commit" 2>/dev/null || echo "$commit")), the grouped kernel alone"
      FP4_MOE_TIME=1 timeout 200 "./$d/tests/gpu_moe_kernel" >"$tmp/kab.txt" 2>&1
      rc=$?
      cat "$tmp/kab.txt" >>"$log"
      grep -E "^TIME|CHECK failed|checks" "$tmp/kab.txt" | cut -c1-110 | tee -a "$log"
      [ $rc -eq 0 ] || fail "gpu_moe_kernel timed, tree $i $t (exit $rc)"
    done
  done
  say "== this tree, every timing case on the wide path (where the split could move)"
  FP4_SM90_MOE_PATH=wide FP4_MOE_TIME=1 timeout 200 ./build-dev/tests/gpu_moe_kernel >"$tmp/kab.txt" 2>&1
  rc=$?
  cat "$tmp/kab.txt" >>"$log"
  grep -E "^TIME|CHECK failed|checks" "$tmp/kab.txt" | cut -c1-110 | tee -a "$log"
  [ $rc -eq 0 ] || fail "gpu_moe_kernel timed on the wide path (exit $rc)"
}

# Another tree's MoE kernels beside this one's (ALT_TREE: a folder with its
# source): built into build-alt, its grouped-kernel test forced onto the wide
# path and timed, then fp4bench moe on GLM-5 forced wide.
mode_moe_tree() {
  local rc
  if [ -z "${ALT_TREE:-}" ] || [ ! -f "$ALT_TREE/CMakeLists.txt" ]; then fail "moe-tree: ALT_TREE must name a source tree (got '${ALT_TREE:-}')"; return; fi
  build "$ALT_TREE" build-alt || { fail "build of build-alt"; return; }
  say "== build-alt ($(cat "$ALT_TREE/.fp4-commit" 2>/dev/null)): gpu_moe_kernel forced wide, timed"
  FP4_SM90_MOE_PATH=wide FP4_MOE_TIME=1 timeout 300 ./build-alt/tests/gpu_moe_kernel >"$tmp/alt-mk.txt" 2>&1
  rc=$?
  cat "$tmp/alt-mk.txt" >>"$log"
  grep -E "CHECK failed|TIME|checks" "$tmp/alt-mk.txt" | head -40
  [ $rc -eq 0 ] || fail "build-alt gpu_moe_kernel, wide path (exit $rc)"
  B=./build-alt/fp4bench FP4_SM90_MOE_PATH=wide moe_run alt-wide --model glm5 --tokens 512,2048 \
    --step gate_up,down --backend moe-fp4-sm90
}

# The bf16 tensor rate of each MMA form the sm_90 kernels can use (bench/tensor_rate.cu).
mode_tensor_rate() {
  local rc
  say "== fp4_tensor_rate -> $OUT/tensor-rate.txt"
  ./build-dev/fp4_tensor_rate 2>&1 | tee "$OUT/tensor-rate.txt" | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || fail "fp4_tensor_rate (exit $rc)"
}

# The cost of code an SM has not run recently (bench/ifetch.cu).
mode_ifetch() {
  local rc
  say "== fp4_ifetch -> $OUT/ifetch.txt"
  timeout 120 ./build-dev/fp4_ifetch 2>&1 | tee "$OUT/ifetch.txt" | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || fail "fp4_ifetch (exit $rc)"
}

# The SASS of the fp4-sm90 kernels as built, with the control field of every
# instruction decoded: where loads are issued and which scoreboard each waits
# on is ptxas's choice, not the source's (a register ring's loads gathered on
# one scoreboard keep no load ahead).
mode_sass() {
  local CUOBJ o name
  CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  if [ -z "$CUOBJ" ]; then fail "cuobjdump not found"; return; fi
  mkdir -p "$OUT/sass"
  for o in $(find build-dev -path '*src/kernels/sm90/*.cu.o' | sort); do
    name=$(basename "$o" .cu.o)
    "$CUOBJ" -sass "$o" >"$OUT/sass/$name.sass" 2>&1 || { fail "cuobjdump $name"; continue; }
    python3 bench/sass_ctl.py "$OUT/sass/$name.sass" >"$OUT/sass/$name.ctl.txt" ||
      { fail "sass_ctl.py $name"; continue; }
    say "== $name"
    python3 bench/sass_ctl.py --loads "$OUT/sass/$name.sass" | tee -a "$log"
    python3 bench/sass_ctl.py --waits 64 "$OUT/sass/$name.sass" | tee -a "$log"
    # no kernel here converts a float to a byte; ptxas 13.0 emits F2I.U8 for
    # a 2-byte memcpy of a bf16, which stores the value's integer part
    if grep -q 'F2I\.U8' "$OUT/sass/$name.sass"; then
      fail "$name: F2I.U8 in the SASS (a bf16 stored through byte stores)"
    fi
  done
}

mode_multigpu() {
  local rc t=$tmp/mg-ctest.txt
  say "== ctest -R 'nccl|gpus|layer' ($(nvidia-smi -L 2>/dev/null | wc -l) GPUs)"
  (cd build-dev && ctest --output-on-failure --timeout 300 -R 'nccl|gpus|layer') >"$t" 2>&1
  rc=$?
  cat "$t" >>"$log"
  grep -E "Test +#|tests passed|tests failed" "$t" | tee -a "$log"
  [ $rc -eq 0 ] || fail "multi-GPU tests (exit $rc)"
  if grep -E "Test +#[0-9]+: gpu_" "$t" | grep -q "Skipped"; then fail "GPU tests skipped"; fi
  say "== fp4bench nccl --gpus all -> $OUT/nccl.json"
  timeout 200 $B nccl --gpus all --sizes 1M,64M,1G --json "$OUT/nccl.json" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || fail "fp4bench nccl (exit $rc)"
}

# layer_run NAME ARGS...: one fp4bench layer command, its JSON in OUT
layer_run() {
  local name=$1 rc
  shift
  say "== fp4bench layer $* -> $OUT/layer-$name.json"
  timeout 120 $B layer "$@" --json "$OUT/layer-$name.json" 2>&1 | tail -30 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  say "layer $name: exit $rc"
  [ $rc -eq 0 ] || fail "layer $name (exit $rc)"
}

mode_final() {
  local rc t=$tmp/final-ctest.txt
  local tests=${FINAL_TESTS:-'gpu_moe|gpu_layer|gpu_gpus|gpu_nccl'}
  say "== ctest -R '$tests' ($(nvidia-smi -L 2>/dev/null | wc -l) GPUs)"
  (cd build-dev && ctest --output-on-failure --timeout 200 -j 2 -R "$tests") >"$t" 2>&1
  rc=$?
  cat "$t" >>"$log"
  grep -E "Test +#|tests passed|tests failed" "$t" | tee -a "$log"
  grep -E "CHECK failed" "$t" | head -20 | tee -a "$log"
  [ $rc -eq 0 ] || fail "GPU tests (exit $rc)"
  if grep -E "Test +#[0-9]+: gpu_" "$t" | grep -q "Skipped"; then fail "GPU tests skipped"; fi
  mode_baseline
  [ -n "${FINAL_SHORT:-}" ] && return # the tests and the baseline only
  layer_run tp --dims 2048,768,128,8 --tp 1 --tokens 16,256
  layer_run ep --dims 2048,768,128,8 --ep 1 --tokens 16,256 --routing skewed
  layer_run attention --attention --tp 8,4,1 --tokens 16,64,256
  say "== fp4bench run --gpus all -> $OUT/gpus.json"
  timeout 90 $B run --gpus all --shape 16x8192x8192,4096x2048x6144 --backend cublas-bf16,fp4-sm90 \
    --max-time 1 --quiet --json "$OUT/gpus.json" 2>&1 | tail -20 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || fail "run --gpus all (exit $rc)"
  moe_run glm5-final --model glm5 --tokens 512,8192 --step gate_up \
    --backend moe-cublas-bf16,moe-cublaslt-fp8,moe-fp4-sm90
}

mode_moe_wide() {
  local rc NCU
  say "== gpu_moe_kernel with FP4_SM90_MOE_PATH=wide: every case on the wide path, then timed"
  FP4_SM90_MOE_PATH=wide FP4_MOE_TIME=1 timeout 300 ./build-dev/tests/gpu_moe_kernel >"$tmp/mk.txt" 2>&1
  rc=$?
  cat "$tmp/mk.txt" >>"$log"
  grep -E "CHECK failed|TIME|checks" "$tmp/mk.txt" | head -40
  [ $rc -eq 0 ] || fail "gpu_moe_kernel, wide path (exit $rc)"
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ]; then
    say "== Nsight Compute: the wide kernel, H 6144, I 2048, E 64, top-8, T = 512 (64 pairs an expert)"
    timeout -k 10 200 "$NCU" --clock-control none --set detailed --section WarpStateStats \
      --section SourceCounters --kernel-name "regex:moe_wide_kernel" \
      --launch-count 1 --export "$OUT/moe-wide" --force-overwrite $B moe --dims 6144,2048,64,8 \
      --tokens 512 --step gate_up --backend moe-fp4-sm90 --verify-only --quiet >"$tmp/ncu.txt" 2>&1
    cat "$tmp/ncu.txt" >>"$log"
    "$NCU" --import "$OUT/moe-wide.ncu-rep" --page details >"$OUT/moe-wide-profile.txt" 2>&1
    grep -E "Duration|Throughput|Pipe|Occupancy|Registers|Warp Cycles|L2 Hit|Eligible|Issued|Stall|stall" "$OUT/moe-wide-profile.txt" | head -60
  fi
  moe_result glm5
  FP4_SM90_MOE_PATH=stream moe_run glm5-stream-1024 --model glm5 --tokens 1024 --step gate_up --backend moe-fp4-sm90
  moe_result glm5-layer
  moe_result glm5-skewed
}

mode_moe_alt() {
  if [ -z "${MOE_ALT:-}" ] || [ ! -f "$MOE_ALT" ]; then fail "moe-alt: MOE_ALT must name a moe.cu (got '${MOE_ALT:-}')"; return; fi
  cp "$MOE_ALT" src/kernels/sm90/moe.cu
  if ! cmake --build build-dev -j "$(nproc)" >"$tmp/alt-build.txt" 2>&1; then
    grep -E "error" -A3 "$tmp/alt-build.txt" | head -40 | tee -a "$log"
    fail "moe-alt build"; return
  fi
  say "== moe-alt ($MOE_ALT): gpu_moe_kernel, then timed"
  timeout 300 ./build-dev/tests/gpu_moe_kernel >"$tmp/alt.txt" 2>&1 || fail "moe-alt gpu_moe_kernel (exit $?)"
  tail -5 "$tmp/alt.txt" | tee -a "$log"
  FP4_MOE_TIME=1 timeout 300 ./build-dev/tests/gpu_moe_kernel 2>&1 | grep -iE "time|us |fail|pass|%" | tail -30 | tee -a "$log"
}

# ---- profile ----------------------------------------------------------------------------
mode_profile() {
  local NCU
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -z "$NCU" ]; then fail "ncu (Nsight Compute) not found"; return; fi
  say "== Nsight Compute: $("$NCU" --version 2>&1 | tail -1)"
  local forced=${FP4_SM90_KERNEL:-}
  [ -n "$forced" ] && say "FP4_SM90_KERNEL=$forced (forced)"
  local shapes=${SHAPES:-16x8192x8192,256x2048x6144,4096x2048x6144,8192x8192x8192}
  local reps=$tmp/ncu shape rc variants txt=$OUT/profile.txt
  mkdir -p "$reps"
  : >"$txt"
  for shape in ${shapes//,/ }; do
    rm -f "$tmp/ncu.csv"
    # --verify-only --hot: each fp4-sm90 kernel runs once per shape (one
    # operand copy); Nsight Compute flushes the caches before each profiled
    # launch (its default), so the figures are cold-L2 ones all the same.
    timeout -k 10 300 "$NCU" --clock-control none --set "${NCU_SET:-detailed}" --kernel-name "regex:fp4_sm90_" \
      --export "$reps/$shape" --force-overwrite \
      $B run --backend fp4-sm90 --shape "$shape" --verify-only --hot --quiet --no-ceilings \
      --csv "$tmp/ncu.csv" >"$tmp/ncu.txt" 2>&1
    rc=$?
    variants=$(awk -F, 'NR > 1 { print $6 }' "$tmp/ncu.csv" 2>/dev/null | sort -u | paste -sd/ -)
    cat "$tmp/ncu.txt" >>"$log"
    grep -q "ERR_NVGPUCTRPERM" "$tmp/ncu.txt" && say "ncu: no permission for the GPU's performance counters"
    if [ $rc -ne 0 ] || [ ! -f "$reps/$shape.ncu-rep" ]; then
      fail "ncu $shape (exit $rc)"
      continue
    fi
    { echo "==== $shape: fp4-sm90 ran ${variants:-?}${forced:+ (FP4_SM90_KERNEL=$forced)}"
      "$NCU" --import "$reps/$shape.ncu-rep" --page details; } >>"$txt" 2>&1
    say "---- $shape: fp4-sm90 ran ${variants:-?}"
    "$NCU" --import "$reps/$shape.ncu-rep" --page details 2>&1 |
      grep -E "^  (void )?fp4_sm90_|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy" |
      tee -a "$log"
  done
  if compgen -G "$reps/*.ncu-rep" >/dev/null; then
    tar -czf "$OUT/profile-reports.tar.gz" -C "$reps" . && say "reports: $OUT/profile-reports.tar.gz, details: $txt"
  fi
}

# ---- run --------------------------------------------------------------------------------
if [ $built = 1 ]; then
  for m in "${modes[@]}"; do
    case "$m" in
      check) mode_check ;;
      ctest) check_ctest ;;
      gpu-tests) check_ctest gpu_ ;;
      verify) check_verify ;;
      sanitize) check_sanitizer ;;
      bench) mode_bench ;;
      independent) mode_independent ;;
      baseline) mode_baseline ;;
      compare) mode_compare ;;
      profile) mode_profile ;;
      engine) mode_engine ;;
      moe) mode_moe ;;
      moe-alt) mode_moe_alt ;;
      moe-wide) mode_moe_wide ;;
      moe-prof) mode_moe_prof ;;
      moe-stream) mode_moe_stream ;;
      moe-san) moe_sanitize ;;
      moe-models) mode_moe_models ;;
      moe-json) moe_stream_runs; mode_moe_models ;;
      moe-json-stream) moe_stream_runs ;;
      refresh) mode_refresh ;;
      moe-time) moe_time_alone ;;
      moe-quick) mode_moe_quick ;;
      moe-fixed) mode_moe_fixed ;;
      moe-ab) mode_moe_ab ;;
      moe-kab) mode_moe_kab ;;
      moe-tree) mode_moe_tree ;;
      tensor-rate) mode_tensor_rate ;;
      ifetch) mode_ifetch ;;
      sass) mode_sass ;;
      multigpu) mode_multigpu ;;
      final) mode_final ;;
      all) mode_check; mode_bench ;;
    esac
  done
elif [ "$mode" != build ]; then
  say "no binary: the $mode steps did not run"
fi
rm -rf "$tmp"

say "== $mode done in $SECONDS s; files in $OUT:"
ls -l "$OUT" | tail -n +2 | tee -a "$log"
if [ ${#failed[@]} -gt 0 ]; then
  say "== ${#failed[@]} step(s) failed:"
  for f in "${failed[@]}"; do say "   $f"; done
  exit 1
fi
say "== all steps passed"
