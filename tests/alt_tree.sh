#!/usr/bin/env bash
# bench/alt-tree.sh: a revision's source in a folder with its commit stamp;
# bad revisions and folders refused. Usage: alt_tree.sh [REPO_ROOT]. Exit 77
# (skipped) outside a git checkout.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 1
git rev-parse --verify --quiet HEAD >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bench/alt-tree.sh HEAD "$tmp/tree" >/dev/null || { echo "FAIL: alt-tree.sh HEAD"; fail=1; }
[ "$(cat "$tmp/tree/.fp4-commit" 2>/dev/null)" = "$(git rev-parse --short=12 HEAD)" ] ||
  { echo "FAIL: the commit stamp"; fail=1; }
cmp -s "$tmp/tree/CMakeLists.txt" <(git show HEAD:CMakeLists.txt) || { echo "FAIL: the tree's files"; fail=1; }
touch "$tmp/tree/stale"
bench/alt-tree.sh HEAD "$tmp/tree" >/dev/null && [ ! -e "$tmp/tree/stale" ] ||
  { echo "FAIL: an existing folder is replaced"; fail=1; }
for args in "no-such-revision-xyz $tmp/t2" ". " "HEAD ." "HEAD"; do
  # shellcheck disable=SC2086
  bench/alt-tree.sh $args >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: alt-tree.sh $args: exit $rc, want 2"; fail=1; }
done
[ $fail -eq 0 ] && echo "alt_tree: ok"
exit $fail
