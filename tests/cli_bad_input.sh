#!/usr/bin/env bash
# Every bad input gives a one-line message naming the problem and a non-zero
# exit (2 usage, 3 runtime), never a crash.
source "$(dirname "$0")/lib_cli.sh"

expect 2 "unknown command 'frobnicate'" -- "$FP4" frobnicate
expect 2 "unknown option '--bogus'" -- "$FP4" run --bogus
expect 2 "--json needs a value" -- "$FP4" run --json
# a value left out: the next option is not taken as the value (a file named --verify-only)
expect 2 "--json needs a value, got the option --verify-only" -- "$FP4" run --json --verify-only
expect 2 "--csv needs a value, got the option --quiet" -- "$FP4" run --backend cpu-ref --csv --quiet
expect 2 "--html needs a value, got the option --svg" -- "$FP4" report x.json --html --svg d
expect 2 "--out needs a value, got the option --encode-scale" -- "$FP4" quantize --in x.npy --out --encode-scale 1
# an output that is another output or an input would overwrite it: the same path, or the
# same file by another path; the input is left as it was
expect 2 "--csv .*same.out is also --json .*same.out" -- "$FP4" run --backend cpu-ref --shape 16x16x16 --json "$TMP/same.out" --csv "$TMP/same.out"
expect 2 "--csv .*r.csv is also --json" -- "$FP4" moe --dims 64,32,4,2 --tokens 2 --json "$TMP/r.csv" --csv "$TMP/./r.csv"
printf '16 16 16\n' >"$TMP/spec.txt"
expect 2 "--json .*spec.txt is also --spec .*spec.txt" -- "$FP4" run --backend cpu-ref --spec "$TMP/spec.txt" --json "$TMP/../$(basename "$TMP")/spec.txt"
[ "$(cat "$TMP/spec.txt")" = "16 16 16" ] || fail "the --spec file was changed"
expect 2 "--out x.npy is also --in x.npy" -- "$FP4" quantize --in x.npy --out x.npy
expect 2 "--out a.st is also --a a.st" -- "$FP4" gemm --a a.st --b b.st --out a.st
expect 2 "--json t.npy is also --trace t.npy" -- "$FP4" moe --dims 64,32,4,2 --routing trace --trace t.npy --json t.npy
expect 2 "--shape: .*K=6100 is not a multiple of 16" -- "$FP4" run --shape 16x2048x6100
expect 2 "--shape: .*must be >= 1" -- "$FP4" run --shape 0x2048x6144
expect 2 "--shape: .*must be >= 1" -- "$FP4" run --shape=-4x2048x6144
expect 2 "--shape: .*must be >= 1" -- "$FP4" run --shape 16x2048x-16
expect 2 "--shape: '16x2048' is not MxNxK" -- "$FP4" run --shape 16x2048
expect 2 "--shape: '16xabcx64' is not MxNxK" -- "$FP4" run --shape 16xabcx64
expect 2 "--shape: ' 16x64x64' is not MxNxK" -- "$FP4" run --shape " 16x64x64"
expect 2 "--shape: '\+16x64x64' is not MxNxK" -- "$FP4" run --shape +16x64x64
expect 2 "--shape: '16x 64x64' is not MxNxK" -- "$FP4" run --shape "16x 64x64"
expect 2 "--shape: trailing comma" -- "$FP4" run --shape 16x64x64,
expect 2 "--shape: .*overflow" -- "$FP4" run --shape 4611686018427387904x16x16
expect 2 "--shape: .*overflow" -- "$FP4" run --shape 3037000500x3037000500x16
expect 2 "--shape: .*K above 2\^20" -- "$FP4" run --shape 1x1x2097152
expect 2 "--backend: unknown backend 'nope'" -- "$FP4" run --backend nope
# an option given twice would silently lose its first value; those that add to
# a list (run's --shape, moe's --step) may repeat
expect 2 "--max-time given twice: it takes one value" -- "$FP4" run --max-time 1 --max-time=2
expect 2 "--backend given twice" -- "$FP4" run --backend cpu-ref --backend cpu-ref
expect 2 "--tokens given twice" -- "$FP4" moe --model glm5 --tokens 1 --tokens 2
expect 2 "--threshold given twice" -- "$FP4" compare --threshold 1 --threshold 2 a b
expect 2 "--out given twice" -- "$FP4" quantize --out a --out b
expect 0 "custom +16 +16 +32" -- "$FP4" run --shape 16x16x16 --shape=16x16x32 --backend cpu-ref --verify-only --quiet
expect 2 "--preset: unknown preset 'nope'" -- "$FP4" run --preset nope
expect 2 "--seed: 'abc' is not an integer" -- "$FP4" run --seed abc
expect 2 "--data: unknown kind 'zeros'" -- "$FP4" run --data zeros
expect 2 "--max-time must be > 0" -- "$FP4" run --max-time 0
expect 2 "--baseline 'cuda-ref' is not among" -- "$FP4" run --backend cpu-ref --baseline cuda-ref
expect 3 "cannot open spec file $TMP/none.txt" -- "$FP4" run --spec "$TMP/none.txt"
printf '16 2048 6144 ok\n# comment\n\n64 768 6100 bad\n' >"$TMP/spec.txt"
expect 3 "spec.txt:4: .*K=6100 is not a multiple of 16" -- "$FP4" run --spec "$TMP/spec.txt"
printf '16 2048\n' >"$TMP/spec2.txt"
expect 3 "spec2.txt:1: expected 'M N K \[label\]'" -- "$FP4" run --spec "$TMP/spec2.txt"
printf '16 2048 6144\n\0 64\n' >"$TMP/specnul.txt"
expect 3 "specnul.txt:2: NUL byte" -- "$FP4" run --spec "$TMP/specnul.txt"
printf '# nothing\n' >"$TMP/spec3.txt"
expect 3 "no problems in the spec file" -- "$FP4" run --spec "$TMP/spec3.txt"
# limits: a line is refused as soon as it passes 4096 bytes; labels must be UTF-8
{ printf '16 2048 6144 '; head -c 5000000 /dev/zero | tr '\0' 'a'; printf '\n'; } >"$TMP/speclong.txt"
expect 3 "speclong.txt:1: line too long \(more than 4096 bytes\)" -- "$FP4" run --spec "$TMP/speclong.txt"
printf '16 2048 6144 bad\377\n' >"$TMP/specutf8.txt"
expect 3 "specutf8.txt:1: a label is not valid UTF-8" -- "$FP4" run --spec "$TMP/specutf8.txt"
expect 3 "cannot load plugin" -- "$FP4" run --plugin "$TMP/none.so"
expect 3 "" -- "$FP4" run --shape 16x64x64 --json "$TMP/no/such/dir/out.json" --quiet
expect 3 "cannot write" -- "$FP4" run --shape 16x64x64 --csv "$TMP/no/such/dir/out.csv"

