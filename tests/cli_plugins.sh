#!/usr/bin/env bash
# External backends (--plugin) through the program: list shows them with
# whether they can run here; run and gemm run them, verified; the loader
# refuses a wrong ABI, a missing entry symbol and a built-in's name. The
# plugins are the ones tests/CMakeLists.txt builds (tests/plugins/);
# plugin_good calls libfp4 (fp4_fail, fp4_matrix_get, ...), so it loads only
# into a program that exports the library.
source "$(dirname "$0")/lib_cli.sh"

GOOD=$TOOLS/libfp4_plugin_good.so
GPU=$TOOLS/libfp4_plugin_gpu.so
if [ ! -e "$GOOD" ]; then
    echo "no $GOOD: the test plugins were not built; skipped" >&2
    exit 77
fi

# list: the plugin's backend beside the built-in ones, with can-run / why
expect 0 "^plugin-good +yes +example plugin" -- "$FP4" list --plugin "$GOOD"
grep -q "(plugin $GOOD)" "$TMP/out" || fail "list does not say where plugin-good comes from: $(cat "$TMP/out")"
grep -qE "^cpu-ref +yes" "$TMP/out" || fail "list --plugin dropped the built-in backends: $(cat "$TMP/out")"
checks=$((checks + 2))
expect 0 "^1 2048 6144 moe-up" -- "$FP4" list --plugin "$GOOD" --preset sweep-m
expect 3 "libfp4_plugin_oldabi.so: backend API version 0, this fp4bench speaks version [0-9]+" -- "$FP4" list --plugin "$TOOLS/libfp4_plugin_oldabi.so"
expect 3 "libfp4_plugin_nosym.so has no symbol fp4_backend_entry \\(nor fp4_moe_backend_entry\\)$" -- "$FP4" list --plugin "$TOOLS/libfp4_plugin_nosym.so"
expect 3 "libfp4_plugin_clash.so: its backend is named 'cpu-ref', as a built-in backend is" -- "$FP4" list --plugin "$TOOLS/libfp4_plugin_clash.so"
expect 3 "cannot load plugin $TMP/none.so" -- "$FP4" list --plugin "$TMP/none.so"
expect 2 "--plugin: a backend named 'plugin-good' is already loaded" -- "$FP4" list --plugin "$GOOD" --plugin "$GOOD"

# run: the plugin's backend picked by name, verified, timed
expect 0 "plugin-good" -- "$FP4" run --plugin "$GOOD" --backend plugin-good --shape 4x24x32,3x40x48 --quiet --max-time 0.5
rows=$(grep -cE "^custom .*plugin-good .*ok " "$TMP/out")
[ "$rows" -eq 2 ] || fail "run --backend plugin-good: $rows of 2 rows verified: $(cat "$TMP/out")"
grep -qE "^custom .*cpu-ref " "$TMP/out" && fail "run --backend plugin-good also ran cpu-ref: $(cat "$TMP/out")"
checks=$((checks + 2))
# a shape the plugin's supports() refuses is a row saying why, not a failure
expect 0 "" -- "$FP4" run --plugin "$GOOD" --backend plugin-good --shape 4096x4096x4096 --quiet --verbose
grep -qE "^custom .*plugin-good .*unsupported.*too slow for a CPU example" "$TMP/out" ||
    fail "plugin-good's unsupported shape: $(cat "$TMP/out")"
checks=$((checks + 1))
expect 0 "plugin-good" -- "$FP4" run --plugin "$GOOD" --backend plugin-good,cpu-ref --shape 16x64x64 --quiet --max-time 0.5
grep -qE "^custom .*cpu-ref " "$TMP/out" || fail "run --backend plugin-good,cpu-ref lacks cpu-ref: $(cat "$TMP/out")"
checks=$((checks + 1))

