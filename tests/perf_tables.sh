#!/usr/bin/env bash
# The generated tables of README.md and docs/PERF.md match the committed
# H200 results, and the H100's for the targets (bench/perf_table.py --check);
# the MoE region reads MoE rows: a case on each path, the layer's steps, and no
# GEMM row in it; the targets table measures every target on both GPUs, and
# its verdict follows the time (a time set below and above a limit). Each
# committed MoE file (bench/results/*/moe/NAME.json) holds the rows that
# bench/device-run.sh runs for NAME (moe_args, from bench/moe-runs.txt), and
# its refresh mode runs every NAME of bench/moe-runs.txt.
# Usage: perf_tables.sh [REPO_ROOT]. Exit 77 (skipped) without python3.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
fail=0
moe=(bench/results/h200/moe/*.json)
h100=(bench/results/h100/baseline.json bench/results/h100/moe/*.json)
python3 bench/perf_table.py --check bench/results/h200/baseline.json "${moe[@]}" "${h100[@]}" README.md docs/PERF.md ||
  { echo "FAIL: generated tables out of date: bench/perf_table.py --update bench/results/h200/baseline.json bench/results/h200/moe/*.json bench/results/h100/baseline.json bench/results/h100/moe/*.json README.md docs/PERF.md"; fail=1; }
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
targets=$(python3 bench/perf_table.py --print targets bench/results/h200/baseline.json "${moe[@]}" "${h100[@]}") ||
  { echo "FAIL: --print targets"; exit 1; }
grep -qF "| case | target | H200 | H200: target | H100 80GB HBM3 |" <<<"$targets" ||
  { echo "FAIL: the targets table has no H200 verdict and H100 column"; fail=1; }
n=$(grep -cE "^\| (GLM-5|dense decode) " <<<"$targets")
[ "$n" -eq 13 ] || { echo "FAIL: the targets table has $n target rows, not 13"; fail=1; }
grep -E "^\| (GLM-5|dense decode) " <<<"$targets" | grep -vE "\| (met|missed[^|]*) \|[^|]+\|$" &&
  { echo "FAIL: target rows above lack a verdict or an H100 number"; fail=1; }
# the verdict follows the time: GLM-5 gate_up at T = 512 set to 1000 us, then 1100 (limit 1050)
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
for us in 1000 1100; do
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    q = r.get("moe") or {}
    if r["backend"] == "moe-fp4-sm90" and q.get("step") == "gate_up" and q.get("tokens") == 512:
        r["time_us"]["median"] = float(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"))' bench/results/h200/moe/glm5.json "$tmpd/glm5.json" "$us" ||
    { echo "FAIL: the timed copy"; exit 1; }
  want="| met |"
  [ "$us" = 1100 ] && want="| missed by 5% |"
  python3 bench/perf_table.py --print targets "$tmpd/glm5.json" | grep -F "| GLM-5 gate_up, T = 512 (" |
    grep -qF -- "$want" || { echo "FAIL: gate_up at $us us is not '$want'"; fail=1; }
done
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
done
for name in $(sed -n 's/^\([a-z0-9-]*\): .*/\1/p' bench/moe-runs.txt); do
  grep -qE "\"$name [0-9]+\"" <<<"$refresh" || { echo "FAIL: device-run.sh refresh leaves out $name"; fail=1; }
done
[ $fail -eq 0 ] && echo "perf tables: ok"
exit $fail