# quantize
expect 2 "--in is required" -- "$FP4" quantize --out "$TMP/w.safetensors"
expect 2 "--out is required" -- "$FP4" quantize --in "$TMP/x.npy"
expect 3 "none.npy" -- "$FP4" quantize --in "$TMP/none.npy" --out "$TMP/w.safetensors"
"$MKFILE" npy-f32 4 40 1 "$TMP/k40.npy"
expect 3 "K=40 is not a multiple of 16" -- "$FP4" quantize --in "$TMP/k40.npy" --out "$TMP/w.safetensors"
"$MKFILE" npy-f32 4 64 1 "$TMP/x.npy"
"$MKFILE" truncate "$TMP/x.npy" 200 "$TMP/trunc.npy"
expect 3 "trunc.npy: .*truncated" -- "$FP4" quantize --in "$TMP/trunc.npy" --out "$TMP/w.safetensors"
"$MKFILE" npy-vec 64 1 "$TMP/vec.npy"
expect 3 "vec.npy" -- "$FP4" quantize --in "$TMP/vec.npy" --out "$TMP/w.safetensors"
"$MKFILE" npy-raw '>f4' 0 4 64 4 "$TMP/be.npy"
expect 3 "be.npy" -- "$FP4" quantize --in "$TMP/be.npy" --out "$TMP/w.safetensors"
"$MKFILE" npy-raw '<f4' 1 4 64 4 "$TMP/fortran.npy"
expect 3 "fortran.npy" -- "$FP4" quantize --in "$TMP/fortran.npy" --out "$TMP/w.safetensors"
"$MKFILE" npy-raw '<i4' 0 4 64 4 "$TMP/int.npy"
expect 3 "int.npy" -- "$FP4" quantize --in "$TMP/int.npy" --out "$TMP/w.safetensors"
expect 2 "--encode-scale must be a positive normal fp32" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/w.safetensors" --encode-scale -1
expect 2 "--encode-scale must be a positive normal fp32 number \(got 1e39\)" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/w.safetensors" --encode-scale 1e39
expect 2 "--input-scale must be a positive normal fp32" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/w.safetensors" --input-scale 1e39
expect 3 "cannot|No such" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/no/dir/w.safetensors"

# gemm / check
"$MKFILE" nvfp4 8 64 1 "$TMP/a.safetensors"
"$MKFILE" nvfp4 16 64 2 "$TMP/b.safetensors"
"$MKFILE" nvfp4 16 128 3 "$TMP/b128.safetensors"
expect 2 "--a is required" -- "$FP4" gemm --b "$TMP/b.safetensors" --out "$TMP/d.npy"
expect 2 "--out is required" -- "$FP4" gemm --a "$TMP/a.safetensors" --b "$TMP/b.safetensors"
expect 2 "--backend: unknown backend 'nope'" -- "$FP4" gemm --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy" --backend nope
expect 3 "K=64 but .* K=128" -- "$FP4" gemm --a "$TMP/a.safetensors" --b "$TMP/b128.safetensors" --out "$TMP/d.npy"
expect 3 "x.npy" -- "$FP4" gemm --a "$TMP/x.npy" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
"$MKFILE" truncate "$TMP/a.safetensors" 100 "$TMP/atrunc.safetensors"
expect 3 "atrunc.safetensors" -- "$FP4" gemm --a "$TMP/atrunc.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
"$MKFILE" setbyte "$TMP/a.safetensors" 12 0x7B "$TMP/acorrupt.safetensors" 2>/dev/null ||
    "$MKFILE" setbyte "$TMP/a.safetensors" 12 123 "$TMP/acorrupt.safetensors"
