#!/usr/bin/env bash
# bench/take-results.sh on a copy of the repository: a run's files land in the
# folder of the GPU they name and the tables follow them; a file of a GPU with
# no folder, a file that is not fp4bench JSON and an empty run folder fail
# with a message; a run that bench/moe-runs.txt does not list is skipped, one
# it lists lands even with no committed file.
# Usage: take_results.sh [REPO_ROOT]. Exit 77 (skipped) without python3.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
repo=$tmp/repo out=$tmp/out
mkdir -p "$repo/docs" "$out"
cp -r "$ROOT/bench" "$repo/" && cp "$ROOT/README.md" "$repo/" && cp -r "$ROOT/docs/." "$repo/docs/" || exit 1
cd "$repo" || exit 1
fail=0
no() { echo "FAIL: $*"; fail=1; }

# an H100 GLM-5 file with gate_up at T = 512 set to 999.5 us, and a run no file is kept for;
# without a balanced-routing file the targets read these random-routing rows
rm -f bench/results/h100/moe/glm5-balanced.json
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    q = r.get("moe") or {}
    if r["backend"] == "moe-fp4-sm90" and q.get("step") == "gate_up" and q.get("tokens") == 512:
        r["time_us"]["median"] = 999.5
json.dump(d, open(sys.argv[2], "w"))
json.dump(d, open(sys.argv[3], "w"))' bench/results/h100/moe/glm5.json "$out/moe-glm5.json" "$out/moe-other.json" || exit 1
log=$(bench/take-results.sh "$out" /nonexistent 2>&1) || no "take-results.sh failed: $log"
grep -q "moe-glm5.json -> bench/results/h100/moe/glm5.json" <<<"$log" || no "the H100 file did not go to h100/moe: $log"
grep -q "moe-other.json: skipped" <<<"$log" || no "a run bench/moe-runs.txt does not list was not skipped: $log"
[ ! -e bench/results/h100/moe/other.json ] || no "a run bench/moe-runs.txt does not list was taken"
cmp -s "$out/moe-glm5.json" bench/results/h100/moe/glm5.json || no "h100/moe/glm5.json is not the run's file"
grep -F "| GLM-5 gate_up, T = 512 (" docs/PERF.md | grep -qF "| 999.5 us" ||
  no "the targets table does not show the new H100 time"
python3 bench/perf_table.py --check bench/results/h200/baseline.json bench/results/h200/moe/*.json \
  bench/results/h100/baseline.json bench/results/h100/moe/*.json README.md docs/PERF.md ||
  no "the tables are not up to date after take-results.sh"

# a run of bench/moe-runs.txt with no committed file yet lands, and the targets
# read its balanced rows before the random ones: the H100's T = 512 rows as
# balanced routing, gate_up at 888.5 us
rm -f "$out"/*
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["rows"] = [r for r in d["rows"] if (r.get("moe") or {}).get("tokens") == 512]
for r in d["rows"]:
    r["moe"]["routing"] = "balanced(seed=1)"
    if r["backend"] == "moe-fp4-sm90" and r["moe"]["step"] == "gate_up":
        r["time_us"]["median"] = 888.5
json.dump(d, open(sys.argv[2], "w"))' bench/results/h100/moe/glm5.json "$out/moe-glm5-balanced.json" || exit 1
rm -f bench/results/h100/moe/glm5-balanced.json
log=$(bench/take-results.sh "$out" /nonexistent 2>&1) || no "take-results.sh failed on a balanced run: $log"
cmp -s "$out/moe-glm5-balanced.json" bench/results/h100/moe/glm5-balanced.json ||
  no "the balanced run did not land as h100/moe/glm5-balanced.json: $log"
grep -F "| GLM-5 gate_up, T = 512 (" docs/PERF.md | grep -qF "| 888.5 us" ||
  no "the targets table does not read the balanced row"
grep -qF "H100 80GB HBM3's rows are balanced at T = 512" docs/PERF.md ||
  no "the targets note does not say the H100's T = 512 rows are balanced"

# failures: a GPU with no folder, not JSON, nothing to take
rm -f "$out"/*
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["device"]["name"] = "NVIDIA B200"
json.dump(d, open(sys.argv[2], "w"))' bench/results/h100/moe/glm5.json "$out/moe-glm5.json" || exit 1
if log=$(bench/take-results.sh "$out" /nonexistent 2>&1); then no "a B200 file was taken: $log"; fi
grep -q "no bench/results/b200/" <<<"$log" || no "no message for a GPU without a folder: $log"
echo "not json" >"$out/moe-glm5.json"
if log=$(bench/take-results.sh "$out" /nonexistent 2>&1); then no "a file that is not JSON was taken"; fi
grep -q "not an fp4bench JSON file" <<<"$log" || no "no message for a file that is not JSON: $log"
rm -f "$out"/*
if log=$(bench/take-results.sh "$out" /nonexistent 2>&1); then no "an empty folder passed"; fi
grep -q "no baseline.json or moe-NAME.json" <<<"$log" || no "no message for an empty folder: $log"

[ $fail -eq 0 ] && echo "take-results: ok"
exit $fail
