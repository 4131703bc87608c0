#!/usr/bin/env bash
# Takes the result files of a bench/device-run.sh run (bench, moe, refresh...)
# into bench/results/<gpu>/ and regenerates what is made from them.
#
# Usage: bench/take-results.sh OUT_DIR [FP4BENCH]
#   OUT_DIR   the run's $OUT: baseline.json and moe-NAME.json files
#   FP4BENCH  a built fp4bench: with it the README's plot is redrawn from the
#             H200 baseline [build/fp4bench when it exists]
#
# Each file goes to the folder of the GPU it names (NVIDIA H200 -> h200, NVIDIA
# H100 ... -> h100; the folder must exist), baseline.json as baseline.json and
# moe-NAME.json as moe/NAME.json for the NAMEs of bench/moe-runs.txt (the
# runs whose files are kept; other runs' files are skipped). A file from
# another commit than this checkout's is taken with a warning. Then
# bench/perf_table.py --update rewrites the tables of README.md and
# docs/PERF.md. Run from the repository root.
set -u
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
out=$1
fp4bench=${2:-build/fp4bench}
[ -f bench/perf_table.py ] && [ -d bench/results ] || { echo "run from the repository root" >&2; exit 2; }
[ -d "$out" ] || { echo "$out: not a folder" >&2; exit 2; }

head=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
taken=0
for f in "$out"/baseline.json "$out"/moe-*.json; do
  [ -f "$f" ] || continue
  # the GPU folder and the commit, from the file itself
  info=$(python3 -c 'import json, re, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
dev = d.get("device") or {}
m = re.search(r"\b([A-Z]\d{3})\b", dev.get("name") or "") if dev.get("present") else None
print((m.group(1).lower() if m else "-") + " " + ((d.get("fp4bench") or {}).get("commit") or "-"))' "$f") ||
    { echo "$f: not an fp4bench JSON file" >&2; exit 1; }
  gpu=${info% *} commit=${info#* }
  [ "$gpu" != - ] || { echo "$f: names no GPU of a bench/results folder" >&2; exit 1; }
  [ -d "bench/results/$gpu" ] || { echo "$f: no bench/results/$gpu/ for its GPU (make the folder and its README first)" >&2; exit 1; }
  name=$(basename "$f")
  if [ "$name" = baseline.json ]; then
    dest=bench/results/$gpu/baseline.json
  else
    dest=bench/results/$gpu/moe/${name#moe-}
  fi
  run=${name#moe-} run=${run%.json}
  if [ "$name" != baseline.json ] && ! grep -q "^$run: " bench/moe-runs.txt; then
    echo "$f: skipped, $run is no run of bench/moe-runs.txt"
    continue
  fi
  mkdir -p "$(dirname "$dest")" || exit 1
  [ "$commit" = "$head" ] || echo "warning: $f is from commit $commit, this checkout is $head"
  cp "$f" "$dest" || exit 1
  echo "$f -> $dest"
  taken=$((taken + 1))
done
[ $taken -gt 0 ] || { echo "$out: no baseline.json or moe-NAME.json to take" >&2; exit 1; }

python3 bench/perf_table.py --update bench/results/h200/baseline.json bench/results/h200/moe/*.json \
  bench/results/h100/baseline.json bench/results/h100/moe/*.json README.md docs/PERF.md || exit 1
if [ -x "$fp4bench" ]; then
  plots=$(mktemp -d)
  "$fp4bench" report bench/results/h200/baseline.json --svg "$plots" >/dev/null &&
    cp "$plots/latency-n2048-k6144.svg" docs/img/ && echo "docs/img/latency-n2048-k6144.svg redrawn" ||
    { rm -rf "$plots"; echo "the plot: $fp4bench report failed" >&2; exit 1; }
  rm -rf "$plots"
else
  echo "no $fp4bench: the plot docs/img/latency-n2048-k6144.svg is as it was"
fi
echo "by hand: the numbers typed in the prose of README.md and docs/PERF.md (git diff shows the tables that moved)"
