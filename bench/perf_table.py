#!/usr/bin/env python3
"""Markdown tables for docs/PERF.md from fp4bench JSON results (no numbers are
typed by hand). For each ok row: median, the two floors (bytes over the
measured read bandwidth, flops over the measured bf16 rate), % of the floor,
and the paired ratio against the run's baseline.

usage: bench/perf_table.py RESULT.json [--backend a,b] [--label x]"""
import json
import sys


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path, backends, label = args[0], None, None
    if "--backend" in args:
        backends = args[args.index("--backend") + 1].split(",")
    if "--label" in args:
        label = args[args.index("--label") + 1]
    d = json.load(open(path))
    c = d["ceilings"]
    bw, rate = c.get("read_gbps") or 0, c.get("bf16_tflops") or 0
    dev = d["device"]
    print(f"<!-- {path}: {dev['name']}, commit {d['fp4bench']['commit']}, {d['started']}; "
          f"read {bw:.0f} GB/s, bf16 {rate:.0f} TFLOP/s -->")
    print("| M | N | K | backend | variant | median us | bytes floor us | flops floor us "
          "| % of floor | vs " + (d["settings"].get("baseline") or "-") + " |")
    print("|---:|---:|---:|---|---|---:|---:|---:|---:|---|")
    for r in d["rows"]:
        if backends and r["backend"] not in backends:
            continue
        if label and r["label"] != label:
            continue
        if r["state"] != "ok":
            print(f"| {r['m']} | {r['n']} | {r['k']} | {r['backend']} | | {r['state']}: "
                  f"{r['reason'][:60]} | | | | |")
            continue
        med = r["time_us"]["median"]
        fb = r["bytes"] / (bw * 1e9) * 1e6 if bw else float("nan")
        ff = r["flops"] / (rate * 1e12) * 1e6 if rate else float("nan")
        ratio = r.get("ratio")
        rt = f"{ratio['value']:.2f}x [{ratio['lo']:.2f}, {ratio['hi']:.2f}]" if ratio else "-"
        print(f"| {r['m']} | {r['n']} | {r['k']} | {r['backend']} | {r.get('variant') or ''} "
              f"| {med:.2f} | {fb:.2f} | {ff:.2f} | {100 * max(fb, ff) / med:.0f}% | {rt} |")


if __name__ == "__main__":
    main()
