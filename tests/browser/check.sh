#!/usr/bin/env bash
# Open an fp4bench HTML report in headless Chromium, as a reader would:
#   - a screenshot: a PNG of non-trivial size (the page rendered);
#   - the DOM as the browser parsed it (--dump-dom): every plot of the file
#     is an <svg> element there, and so is every series line (<polyline
#     data-series=...>), EXPECTED_LINES of them when given; every results
#     table and per-GPU spread table is there.
# The browser gets no network (a proxy that does not exist): the page must
# not need one.
#
# usage: check.sh REPORT.html OUT_DIR [EXPECTED_LINES]
#   OUT_DIR receives report.png, dom.html and chromium.log.
#   CHROMIUM=/path/to/browser picks the browser (default: chromium,
#   chromium-browser or google-chrome on PATH).
# exit: 0 ok, 1 a check failed, 2 usage, 77 no Chromium here (skipped).
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 REPORT.html OUT_DIR [EXPECTED_LINES]" >&2
    exit 2
fi
html=$1
out=$2
expected=${3:-}

browser=${CHROMIUM:-}
if [ -z "$browser" ]; then
    for b in chromium chromium-browser google-chrome; do
        if command -v "$b" >/dev/null 2>&1; then
            browser=$b
            break
        fi
    done
fi
if [ -z "$browser" ] || ! command -v "$browser" >/dev/null 2>&1; then
    echo "browser check skipped: no Chromium (Debian: apt-get install chromium)"
    exit 77
fi
if [ ! -f "$html" ]; then
    echo "FAIL: no report at $html" >&2
    exit 1
fi
mkdir -p "$out" || exit 1
url="file://$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"

# --no-sandbox: CI and containers run as root, where Chromium's sandbox
# refuses to start; a throwaway profile keeps the user's own untouched.
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
       --disable-extensions --user-data-dir="$out/profile"
       --proxy-server=127.0.0.1:9 --proxy-bypass-list="<-loopback>")

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

rm -f "$out/report.png" "$out/dom.html"
timeout 120 "$browser" "${flags[@]}" --window-size=1400,2400 --screenshot="$out/report.png" \
    "$url" >"$out/chromium.log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "$browser --screenshot exited $rc (see $out/chromium.log)"
png_bytes=$(stat -c %s "$out/report.png" 2>/dev/null || echo 0)
if [ "$png_bytes" -lt 20000 ]; then
    fail "screenshot $out/report.png: $png_bytes bytes (a rendered report is far larger)"
elif [ "$(head -c 8 "$out/report.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
    fail "screenshot $out/report.png is not a PNG"
fi

timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" >"$out/dom.html" 2>>"$out/chromium.log"
rc=$?
[ $rc -eq 0 ] || fail "$browser --dump-dom exited $rc (see $out/chromium.log)"

# how many times a pattern occurs in a file
occurrences() { grep -o -- "$1" "$2" | wc -l; }

svg_file=$(occurrences '<svg ' "$html")
svg_dom=$(occurrences '<svg ' "$out/dom.html")
[ "$svg_file" -gt 0 ] || fail "the report has no plot"
[ "$svg_dom" -eq "$svg_file" ] || fail "$svg_dom plots in the DOM, $svg_file in the file"
lines_file=$(occurrences '<polyline [^>]*data-series=' "$html")
lines_dom=$(occurrences '<polyline [^>]*data-series=' "$out/dom.html")
[ "$lines_dom" -eq "$lines_file" ] || fail "$lines_dom series lines in the DOM, $lines_file in the file"
if [ -n "$expected" ] && [ "$lines_dom" -ne "$expected" ]; then
    fail "$lines_dom series lines in the DOM, expected $expected"
fi
tables_file=$(occurrences '<table class="results"' "$html")
tables_dom=$(occurrences '<table class="results"' "$out/dom.html")
[ "$tables_dom" -eq "$tables_file" ] && [ "$tables_dom" -gt 0 ] ||
    fail "$tables_dom results tables in the DOM, $tables_file in the file"
# the per-GPU spread of files measured on several GPUs (none elsewhere)
spread_file=$(occurrences '<table class="spread"' "$html")
spread_dom=$(occurrences '<table class="spread"' "$out/dom.html")
[ "$spread_dom" -eq "$spread_file" ] || fail "$spread_dom spread tables in the DOM, $spread_file in the file"
# a page the parser had to repair would have moved the tables' rows around
rows_file=$(occurrences '<tr[ >]' "$html")
rows_dom=$(occurrences '<tr[ >]' "$out/dom.html")
[ "$rows_dom" -eq "$rows_file" ] || fail "$rows_dom table rows in the DOM, $rows_file in the file"

echo "browser check: $browser, screenshot $png_bytes bytes, $svg_dom plots, $lines_dom series lines, $tables_dom tables in the DOM"
[ $failures -eq 0 ]
