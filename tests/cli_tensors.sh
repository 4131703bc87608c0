#!/usr/bin/env bash
# quantize -> gemm -> check round trip on real files, and check's verdicts.
source "$(dirname "$0")/lib_cli.sh"

for dtype in f32 f16 bf16; do
    "$MKFILE" npy-$dtype 48 2880 7 "$TMP/w_$dtype.npy"
    expect 0 "weight_scale_2" -- "$FP4" quantize --in "$TMP/w_$dtype.npy" --out "$TMP/w_$dtype.safetensors"
done
"$MKFILE" npy-f32 5 2880 8 "$TMP/x.npy"
expect 0 "quantization error" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/x.safetensors" --input-scale 0.5
expect 0 "D \[5, 48\] float32" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --out "$TMP/d.npy"
expect 0 "^PASS" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --d "$TMP/d.npy"
grep -q "max|D-R|/max|R| = 0 " "$TMP/out" || fail "the reference's own output should have zero error: $(cat "$TMP/out")"
checks=$((checks + 1))

# a corrupted result (one element blown up) must fail the check
"$MKFILE" setbyte "$TMP/d.npy" -1 127 "$TMP/dbad.npy"
expect 1 "^FAIL" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --d "$TMP/dbad.npy"
# a result of the right shape but another computation (other weights) fails
expect 0 "" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/w_f16.safetensors" --out "$TMP/d16.npy"
expect 1 "^FAIL" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --d "$TMP/d16.npy"
# all zeros fail even with huge tolerances
"$MKFILE" npy-raw '<f4' 0 5 48 4 "$TMP/zeros.npy"
expect 1 "all zeros" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --d "$TMP/zeros.npy" --tol-max 100 --tol-norm 100

finish
