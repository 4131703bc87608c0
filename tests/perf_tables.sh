#!/usr/bin/env bash
# The generated tables of README.md and docs/PERF.md match the committed
# H200 results (bench/perf_table.py --check), and the MoE region reads MoE
# rows: a case on each path, the layer's steps, and no GEMM row in it. Each
# committed MoE file (bench/results/*/moe/NAME.json) holds the rows that
# bench/device-run.sh runs for NAME (moe_args), and its refresh mode runs NAME.
# Usage: perf_tables.sh [REPO_ROOT]. Exit 77 (skipped) without python3.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
fail=0
moe=(bench/results/h200/moe/*.json)
python3 bench/perf_table.py --check bench/results/h200/baseline.json "${moe[@]}" README.md docs/PERF.md ||
  { echo "FAIL: generated tables out of date: bench/perf_table.py --update bench/results/h200/baseline.json bench/results/h200/moe/*.json README.md docs/PERF.md"; fail=1; }
out=$(python3 bench/perf_table.py --print moe "${moe[@]}") || { echo "FAIL: --print moe"; exit 1; }
for want in "| GLM-5 gate_up | 1 | " "| GLM-5 gate_up | 2048 | " "| streaming |" "| wide |" \
  "| GLM-5 layer | 512 | " "skewed (Zipf 1.2)" "| gpt-oss-120b down | 512 | "; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: the moe region has no '$want'"; fail=1; }
done
steps=$(python3 bench/perf_table.py --print moe-steps "${moe[@]}") || { echo "FAIL: --print moe-steps"; exit 1; }
grep -qE "^\| GLM-5 layer \| 512 \| moe-fp4-sm90 \| [0-9.]+ \| route " <<<"$steps" ||
  { echo "FAIL: moe-steps has no moe-fp4-sm90 layer row with its steps"; fail=1; }
gemm=$(python3 bench/perf_table.py --print moe bench/results/h200/baseline.json)
[ "$gemm" = "No MoE rows among the results." ] || { echo "FAIL: GEMM rows read as MoE rows"; fail=1; }
eval "$(sed -n '/^moe_args() {/,/^}/p' bench/device-run.sh)"
declare -F moe_args >/dev/null || { echo "FAIL: no moe_args in bench/device-run.sh"; exit 1; }
refresh=$(sed -n '/^mode_refresh() {/,/^}/p' bench/device-run.sh)
for f in bench/results/*/moe/*.json; do
  name=$(basename "$f" .json)
  want=$(moe_args "$name") || { echo "FAIL: $f: device-run.sh has no MoE run named $name"; fail=1; continue; }
  # the recorded command less the per-run options (--max-time, --json)
  got=$(python3 -c 'import json, sys
words = json.load(open(sys.argv[1]))["command"].split()[2:]
keep = [w for i, w in enumerate(words)
        if w not in ("--max-time", "--json") and (i == 0 or words[i - 1] not in ("--max-time", "--json"))]
print(" ".join(keep))' "$f") || { echo "FAIL: $f: no command"; fail=1; continue; }
  [ "$got" = "$want" ] || { echo "FAIL: $f ran '$got', device-run.sh runs '$want'"; fail=1; }
  grep -qE "\"$name [0-9]+\"" <<<"$refresh" || { echo "FAIL: device-run.sh refresh leaves out $name"; fail=1; }
done
[ $fail -eq 0 ] && echo "perf tables: ok"
exit $fail