expect 3 "acorrupt.safetensors" -- "$FP4" gemm --a "$TMP/acorrupt.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
"$MKFILE" npy-f32 8 15 1 "$TMP/dwrong.npy"
expect 3 "dwrong.npy is \[8, 15\], expected \[8, 16\]" -- "$FP4" check --a "$TMP/a.safetensors" --b "$TMP/b.safetensors" --d "$TMP/dwrong.npy"
# weight_scale_2 is the last 4 bytes of a checkpoint without input_scale: make it
# ~1e38 in both operands, so alpha overflows fp32
"$MKFILE" setbyte "$TMP/a.safetensors" -1 126 "$TMP/ahuge.safetensors"
"$MKFILE" setbyte "$TMP/b.safetensors" -1 126 "$TMP/bhuge.safetensors"
expect 3 "not a usable alpha" -- "$FP4" check --a "$TMP/ahuge.safetensors" --b "$TMP/bhuge.safetensors" --d "$TMP/dwrong.npy"
expect 2 "--d is required" -- "$FP4" check --a "$TMP/a.safetensors" --b "$TMP/b.safetensors"
# a file of the other kind says so
expect 3 "x.npy: this is a .npy file, not safetensors" -- "$FP4" gemm --a "$TMP/x.npy" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
expect 3 "a.safetensors: this is a .safetensors file, not .npy" -- "$FP4" quantize --in "$TMP/a.safetensors" --out "$TMP/w2.safetensors"
# a shape list longer than any tensor's is refused before the header is parsed
st_header() { # JSON OUT: a safetensors file with that header and one data byte
    local n=${#1} le="" i
    for i in 0 1 2 3 4 5 6 7; do le+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
    { printf "$le"; printf '%s' "$1"; printf 'z'; } >"$2"
}
st_header "{\"weight\":{\"dtype\":\"U8\",\"shape\":[$(printf '1,%.0s' $(seq 100))1],\"data_offsets\":[0,1]}}" "$TMP/longshape.safetensors"
expect 3 "longshape.safetensors: header has a list of more than 64 entries" -- "$FP4" gemm --a "$TMP/longshape.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"
st_header '{"bad\u0001name":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}' "$TMP/badname.safetensors"
expect 3 "badname.safetensors: a tensor name has a control character" -- "$FP4" gemm --a "$TMP/badname.safetensors" --b "$TMP/b.safetensors" --out "$TMP/d.npy"

# compare
expect 2 "expects two JSON files" -- "$FP4" compare "$TMP/one.json"
expect 3 "none.json" -- "$FP4" compare "$TMP/none.json" "$TMP/none2.json"
printf '{"schema_version": 1' >"$TMP/broken.json"
expect 3 "broken.json" -- "$FP4" compare "$TMP/broken.json" "$TMP/broken.json"
expect 2 "--threshold: 'x' is not a number" -- "$FP4" compare a.json b.json --threshold x
# numbers JSON cannot hold exactly, bytes that are not UTF-8, and the size cap
row='"label":"x","n":2,"k":16,"backend":"b","state":"ok","l2":"cold"'
printf '{"schema":"fp4bench/1","schema_version":1,"device":{},"settings":{},"rows":[{%s,"m":1,"time_us":{"count":1,"median":1e999}}]}' "$row" >"$TMP/inf.json"
expect 3 "inf.json: rows\[0\].time_us.median: number out of range \(not finite\)" -- "$FP4" compare "$TMP/inf.json" "$TMP/inf.json"
printf '{"schema":"fp4bench/1","schema_version":1,"device":{},"settings":{},"rows":[{%s,"m":9007199254740993,"time_us":{"count":1}}]}' "$row" >"$TMP/big.json"
expect 3 "big.json: rows\[0\].m: integer beyond 2\^53 - 1" -- "$FP4" compare "$TMP/big.json" "$TMP/big.json"
printf '{"schema":"fp4bench/1","schema_version":1,"device":{},"settings":{},"rows":[{"label":"x\377","n":2,"k":16,"backend":"b","state":"ok","l2":"cold","m":1,"time_us":{"count":1}}]}' >"$TMP/utf8.json"
expect 3 "utf8.json: rows\[0\].label: string is not valid UTF-8" -- "$FP4" compare "$TMP/utf8.json" "$TMP/utf8.json"
truncate -s 268435457 "$TMP/huge.json"
expect 3 "huge.json: .*more than the 268435456 bytes \(256 MiB\)" -- "$FP4" compare "$TMP/huge.json" "$TMP/huge.json"
rm -f "$TMP/huge.json"

finish
