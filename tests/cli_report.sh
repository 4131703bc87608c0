#!/usr/bin/env bash
# fp4bench report end to end: a CPU run becomes an HTML page and SVG files;
# a result with FAILED, unsupported and MoE (steps) rows shows them all, its
# labels escaped; two files give a series per backend and file; bad input is
# one line on stderr and exit 2 or 3. Then the page is opened in headless
# Chromium (tests/browser/check.sh), skipped where there is none.
source "$(dirname "$0")/lib_cli.sh"

# ---- a real run on the CPU -------------------------------------------------------
expect 0 "" -- "$FP4" run --backend cpu-ref --shape 16x64x64,32x64x64 --json "$TMP/x.json" \
    --max-time 0.2 --warmup-ms 0 --quiet
expect 0 "wrote $TMP/r.html: 2 rows from 1 file" -- "$FP4" report "$TMP/x.json" --html "$TMP/r.html" --svg "$TMP/svg"
grep -q "wrote 2 plots to $TMP/svg" "$TMP/out" || fail "report --svg: $(cat "$TMP/out")"
[ -s "$TMP/r.html" ] || fail "no r.html"
[ -n "$(find "$TMP" -name '.r.html.*')" ] && fail "a temporary of r.html left behind"
head -1 "$TMP/r.html" | grep -qx '<!DOCTYPE html>' || fail "r.html does not start with a doctype"
tail -1 "$TMP/r.html" | grep -qx '</html>' || fail "r.html does not end with </html>"
grep -q 'http' "$TMP/r.html" && fail "r.html names a URL: $(grep -o '.\{20\}http.\{30\}' "$TMP/r.html" | head -3)"
grep -q '<script' "$TMP/r.html" && fail "r.html has a script"
[ "$(grep -c 'data-plot="latency" data-n="64" data-k="64"' "$TMP/r.html")" -eq 1 ] || fail "r.html: not one latency panel for N=64 K=64"
[ "$(grep -o '<polyline [^>]*data-series="cpu-ref"' "$TMP/r.html" | wc -l)" -eq 1 ] || fail "r.html: not one cpu-ref line"
grep -q 'data-plot="roofline"' "$TMP/r.html" || fail "r.html: no roofline"
grep -q 'data-plot="speedup"' "$TMP/r.html" && fail "r.html: a speedup plot without a baseline"
grep -q 'no baseline' "$TMP/r.html" || fail "r.html: the speedup section does not say why it is empty"
grep -q 'GPU</th><td>none (' "$TMP/r.html" || fail "r.html: the header does not say there was no GPU"
for f in latency-n64-k64 roofline; do
    [ -s "$TMP/svg/$f.svg" ] || fail "no $f.svg"
    head -c 200 "$TMP/svg/$f.svg" | grep -q '<svg xmlns="http://www.w3.org/2000/svg"' || fail "$f.svg is not a standalone SVG"
done
[ "$(ls "$TMP/svg" | wc -l)" -eq 2 ] || fail "svg folder: $(ls "$TMP/svg")"
# --svg alone writes no HTML
expect 0 "" -- "$FP4" report "$TMP/x.json" --svg "$TMP/svg-only"
[ "$(ls "$TMP/svg-only")" = "$(printf 'latency-n64-k64.svg\nroofline.svg')" ] || fail "--svg alone: $(ls "$TMP/svg-only")"
grep -q "wrote .*html" "$TMP/out" && fail "--svg alone wrote a page: $(cat "$TMP/out")"
checks=$((checks + 19))

