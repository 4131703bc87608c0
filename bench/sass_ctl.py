#!/usr/bin/env python3
"""sass_ctl.py: the scheduling control of each instruction in `cuobjdump -sass`
output (sm_70 and later: 128-bit instructions), and the runs of global loads
that share one scoreboard.

    cuobjdump -sass build/.../moe_wide.cu.o | bench/sass_ctl.py [--function RE] [--loads]

cuobjdump prints each instruction's two 64-bit words but not what the upper
one's control field says. Its bits 41-61 (instruction bits 105-125) are the
stall count (4 bits), the yield flag, the scoreboard the instruction sets when
its result lands (3 bits, 7 = none), the scoreboard it sets until its source
registers are read (3 bits), the mask of scoreboards it waits for (6 bits) and
the operand-reuse flags. Shown per instruction as

    2900 S 1 Y W5 R- wait[]     LDG.E.NA.128.CONSTANT R168, desc[UR20][R168.64]

--loads prints, per function, the runs of at least --min-run global loads
(LDG) that set the same scoreboard with no instruction waiting on it between
them. An instruction that waits on that scoreboard waits for the whole run,
so a run of a register ring's loads issued together means the ring is not
ahead: the first use pays a full memory latency.

--waits N prints, per function, every instruction that waits on a scoreboard
while a global load issued fewer than N instructions before it (in listing
order) is still counted on that scoreboard. A scoreboard is a counter, so such
a wait also waits for that young load: a load issued for a later k-step and
then waited on before the current step's math leaves no load in flight across
steps, whatever the ring's depth in the source. Listing order ignores branches,
so a loop's back edge is not followed.
"""
import argparse
import re
import sys

INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x([0-9a-f]{16}) \*/")
WORD = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
FUNC = re.compile(r"Function : (\S+)")


def control(hi):
    """The control field of an instruction's upper 64-bit word."""
    return {
        "stall": (hi >> 41) & 15,
        "yield": (hi >> 45) & 1,
        "wsb": (hi >> 46) & 7,  # 7: none
        "rsb": (hi >> 49) & 7,
        "wait": [b for b in range(6) if (hi >> (52 + b)) & 1],
    }


def parse(lines):
    """[(function, [(address, text, control)])] in the order of the listing."""
    funcs, cur, i = [], None, 0
    while i < len(lines):
        m = FUNC.search(lines[i])
        if m:
            cur = (m.group(1), [])
            funcs.append(cur)
        m = INSN.match(lines[i])
        if m and cur is not None and i + 1 < len(lines):
            w = WORD.match(lines[i + 1])
            if w:
                cur[1].append((int(m.group(1), 16), m.group(2), control(int(w.group(1), 16))))
                i += 2
                continue
        i += 1
    return funcs


def fmt(addr, text, c):
    sb = lambda v: "-" if v == 7 else str(v)
    head = f"S{c['stall']:2d} {'Y' if c['yield'] else ' '} W{sb(c['wsb'])} R{sb(c['rsb'])} wait{c['wait']}"
    return f"{addr:6x} {head:30s} {text}"


def is_global_load(text):
    op = text.split()[1] if text.startswith("@") else text.split()[0]
    return op.startswith("LDG") and not op.startswith("LDGSTS") and not op.startswith("LDGDEPBAR")


def load_runs(insns, min_run):
    """Runs of global loads on one scoreboard with no wait on it in between."""
    runs, open_runs = [], {}
    for addr, text, c in insns:
        for b in c["wait"]:  # a wait closes the run on that scoreboard
            r = open_runs.pop(b, None)
            if r and len(r) >= min_run:
                runs.append((b, r))
        if is_global_load(text) and c["wsb"] != 7:
            open_runs.setdefault(c["wsb"], []).append(addr)
    runs += [(b, r) for b, r in open_runs.items() if len(r) >= min_run]
    return sorted(runs, key=lambda x: x[1][0])


def short_waits(insns, window):
    """[(wait address, scoreboard, pending loads, youngest load address,
    instructions since it)] for waits that cover a load issued fewer than
    `window` instructions before."""
    out, pending = [], {}  # scoreboard -> [(index, address)] of loads not yet waited on
    for i, (addr, text, c) in enumerate(insns):
        for b in c["wait"]:
            loads = pending.pop(b, [])
            if loads and i - loads[-1][0] < window:
                out.append((addr, b, len(loads), loads[-1][1], i - loads[-1][0]))
        if is_global_load(text) and c["wsb"] != 7:
            pending.setdefault(c["wsb"], []).append((i, addr))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", help="cuobjdump -sass output (default: standard input)")
    ap.add_argument("--function", help="only functions whose mangled name matches this regex")
    ap.add_argument("--loads", action="store_true", help="print the load runs, not the listing")
    ap.add_argument("--min-run", type=int, default=4, help="shortest load run printed [4]")
    ap.add_argument("--waits", type=int, metavar="N",
                    help="print the waits on a global load issued fewer than N instructions before")
    a = ap.parse_args(argv)
    if a.waits is not None and a.waits < 1:
        print("sass_ctl.py: --waits must be at least 1", file=sys.stderr)
        return 2
    if a.min_run < 1:
        print("sass_ctl.py: --min-run must be at least 1", file=sys.stderr)
        return 2
    try:
        func_re = re.compile(a.function) if a.function else None
    except re.error as e:
        print(f"sass_ctl.py: --function: bad regex: {e}", file=sys.stderr)
        return 2
    try:
        text = open(a.file).read() if a.file else sys.stdin.read()
    except OSError as e:
        print(f"sass_ctl.py: {e}", file=sys.stderr)
        return 2
    funcs = parse(text.splitlines())
    if not funcs:
        print("sass_ctl.py: no sm_70+ SASS functions in the input (cuobjdump -sass output?)", file=sys.stderr)
        return 1
    for name, insns in funcs:
        if func_re and not func_re.search(name):
            continue
        if a.waits is not None:
            w = short_waits(insns, a.waits)
            n = sum(is_global_load(t) for _, t, _ in insns)
            print(f"{name}: {len(insns)} instructions, {n} global loads, {len(w)} waits on a load fewer than {a.waits} instructions old")
            for addr, b, count, young, dist in w:
                print(f"  {addr:x} waits on SB{b}: {count} loads, the youngest at {young:x}, {dist} instructions before")
        elif a.loads:
            n = sum(is_global_load(t) for _, t, _ in insns)
            runs = load_runs(insns, a.min_run)
            print(f"{name}: {len(insns)} instructions, {n} global loads, {len(runs)} runs of >= {a.min_run} on one scoreboard")
            for b, r in runs:
                print(f"  SB{b}: {len(r)} loads at {r[0]:x}..{r[-1]:x}")
        else:
            print(f"# {name}")
            for addr, t, c in insns:
                print(fmt(addr, t, c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
