#!/usr/bin/env bash
# quantize -> gemm -> check round trip on real files, and check's verdicts;
# one layer of a many-layer checkpoint (--a-name / --b-name); scales that are
# no scales refused at load, naming the tensor.
source "$(dirname "$0")/lib_cli.sh"

# le64 N: N as 8 little-endian bytes on stdout.
le64() {
    local i
    for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(($1 >> (8 * i) & 255)))"; done
}

# st_layers OUT PREFIX FILE [PREFIX FILE ...]: one safetensors holding the
# tensors of every single-layer checkpoint FILE (as quantize writes them)
# renamed PREFIX.NAME, after an F32 tensor that belongs to no layer (a model's
# checkpoint holds more than NVFP4 layers). Each FILE's data section is
# copied whole and its offsets moved by the bytes before it.
st_layers() {
    local out=$1 header='"model.norm.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}' base=8
    local entry re='^"([a-z_0-9]+)":\{"dtype":"([A-Z0-9_]+)","shape":\[([0-9,]*)\],"data_offsets":\[([0-9]+),([0-9]+)\]\}$'
    shift
    head -c 8 /dev/zero >"$TMP/st_data"
    while [ $# -ge 2 ]; do
        local prefix=$1 file=$2 hlen
        shift 2
        hlen=$(od -An -tu8 -N8 "$file" | tr -d ' ')
        while read -r entry; do
            [[ $entry =~ $re ]] || { fail "st_layers: cannot read '$entry' of $file"; return 1; }
            header+=",\"$prefix.${BASH_REMATCH[1]}\":{\"dtype\":\"${BASH_REMATCH[2]}\",\"shape\":[${BASH_REMATCH[3]}],"
            header+="\"data_offsets\":[$((base + BASH_REMATCH[4])),$((base + BASH_REMATCH[5]))]}"
        done < <(head -c $((8 + hlen)) "$file" | tail -c "$hlen" | grep -oE '"[a-z_0-9]+":\{"dtype":[^}]*\}')
        tail -c +$((9 + hlen)) "$file" >>"$TMP/st_data"
        base=$(stat -c %s "$TMP/st_data")
    done
    header="{$header}"
    { le64 ${#header}; printf '%s' "$header"; cat "$TMP/st_data"; } >"$out"
}

for dtype in f32 f16 bf16; do
    "$MKFILE" npy-$dtype 48 2880 7 "$TMP/w_$dtype.npy"
    expect 0 "weight_scale_2" -- "$FP4" quantize --in "$TMP/w_$dtype.npy" --out "$TMP/w_$dtype.safetensors"
done
"$MKFILE" npy-f32 5 2880 8 "$TMP/x.npy"
expect 0 "quantization error" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/x.safetensors" --input-scale 0.5
# an --encode-scale that leaves nothing of the tensor is refused with the scale that fits
expect 2 "--encode-scale 1e-30: every block's scale rounds to 0 .* which scale [0-9.]+ fits" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/xs.safetensors" --encode-scale 1e-30
expect 2 "--encode-scale 1e\+30: every block's scale is clipped" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/xs.safetensors" --encode-scale 1e30
[ -e "$TMP/xs.safetensors" ] && fail "a refused --encode-scale wrote its checkpoint"
checks=$((checks + 1))
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

# one layer of a model's checkpoint: the same product as from its own file
L=model.layers
"$MKFILE" npy-f32 48 2880 9 "$TMP/w9.npy"
expect 0 "" -- "$FP4" quantize --in "$TMP/w9.npy" --out "$TMP/w9.safetensors" --input-scale 0.25
st_layers "$TMP/model.safetensors" $L.0.mlp.experts.0.down_proj "$TMP/w_f32.safetensors" \
    $L.1.mlp.experts.0.down_proj "$TMP/w9.safetensors"
expect 0 "D \[5, 48\] float32" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --b-name $L.1.mlp.experts.0.down_proj --out "$TMP/d1.npy"
expect 0 "^PASS" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w9.safetensors" --d "$TMP/d1.npy"
grep -q "max|D-R|/max|R| = 0 " "$TMP/out" || fail "layer 1 is not w9's product: $(cat "$TMP/out")"
checks=$((checks + 1))
expect 1 "^FAIL" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --d "$TMP/d1.npy"
expect 0 "^PASS" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --b-name $L.1.mlp.experts.0.down_proj --d "$TMP/d1.npy"
expect 0 "" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --b-name $L.0.mlp.experts.0.down_proj --out "$TMP/d0.npy"
expect 0 "^PASS" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/w_f32.safetensors" --d "$TMP/d0.npy"
# both operands from the one file
expect 0 "D \[48, 48\] float32" -- "$FP4" gemm --a "$TMP/model.safetensors" --a-name $L.0.mlp.experts.0.down_proj --b "$TMP/model.safetensors" --b-name $L.1.mlp.experts.0.down_proj --out "$TMP/d01.npy"
expect 0 "^PASS" -- "$FP4" check --a "$TMP/w_f32.safetensors" --b "$TMP/w9.safetensors" --d "$TMP/d01.npy"
# a missing layer names what was looked for and the nearest layers there are
expect 3 "no tensor '$L.1.mlp.experts.0.up_proj.weight'.*nearest: '$L.1.mlp.experts.0.down_proj'" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --b-name $L.1.mlp.experts.0.up_proj --out "$TMP/d.npy"
expect 3 "model.safetensors: no tensor 'weight'.*2 NVFP4 layers.*--b-name LAYER picks a layer" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --out "$TMP/d.npy"
expect 3 "no tensor '$L.7.weight'.*--a-name|no tensor '$L.7.weight'" -- "$FP4" check --a "$TMP/model.safetensors" --a-name $L.7 --b "$TMP/w9.safetensors" --d "$TMP/d1.npy"
expect 2 "--b-name needs a value, not an empty one" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --b-name "" --out "$TMP/d.npy"
expect 2 "--b-name: layer name longer than 127 bytes" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/model.safetensors" --b-name "$(head -c 200 /dev/zero | tr '\0' x)" --out "$TMP/d.npy"
expect 2 "--a-name: layer '.*': its tensor name '.*\.weight_scale_2' is longer than 127 bytes" -- "$FP4" check --a "$TMP/model.safetensors" --a-name "$(head -c 120 /dev/zero | tr '\0' x)" --b "$TMP/w9.safetensors" --d "$TMP/d1.npy"
# a .npy where a checkpoint belongs is named as such, with a layer name too
expect 3 "w9.npy: this is a .npy file, not safetensors" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/w9.npy" --b-name $L.1 --out "$TMP/d.npy"

# scale bytes that are no UE4M3 scales, and global scales that are no scales,
# are refused at load with the tensor named (the last scale of w_f32, [47, 179],
# is at -5: weight_scale_2's 4 bytes end the file)
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -5 127 "$TMP/nan.safetensors"
expect 3 "nan.safetensors: tensor 'weight_scale' has scale byte 0x7F at \[47, 179\]: NaN" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/nan.safetensors" --out "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -5 255 "$TMP/nan2.safetensors"
expect 3 "scale byte 0xFF at \[47, 179\]: NaN" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/nan2.safetensors" --d "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -5 181 "$TMP/neg.safetensors"
expect 3 "tensor 'weight_scale' has scale byte 0xB5 at \[47, 179\]: negative" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/neg.safetensors" --out "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -5 128 "$TMP/negzero.safetensors"
expect 0 "" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/negzero.safetensors" --out "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -1 191 "$TMP/gneg.safetensors"
expect 3 "gneg.safetensors: tensor 'weight_scale_2' is -.*expected a finite positive number" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/gneg.safetensors" --out "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -1 127 "$TMP/g1.safetensors"
"$MKFILE" setbyte "$TMP/g1.safetensors" -2 192 "$TMP/ginf.safetensors"
"$MKFILE" setbyte "$TMP/ginf.safetensors" -3 0 "$TMP/g1.safetensors"
"$MKFILE" setbyte "$TMP/g1.safetensors" -4 0 "$TMP/ginf.safetensors"
expect 3 "tensor 'weight_scale_2' is (nan|-?nan)" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/ginf.safetensors" --out "$TMP/d.npy"
# a finite but huge global scale (3e38, 0x7F61B1E6): the product overflows
# fp32; the file is written as computed, said on stderr, exit 1
"$MKFILE" setbyte "$TMP/w_f32.safetensors" -1 127 "$TMP/gbig1.safetensors"
"$MKFILE" setbyte "$TMP/gbig1.safetensors" -2 97 "$TMP/gbig2.safetensors"
"$MKFILE" setbyte "$TMP/gbig2.safetensors" -3 177 "$TMP/gbig1.safetensors"
"$MKFILE" setbyte "$TMP/gbig1.safetensors" -4 230 "$TMP/gbig.safetensors"
expect 1 "outputs are NaN/Inf \(the product overflows fp32" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/gbig.safetensors" --out "$TMP/dbig.npy"
expect 1 "NaN/Inf [1-9]" -- "$FP4" check --a "$TMP/x.safetensors" --b "$TMP/gbig.safetensors" --d "$TMP/dbig.npy"
# in a model's checkpoint the message names the layer's tensor (the last
# layer's weight_scale_2 ends 4 bytes before input_scale; 0xFFFF.... is a
# NaN); x's input_scale is checked too (its last byte: the sign bit set)
"$MKFILE" setbyte "$TMP/model.safetensors" -5 255 "$TMP/modelnan1.safetensors"
"$MKFILE" setbyte "$TMP/modelnan1.safetensors" -6 255 "$TMP/modelnan.safetensors"
expect 3 "tensor '$L.1.mlp.experts.0.down_proj.weight_scale_2' is" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/modelnan.safetensors" --b-name $L.1.mlp.experts.0.down_proj --out "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/x.safetensors" -1 191 "$TMP/xneg.safetensors"
expect 3 "tensor 'input_scale' is -" -- "$FP4" gemm --a "$TMP/xneg.safetensors" --b "$TMP/w_f32.safetensors" --out "$TMP/d.npy"

finish