# gemm: the only plugin is the default backend; its D is checked like any
"$MKFILE" nvfp4 7 96 1 "$TMP/a.safetensors"
"$MKFILE" nvfp4 33 96 2 "$TMP/b.safetensors"
expect 0 "backend plugin-good" -- "$FP4" gemm --plugin "$GOOD" --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
grep -q "verified against cpu-ref: ok" "$TMP/out" || fail "gemm --plugin not verified: $(cat "$TMP/out")"
checks=$((checks + 1))
expect 0 "^PASS" -- "$FP4" check --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --d "$TMP/d.npy"
expect 0 "backend cpu-ref" -- "$FP4" gemm --plugin "$GOOD" --backend cpu-ref --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
expect 0 "backend plugin-good" -- "$FP4" gemm --backend plugin-good --plugin "$GOOD" --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
expect 2 "--backend: unknown backend 'nope'" -- "$FP4" gemm --plugin "$GOOD" --backend nope --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
expect 2 "--backend: unknown backend 'plugin-good'" -- "$FP4" gemm --backend plugin-good --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
expect 3 "API version 0" -- "$FP4" gemm --plugin "$TOOLS/libfp4_plugin_oldabi.so" --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"

# MoE backends (fp4bench moe --plugin): the example verified and timed in both
# modes and steps, alone or beside the built-in reference; a step it refuses is
# a row saying why; a plugin with a planted fault is FAILED while the other
# backend's rows stay; the loader refuses a built-in's name, a missing entry
# symbol and a plugin of the other kind, saying which it is
MOE_GOOD=$TOOLS/libfp4_plugin_moe_good.so
MOE_DIMS=(--dims 128,64,8,2 --tokens 5,24 --max-time 0.3 --quiet)
expect 0 "moe-plugin-good" -- "$FP4" moe --plugin "$MOE_GOOD" --backend moe-plugin-good --mode w4a4,w4a16 "${MOE_DIMS[@]}" --json "$TMP/moe.json"
rows=$(grep -cE "^custom (gate_up|down) w4a(4|16) .* moe-plugin-good .* ok " "$TMP/out")
[ "$rows" -eq 8 ] || fail "moe --plugin: $rows of 8 rows verified: $(cat "$TMP/out")"
grep -qE " moe-cpu-ref " "$TMP/out" && fail "moe --backend moe-plugin-good also ran moe-cpu-ref: $(cat "$TMP/out")"
n=$(python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(sum(1 for r in rows if r["backend"] == "moe-plugin-good" and r["state"] == "ok" and r["verified"] == 1))' "$TMP/moe.json")
[ "$n" = 8 ] || fail "moe --plugin --json: $n of 8 verified rows of moe-plugin-good"
checks=$((checks + 3))
expect 0 "" -- "$FP4" moe --plugin "$MOE_GOOD" --backend moe-cpu-ref --step layer --verbose "${MOE_DIMS[@]}"
grep -qE "^custom layer .* moe-plugin-good .*unsupported.*gate_up and down only" "$TMP/out" ||
    fail "moe-plugin-good's refused step: $(cat "$TMP/out")"
grep -qE "^custom layer .* moe-cpu-ref " "$TMP/out" || fail "moe --plugin dropped --backend moe-cpu-ref: $(cat "$TMP/out")"
checks=$((checks + 2))
expect 1 "" -- "$FP4" moe --plugin "$TOOLS/libfp4_plugin_moe_copyless.so" --backend moe-cpu-ref --step gate_up,down "${MOE_DIMS[@]}"
rows=$(grep -cE "^custom (gate_up|down) .* moe-plugin-copyless +FAILED: verification: copy 1" "$TMP/out")
[ "$rows" -eq 4 ] || fail "a plugin computing odd copies from the even input: $rows of 4 rows FAILED: $(cat "$TMP/out")"
rows=$(grep -cE "^custom (gate_up|down) .* moe-cpu-ref +[0-9.]+ " "$TMP/out")
[ "$rows" -eq 4 ] || fail "moe-cpu-ref's rows were lost ($rows of 4 timed): $(cat "$TMP/out")"
checks=$((checks + 2))
expect 3 "libfp4_plugin_moe_clash.so: its backend is named 'moe-cpu-ref', as a built-in MoE backend is" -- "$FP4" moe --plugin "$TOOLS/libfp4_plugin_moe_clash.so" "${MOE_DIMS[@]}"
expect 3 "libfp4_plugin_moe_reference.so: its backend 'moe-plugin-reference' claims FP4_BACKEND_REFERENCE" -- "$FP4" moe --plugin "$TOOLS/libfp4_plugin_moe_reference.so" "${MOE_DIMS[@]}"
expect 3 "libfp4_plugin_nosym.so has no symbol fp4_moe_backend_entry$" -- "$FP4" moe --plugin "$TOOLS/libfp4_plugin_nosym.so" "${MOE_DIMS[@]}"
expect 3 "has no symbol fp4_moe_backend_entry \\(it is a GEMM backend" -- "$FP4" moe --plugin "$GOOD" "${MOE_DIMS[@]}"
expect 3 "has no symbol fp4_backend_entry \\(it is an MoE backend: load it with fp4bench moe\\)" -- "$FP4" run --plugin "$MOE_GOOD" --shape 4x24x32
# list takes plugins of both kinds: the MoE one among the MoE backends
expect 0 "^moe-plugin-good +yes +example MoE plugin.*\\(plugin $MOE_GOOD\\)" -- "$FP4" list --plugin "$MOE_GOOD" --plugin "$GOOD"
sed -n '/^MoE backend /,/^$/p' "$TMP/out" | grep -qE "^moe-plugin-good +yes" ||
    fail "list: moe-plugin-good is not under the MoE backends: $(cat "$TMP/out")"
sed -n '/^MoE backend /,/^$/p' "$TMP/out" | grep -qE "^moe-cpu-ref +yes" ||
    fail "list: no MoE backend section with moe-cpu-ref: $(cat "$TMP/out")"
grep -qE "^plugin-good +yes" "$TMP/out" || fail "list with both kinds dropped plugin-good: $(cat "$TMP/out")"
checks=$((checks + 3))
expect 2 "--plugin: a backend named 'moe-plugin-good' is already loaded" -- "$FP4" moe --plugin "$MOE_GOOD" --plugin "$MOE_GOOD" "${MOE_DIMS[@]}"
expect 2 "--backend: unknown MoE backend 'moe-plugin-good'.*needs its --plugin" -- "$FP4" moe --backend moe-plugin-good "${MOE_DIMS[@]}"

# the GPU example (built with CUDA): listed everywhere; where it can run, it
# is verified (odd copies against -R, in CUDA graphs) and gemm's D checked
if [ -e "$GPU" ]; then
    expect 0 "^plugin-gpu +(yes|no) " -- "$FP4" list --plugin "$GPU"
    if grep -qE "^plugin-gpu +yes" "$TMP/out"; then
        expect 0 "plugin-gpu" -- "$FP4" run --plugin "$GPU" --backend plugin-gpu,cuda-ref --shape 16x2048x6144,1x1x16,37x131x2880,1048600x3x16 --quiet --max-time 1
        rows=$(grep -cE "^custom .*plugin-gpu .*ok " "$TMP/out")
        [ "$rows" -eq 4 ] || fail "plugin-gpu: $rows of 4 rows verified: $(cat "$TMP/out")"
        checks=$((checks + 1))
        expect 0 "backend plugin-gpu" -- "$FP4" gemm --plugin "$GPU" --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/dg.npy"
        grep -q "verified against cpu-ref: ok" "$TMP/out" || fail "gemm --plugin plugin-gpu not verified: $(cat "$TMP/out")"
        checks=$((checks + 1))
    else
        grep -qE "unsupported: " "$TMP/out" || fail "plugin-gpu cannot run here but says not why: $(cat "$TMP/out")"
        checks=$((checks + 1))
    fi
fi

finish
