#!/usr/bin/env bash
# Where output files go: --json, --html and --out write where a symlink points
# (the link kept), write straight into a FIFO (it stays a FIFO), get the mode
# a created file gets, leave no temporary behind, and a write that fails
# removes nothing the program did not create.
source "$(dirname "$0")/lib_cli.sh"
quick=(--backend cpu-ref --shape 16x64x64 --verify-only --quiet)

# is_link PATH / is_fifo PATH, counted as checks
is_link() { checks=$((checks + 1)); [ -L "$1" ] || fail "$1 is no longer a symlink"; }
is_fifo() { checks=$((checks + 1)); [ -p "$1" ] || fail "$1 is no longer a FIFO"; }

# ---- symlinks: the target written, the link kept ---------------------------------
mkdir "$TMP/res"
echo old >"$TMP/res/target.json"
ln -s res/target.json "$TMP/link.json"
expect 0 "" -- "$FP4" run "${quick[@]}" --json "$TMP/link.json"
is_link "$TMP/link.json"
grep -q '"schema"' "$TMP/res/target.json" || fail "--json through a symlink did not write its target"
ln -s res/new.json "$TMP/dangling.json"
expect 0 "" -- "$FP4" run "${quick[@]}" --json "$TMP/dangling.json"
is_link "$TMP/dangling.json"
[ -s "$TMP/res/new.json" ] || fail "--json through a dangling symlink did not create its target"
ln -s res/page.html "$TMP/page.html"
expect 0 "wrote $TMP/page.html" -- "$FP4" report "$TMP/res/target.json" --html "$TMP/page.html"
is_link "$TMP/page.html"
grep -q '</html>' "$TMP/res/page.html" || fail "--html through a symlink did not write its target"
checks=$((checks + 3))

# ---- a symlink to a folder: refused, both kept -----------------------------------
ln -s res "$TMP/dirlink.json"
expect 3 "dirlink.json" -- "$FP4" run "${quick[@]}" --json "$TMP/dirlink.json"
is_link "$TMP/dirlink.json"
[ -d "$TMP/res" ] || fail "the folder behind a symlink is gone"

# ---- the mode of a new file follows the umask -------------------------------------
(umask 027 && exec "$FP4" run "${quick[@]}" --json "$TMP/masked.json" >/dev/null 2>&1) || fail "run --json under umask 027"
[ "$(stat -c %a "$TMP/masked.json")" = 640 ] || fail "a new --json file has mode $(stat -c %a "$TMP/masked.json"), expected 640"
chmod 604 "$TMP/masked.json"
expect 0 "" -- "$FP4" run "${quick[@]}" --json "$TMP/masked.json"
[ "$(stat -c %a "$TMP/masked.json")" = 604 ] || fail "a rewritten --json file lost its mode 604"
checks=$((checks + 2))

# ---- FIFOs: written into, never replaced or removed ------------------------------
mkfifo "$TMP/page.fifo"
timeout 20 cat "$TMP/page.fifo" >"$TMP/page.got" &
reader=$!
expect 0 "" -- "$FP4" report "$TMP/res/target.json" --html "$TMP/page.fifo"
wait $reader
is_fifo "$TMP/page.fifo"
grep -q '</html>' "$TMP/page.got" || fail "report --html into a FIFO: the reader got no page"
checks=$((checks + 1))

# gemm / quantize into a FIFO whose reader leaves after one byte: a write
# error (exit 3, SIGPIPE ignored so that it is an error to report), and the
# FIFO is still there. The outputs are larger than a pipe's buffer.
"$MKFILE" npy-f32 256 512 3 "$TMP/w.npy"
"$MKFILE" npy-f32 256 512 4 "$TMP/x.npy"
expect 0 "" -- "$FP4" quantize --in "$TMP/w.npy" --out "$TMP/w.safetensors"
expect 0 "" -- "$FP4" quantize --in "$TMP/x.npy" --out "$TMP/x.safetensors"
mkfifo "$TMP/d.fifo" "$TMP/q.fifo"
timeout 20 head -c 1 "$TMP/d.fifo" >/dev/null &
expect 3 "d.fifo" -- bash -c 'trap "" PIPE; exec "$0" "$@"' "$FP4" gemm --a "$TMP/x.safetensors" \
    --b "$TMP/w.safetensors" --out "$TMP/d.fifo"
wait
is_fifo "$TMP/d.fifo"
timeout 20 head -c 1 "$TMP/q.fifo" >/dev/null &
expect 3 "q.fifo" -- bash -c 'trap "" PIPE; exec "$0" "$@"' "$FP4" quantize --in "$TMP/w.npy" --out "$TMP/q.fifo"
wait
is_fifo "$TMP/q.fifo"

# ---- a failed write leaves an existing file as it was -----------------------------
cp "$TMP/w.safetensors" "$TMP/keep.npy"
expect 3 "" -- "$FP4" gemm --a "$TMP/x.safetensors" --b "$TMP/w.npy" --out "$TMP/keep.npy"
cmp -s "$TMP/w.safetensors" "$TMP/keep.npy" || fail "a failed gemm changed the existing --out file"
checks=$((checks + 1))

# ---- no temporary left anywhere ---------------------------------------------------
left=$(find "$TMP" -name '.*' ! -name . | head -5)
[ -z "$left" ] || fail "temporaries left behind: $left"
checks=$((checks + 1))
finish
