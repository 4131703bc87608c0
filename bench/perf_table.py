#!/usr/bin/env python3
"""Markdown tables for docs/PERF.md from fp4bench JSON results (no numbers are
typed by hand). For each ok row: median, the two floors (bytes over the
measured read bandwidth, flops over the measured bf16 rate), % of the floor,
and the paired ratio against the run's baseline.

usage: bench/perf_table.py RESULT.json [--backend a,b] [--label x]
       bench/perf_table.py --targets TARGETS.json   issue 4's target table
       bench/perf_table.py --sweep SWEEP.json       the M sweep, a row per shape (PERF.md)
       bench/perf_table.py --sweep-grid SWEEP.json  the M sweep, M across (README)"""
import json
import sys


# issue 4's targets: (M, N, K) -> (text, test(row, rows of the same shape) -> met?)
def _bf16_ratio(r, same, want):
    b = same.get("cublas-bf16")
    return (b is not None and b["state"] == "ok" and b["tflops"] > 0
            and r["tflops"] >= want * b["tflops"])


def _bw_frac(r, same, want, bw):
    return bw > 0 and r["bytes"] / (r["time_us"]["median"] * 1e-6) / 1e9 >= want * bw


def _target(m, n, k):
    fixed = {(16, 2048, 6144): 5.0, (64, 2048, 6144): 5.5, (16, 768, 6144): 4.5,
             (64, 768, 6144): 4.5, (256, 2048, 6144): 11.0}
    if (m, n, k) in fixed:
        us = fixed[(m, n, k)]
        return f"<= {us:g} us", lambda r, same, bw: r["time_us"]["median"] <= us
    if (m, n, k) in ((16, 8192, 8192), (16, 28672, 4096)):
        return ">= 75% of read BW", lambda r, same, bw: _bw_frac(r, same, 0.75, bw)
    return ">= 90% of cublas-bf16", lambda r, same, bw: _bf16_ratio(r, same, 0.9)


def _shapes(d):
    """rows grouped by shape, in order: {(m,n,k): {backend: row}}"""
    out = {}
    for r in d["rows"]:
        out.setdefault((r["m"], r["n"], r["k"]), {})[r["backend"]] = r
    return out


def _us(r):
    return f"{r['time_us']['median']:.2f}" if r and r["state"] == "ok" else (
        r["state"] if r else "-")


def targets(path):
    d = json.load(open(path))
    bw = d["ceilings"].get("read_gbps") or 0
    print(f"<!-- {path}: commit {d['fp4bench']['commit']}, {d['started']}, "
          f"read {bw:.0f} GB/s -->")
    print("| shape (M, N, K) | cublas-bf16 us | cublaslt-fp8 us | target | fp4-sm90 us (variant) "
          "| fp4-sm90 TFLOP/s, GB/s | met |")
    print("|---|---:|---:|---|---:|---:|---|")
    for (m, n, k), same in _shapes(d).items():
        r = same.get("fp4-sm90")
        text, met = _target(m, n, k)
        b, f = same.get("cublas-bf16"), same.get("cublaslt-fp8")
        bt = f"{_us(b)} ({b['tflops']:.0f} TFLOP/s)" if b and b["state"] == "ok" and m >= 1024 else _us(b)
        if r and r["state"] == "ok":
            ok = "yes" if met(r, same, bw) else "no"
            mine = f"{_us(r)} ({r.get('variant') or ''})"
            rate = f"{r['tflops']:.0f}, {r['gbps']:.0f}"
        else:
            ok, mine, rate = "no", _us(r), ""
        print(f"| {m}, {n}, {k} | {bt} | {_us(f)} | {text} | {mine} | {rate} | {ok} |")


def sweep(path):
    d = json.load(open(path))
    base = d["settings"].get("baseline") or "cublas-bf16"
    print(f"<!-- {path}: commit {d['fp4bench']['commit']}, {d['started']} -->")
    print(f"| label | M | N | K | cublas-bf16 us | cublaslt-fp8 us | fp4-sm90 us | variant "
          f"| fp4-sm90 vs {base} (95% CI) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for (m, n, k), same in _shapes(d).items():
        r = same.get("fp4-sm90")
        lab = next(iter(same.values()))["label"]
        ratio = r.get("ratio") if r else None
        rt = f"{ratio['value']:.2f}x [{ratio['lo']:.2f}, {ratio['hi']:.2f}]" if ratio else "-"
        print(f"| {lab} | {m} | {n} | {k} | {_us(same.get('cublas-bf16'))} "
              f"| {_us(same.get('cublaslt-fp8'))} | {_us(r)} | {(r or {}).get('variant') or ''} | {rt} |")


def sweep_grid(path):
    """one table per (N, K): M across, a row per backend (median us) and the
    fp4-sm90 variant and its ratio to cublas-bf16"""
    d = json.load(open(path))
    print(f"<!-- {path}: commit {d['fp4bench']['commit']}, {d['started']} -->")
    by_nk = {}
    for (m, n, k), same in _shapes(d).items():
        by_nk.setdefault((n, k), {})[m] = same
    for (n, k), ms in by_nk.items():
        cols = sorted(ms)
        print(f"\n| M (N={n}, K={k}) | " + " | ".join(str(m) for m in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for b in ("cublas-bf16", "cublaslt-fp8", "fp4-sm90"):
            print(f"| {b} us | " + " | ".join(_us(ms[m].get(b)) for m in cols) + " |")
        vs = []
        for m in cols:
            r = ms[m].get("fp4-sm90")
            vs.append(f"{r['ratio']['value']:.2f}x" if r and r.get("ratio") else "-")
        print("| fp4-sm90 vs cublas-bf16 | " + " | ".join(vs) + " |")
        print("| fp4-sm90 variant | " + " | ".join(
            ((ms[m].get("fp4-sm90") or {}).get("variant") or "-").split("-")[0] for m in cols) + " |")


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    if args[0] == "--targets":
        return targets(args[1])
    if args[0] == "--sweep":
        return sweep(args[1])
    if args[0] == "--sweep-grid":
        return sweep_grid(args[1])
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