# ---- a GPU-like result with FAILED, unsupported and MoE rows ----------------------
# row LABEL M N K BACKEND STATE TIME_OR_REASON RATIO|- [STEPS]: one JSON row; an
# ok row is timed at TIME_OR_REASON us, any other has it as its reason
row() {
    local ratio=null steps="" count=0 median=null reason=$7 flops bytes tflops=null
    flops=$(awk "BEGIN{print 2 * $2 * $3 * $4}")
    bytes=$(awk "BEGIN{print $3 * $4 * 0.5625 + 2 * $2 * ($3 + $4)}")
    if [ "$6" = ok ]; then
        count=11 median=$7 reason=""
        tflops=$(awk "BEGIN{print $flops / $7 / 1e6}")
    fi
    [ "$8" = "-" ] || ratio="{\"value\": $8, \"lo\": $(awk "BEGIN{print $8 * 0.98}"), \"hi\": $(awk "BEGIN{print $8 * 1.02}")}"
    [ $# -ge 9 ] && steps=", \"steps\": $9"
    printf '{"label": "%s", "m": %d, "n": %d, "k": %d, "backend": "%s", "state": "%s", "reason": "%s", "verified": 1, "l2": "cold", "timing": "graph", "time_us": {"count": %d, "median": %s, "noise": 0.002}, "flops": %s, "bytes": %s, "tflops": %s, "gbps": 100, "pct_roofline": 50, "ratio": %s%s}' \
        "$1" "$2" "$3" "$4" "$5" "$6" "$reason" "$count" "$median" "$flops" "$bytes" "$tflops" "$ratio" "$steps"
}
gpu_json() { # gpu_json FILE READ_GBPS
    {
        printf '{"schema": "fp4bench/1", "schema_version": 1, "fp4bench": {"version": "0.1.0", "commit": "feedbeef"},\n'
        printf '"command": "fp4bench run --spec <moe>.spec",\n'
        printf '"device": {"present": true, "name": "NVIDIA H200", "cc_major": 9, "cc_minor": 0, "sms": 132, "driver_version": 13000, "runtime_version": 12080, "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 3201, "nvml": true, "driver_string": "580.1"},\n'
        printf '"ceilings": {"measured": true, "read_gbps": %s, "bf16_tflops": 840, "fp8_tflops": 1460},\n' "$2"
        printf '"settings": {"baseline": "cublas-bf16"},\n"rows": [\n'
        row 'moe <up> & \"x\"' 1 2048 6144 cublas-bf16 ok 12 1; echo ,
        row 'moe <up> & \"x\"' 1 2048 6144 fp4-sm90 ok 7 1.71; echo ,
        row 'moe <up> & \"x\"' 64 2048 6144 cublas-bf16 ok 13 1; echo ,
        row 'moe <up> & \"x\"' 64 2048 6144 fp4-sm90 ok 12 1.08; echo ,
        row attn 16 768 6144 cublas-bf16 ok 8 1; echo ,
        row attn 16 768 6144 fp4-sm90 FAILED 'wrong result: max error 0.5 <at (3, 7)>' -; echo ,
        row attn 16 768 6144 cublaslt-nvfp4 unsupported 'needs sm_100 & newer' -; echo ,
        row attn 256 768 6144 cublas-bf16 ok 11 1; echo ,
        row attn 256 768 6144 fp4-sm90 ok 15 0.73; echo ,
        row moe-layer 64 2048 6144 moe-w4a4 ok 36.5 - \
            '[{"name": "route", "us": 3}, {"name": "gate_up", "us": 20}, {"name": "act", "us": 1.5}, {"name": "down", "us": 12}]'
        printf '\n]}\n'
    } >"$1"
}
gpu_json "$TMP/gpu.json" 4500
expect 0 "" -- "$FP4" report "$TMP/gpu.json" --html "$TMP/gpu.html" --svg "$TMP/gpu-svg"
h=$TMP/gpu.html
# latency: panel N=2048 has cublas-bf16, fp4-sm90, moe-w4a4; N=768 cublas-bf16, fp4-sm90
[ "$(grep -o '<polyline [^>]*data-series=' "$h" | wc -l)" -eq 5 ] || fail "gpu.html: not 5 series lines"
[ "$(grep -c 'data-plot="latency"' "$h")" -eq 2 ] || fail "gpu.html: not 2 latency panels"
grep -q 'data-plot="speedup"' "$h" || fail "gpu.html: no speedup plot"
grep -q 'data-plot="steps"' "$h" || fail "gpu.html: no steps plot"
[ "$(grep -o 'data-step="[a-z_]*"' "$h" | sort -u | wc -l)" -eq 4 ] || fail "gpu.html: not 4 steps"
grep -q 'data-state="FAILED"' "$h" || fail "gpu.html: no FAILED row"
grep -q 'wrong result: max error 0.5 &lt;at (3, 7)&gt;' "$h" || fail "gpu.html: the FAILED reason is missing or not escaped"
grep -q 'data-state="unsupported"' "$h" || fail "gpu.html: no unsupported row"
grep -q 'needs sm_100 &amp; newer' "$h" || fail "gpu.html: the unsupported reason is missing or not escaped"
grep -q 'moe &lt;up&gt; &amp; &quot;x&quot;' "$h" || fail "gpu.html: the label is not escaped"
grep -q '<up>' "$h" && fail "gpu.html: an unescaped label"
grep -q 'http' "$h" && fail "gpu.html names a URL"
grep -q 'read 4500 GB/s' "$h" || fail "gpu.html: no bandwidth ceiling"
grep -q '580.1, CUDA driver API 13.0' "$h" || fail "gpu.html: no driver"
[ "$(ls "$TMP/gpu-svg" | tr '\n' ' ')" = "latency-n2048-k6144.svg latency-n768-k6144.svg roofline.svg speedup.svg steps.svg " ] ||
    fail "gpu-svg: $(ls "$TMP/gpu-svg" | tr '\n' ' ')"
if command -v python3 >/dev/null; then # every SVG is well-formed XML
    for f in "$TMP"/gpu-svg/*.svg "$TMP"/svg/*.svg; do
        python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$f" 2>"$TMP/xml.err" ||
            fail "$(basename "$f") is not well-formed XML: $(tail -1 "$TMP/xml.err")"
    done
fi
checks=$((checks + 17))

# ---- two files: a series per backend and file ----------------------------------------
gpu_json "$TMP/old.json" 4400
expect 0 "2 files" -- "$FP4" report "$TMP/old.json" "$TMP/gpu.json" --html "$TMP/two.html"
[ "$(grep -o '<polyline [^>]*data-series=' "$TMP/two.html" | wc -l)" -eq 10 ] || fail "two.html: not 10 series lines"
grep -q 'data-series="cublas-bf16 (old.json)"' "$TMP/two.html" || fail "two.html: no cublas-bf16 (old.json)"
grep -q 'data-series="cublas-bf16 (gpu.json)"' "$TMP/two.html" || fail "two.html: no cublas-bf16 (gpu.json)"
[ "$(grep -c '<table class="results"' "$TMP/two.html")" -eq 2 ] || fail "two.html: not two tables"
checks=$((checks + 4))

# ---- bad input: one line, exit 2 (usage) or 3 (runtime) --------------------------------
expect 2 "expects at least one JSON result file" -- "$FP4" report --html "$TMP/e.html"
expect 2 "nothing to write" -- "$FP4" report "$TMP/x.json"
expect 2 "unknown option '--pdf'" -- "$FP4" report "$TMP/x.json" --pdf x.pdf
expect 2 "--html needs a value" -- "$FP4" report "$TMP/x.json" --html
expect 2 "--html needs a value, not an empty one" -- "$FP4" report "$TMP/x.json" --html ""
cp "$TMP/x.json" "$TMP/self.json"
expect 2 "--html .*self.json is also the input file" -- "$FP4" report "$TMP/self.json" --html "$TMP/self.json"
cmp -s "$TMP/x.json" "$TMP/self.json" || fail "report --html over its input changed the input"
checks=$((checks + 1))
expect 3 "cannot open $TMP/none.json" -- "$FP4" report "$TMP/none.json" --html "$TMP/e.html"
printf '{"schema_version": 1, "rows": [' >"$TMP/cut.json"
expect 3 "cut.json: not valid JSON" -- "$FP4" report "$TMP/cut.json" --html "$TMP/e.html"
printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {}, "rows": []}\n' >"$TMP/empty.json"
expect 3 "empty.json: no rows to report" -- "$FP4" report "$TMP/x.json" "$TMP/empty.json" --html "$TMP/e.html"
# times at the ends of the double range plot in bounded time (a subnormal median once
# made the log axis count 2^31 decades)
for t in 5e-324 1.7e308; do
    printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {}, "rows": [{"label": "a", "m": 1, "n": 16, "k": 16, "backend": "b", "state": "ok", "l2": "cold", "time_us": {"count": 3, "median": %s}, "tflops": %s}]}\n' $t $t >"$TMP/extreme.json"
    expect 0 "wrote" -- timeout 30 "$FP4" report "$TMP/extreme.json" --html "$TMP/extreme.html" --svg "$TMP/extreme.d"
done
# a key given twice would be read as its first value, silently
printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {}, "rows": [], "rows": []}\n' >"$TMP/dup.json"
expect 3 "dup.json: rows: given twice" -- "$FP4" report "$TMP/dup.json" --html "$TMP/e.html"
printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {"seed": 1, "seed": 2}, "rows": []}\n' >"$TMP/dup2.json"
expect 3 "dup2.json: settings.seed: given twice" -- "$FP4" compare "$TMP/dup2.json" "$TMP/dup2.json"
printf '[1, 2]\n' >"$TMP/array.json"
expect 3 "array.json: .*expected an object" -- "$FP4" report "$TMP/array.json" --html "$TMP/e.html"
printf '{"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {}, "rows": [{"label": "a", "m": 1, "n": 16, "k": 16, "backend": "b", "state": "ok", "l2": "cold", "time_us": {"count": 0}, "steps": [{"name": "x", "us": "fast"}]}]}\n' >"$TMP/steps.json"
expect 3 "steps.json: rows\[0\].steps\[0\].us: expected a number" -- "$FP4" report "$TMP/steps.json" --html "$TMP/e.html"
[ -e "$TMP/e.html" ] && fail "a failed report left $TMP/e.html"
expect 3 "cannot create $TMP/no/such/r.html: No such file" -- "$FP4" report "$TMP/x.json" --html "$TMP/no/such/r.html"
: >"$TMP/afile"
expect 3 "cannot create folder $TMP/afile" -- "$FP4" report "$TMP/x.json" --svg "$TMP/afile"
checks=$((checks + 1))

# ---- the page in a browser -----------------------------------------------------------
bash "$(dirname "$0")/browser/check.sh" "$TMP/gpu.html" "$TMP/browser" 5
rc=$?
if [ $rc -eq 77 ]; then
    echo "(the browser check was skipped: no Chromium)"
elif [ $rc -ne 0 ]; then
    fail "browser check of gpu.html exited $rc"
fi
checks=$((checks + 1))

finish
