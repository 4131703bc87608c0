#!/usr/bin/env bash
# Instruction mix of the fp4 kernels, from the SASS of build-dev's binary
# (cuobjdump on the device): per kernel, the count of each opcode in the code
# (static, not executed). Usage: bench/sass-mix.sh [kernel-regex]. Full SASS
# goes to $OUT/sass.txt.
set -uo pipefail
OUT=${OUT:-/tmp/fp4out}
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
"$CUOBJ" -sass build-dev/fp4bench >"$OUT/sass.txt" 2>&1 || { echo "cuobjdump failed"; exit 0; }
awk -v re="${1:-fp4_sm90|quantize}" '
  /Function :/ { fn=$3; keep = fn ~ re; next }
  keep && /\/\*[0-9a-f]+\*\// {
    line=$0; sub(/.*\*\/ +/, "", line); sub(/^@!?U?P[0-9T] +/, "", line)
    split(line, w, /[ ;]/); op=w[1]; sub(/\..*/, "", op)
    if (op != "") { n[fn]++; c[fn "|" op]++ }
  }
  END {
    for (k in c) { split(k, p, "|"); if (c[k] * 50 >= n[p[1]]) printf "%s %s %d\n", p[1], p[2], c[k] }
    for (f in n) printf "%s TOTAL %d\n", f, n[f]
  }' "$OUT/sass.txt" | sort | awk '{ if ($1 != last) { print "== " $1; last = $1 } print "  " $2, $3 }' | head -${MAXLINES:-800}
