#!/usr/bin/env bash
# bench/alt-tree.sh REV DIR: the source of git revision REV in DIR (replaced if
# it exists), stamped with REV's commit in DIR/.fp4-commit, for device-run.sh's
# OLD_TREE, ALT_TREE and ALT_TREES. DIR stays untracked and not ignored, so the
# device tool copies it with the working tree; delete it when done.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/alt-tree.sh REV DIR" >&2; exit 2; }
rev=$1 dir=$2
commit=$(git rev-parse --short=12 --verify --quiet "$rev^{commit}") || { echo "alt-tree.sh: no revision '$rev'" >&2; exit 2; }
case "$dir" in "" | / | . | ..) echo "alt-tree.sh: refusing DIR '$dir'" >&2; exit 2 ;; esac
rm -rf -- "$dir"
mkdir -p -- "$dir"
git archive "$commit" | tar -x -C "$dir"
echo "$commit" >"$dir/.fp4-commit"
# the tree's own .gitignore ignores its /.fp4-commit, and a copy that follows
# git's ignore rules (the device tool's) would then drop the stamp
[ -f "$dir/.gitignore" ] && echo '!/.fp4-commit' >>"$dir/.gitignore"
echo "$dir: $rev ($commit)"
