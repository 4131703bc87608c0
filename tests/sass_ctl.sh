#!/usr/bin/env bash
# bench/sass_ctl.py decodes the control field of cuobjdump's SASS words, finds
# runs of global loads on one scoreboard and the waits on young loads. The
# listing below is made of real sm_90a words (an LDG.128 that sets scoreboard
# 5, a fence that sets and waits on 1, an IMAD that waits on 1, 2 and 5).
# Usage: sass_ctl.sh [REPO_ROOT]. Exit 77 (skipped) without python3.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
S="python3 $ROOT/bench/sass_ctl.py"
fail=0
ldg() { # ADDRESS: an LDG.E.NA.128 that sets SB5
  printf '        /*%s*/                   LDG.E.NA.128.CONSTANT R168, desc[UR20][R168.64] ;   /* 0x00000014a8a87981 */\n' "$1"
  printf '                                                                                       /* 0x000f62000c5e9d00 */\n'
}
imad() { # ADDRESS: an IMAD.HI that waits on SB1, SB2 and SB5
  printf '        /*%s*/                   IMAD.HI.U32 R156, R16.reuse, 0x40000000, RZ ;       /* 0x40000000109c7827 */\n' "$1"
  printf '                                                                                       /* 0x066fe200078e00ff */\n'
}
fence() {
  printf '        /*%s*/                   FENCE.VIEW.ASYNC.S ;                                /* 0x00000000000073c6 */\n' "$1"
  printf '                                                                                       /* 0x002e620000000000 */\n'
}
check() { # DESCRIPTION EXPECTED-REGEX OUTPUT
  grep -qE -- "$2" <<<"$3" || { echo "FAIL: $1: no /$2/ in:"; echo "$3"; fail=1; }
}
run4=$({ echo "	Function : k_run"; ldg 0100; ldg 0110; ldg 0120; ldg 0130; imad 0140; })
split=$({ echo "	Function : k_split"; ldg 0100; ldg 0110; imad 0120; ldg 0130; ldg 0140; fence 0150; })

out=$($S <<<"$run4")
check "LDG control" "^ +100 S 1 Y W5 R- wait\[\] +LDG\.E\.NA\.128" "$out"
check "IMAD control" "^ +140 S 1 Y W- R- wait\[1, 2, 5\] +IMAD\.HI" "$out"
out=$($S <<<"$split")
check "FENCE control" "^ +150 S 1 Y W1 R- wait\[1\] +FENCE" "$out"

out=$($S --loads <<<"$run4")
check "a run of four loads" "^k_run: 5 instructions, 4 global loads, 1 runs" "$out"
check "its range" "SB5: 4 loads at 100\.\.130" "$out"
out=$($S --loads <<<"$split")
check "no run across a wait" "^k_split: 6 instructions, 4 global loads, 0 runs" "$out"
out=$($S --loads --min-run 2 <<<"$split")
check "two runs of two" "4 global loads, 2 runs of >= 2" "$out"
out=$($S --loads --function k_split <<<"$run4"$'\n'"$split")
check "--function" "^k_split: " "$out"
grep -q "k_run" <<<"$out" && { echo "FAIL: --function did not filter"; fail=1; }

# --waits: the IMAD of k_run waits on SB5 one instruction after the 4th load;
# k_split's IMAD waits on its first two loads, its fence on none (SB1 only)
out=$($S --waits 8 <<<"$run4")
check "a wait on young loads" "^k_run: 5 instructions, 4 global loads, 1 waits on a load fewer than 8" "$out"
check "its place" "140 waits on SB5: 4 loads, the youngest at 130, 1 instructions before" "$out"
out=$($S --waits 1 <<<"$run4")
check "--waits 1 counts none" "0 waits on a load fewer than 1 " "$out"
out=$($S --waits 8 <<<"$split")
check "a wait in k_split" "120 waits on SB5: 2 loads, the youngest at 110, 1 instructions before" "$out"
check "loads waited once" "k_split: 6 instructions, 4 global loads, 1 waits" "$out"
$S --waits 0 <<<"$run4" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: --waits 0: exit $rc, want 2"; fail=1; }

$S <<<"no sass here" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || { echo "FAIL: input without SASS: exit $rc, want 1"; fail=1; }
$S --function '(' <<<"$run4" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: a bad --function regex: exit $rc, want 2"; fail=1; }
$S --loads --min-run 0 <<<"$run4" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: --min-run 0: exit $rc, want 2"; fail=1; }
$S /nonexistent/listing.sass >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: unreadable file: exit $rc, want 2"; fail=1; }
[ $fail -eq 0 ] && echo "sass_ctl: ok"
exit $fail
