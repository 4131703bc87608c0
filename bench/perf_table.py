#!/usr/bin/env python3
"""The generated sections of README.md and docs/PERF.md, from fp4bench JSON
results (docs/JSON.md): no number in them is typed by hand.

A generated region of a markdown file is everything between the two lines
    <!-- generated: NAME -->
    <!-- end generated -->
--update rewrites every region of the named files in place and leaves the rest
alone; each region starts with a one-line source note (GPU, driver, CUDA, SM
clock, fp4bench commit, the files it comes from).

usage:
  bench/perf_table.py --update RESULT.json [MORE.json ...] FILE.md [FILE.md ...]
  bench/perf_table.py --check  RESULT.json [MORE.json ...] FILE.md [FILE.md ...]
                      (exit 1 when a region differs from what --update writes)
  bench/perf_table.py --print NAME RESULT.json [MORE.json ...]
  bench/perf_table.py --list
e.g. bench/perf_table.py --update bench/results/h200/baseline.json \
       bench/results/h200/moe/*.json bench/results/h100/baseline.json \
       bench/results/h100/moe/*.json README.md docs/PERF.md

The files are grouped by GPU (the device name they record). The GPU of the first
file is the one every region shows; the files of other GPUs are read only by
`targets`, which gives their numbers beside it. Within a GPU the files are
merged shape by shape (MoE rows case by case): all rows of a shape come from the
first file that has it (so paired ratios stay within one run); the ceilings come
from the first file that measured them.

Regions:
  ceilings             measured read bandwidth and tensor rates against the datasheet
  results              every shape: fp4-sm90 (and its kernel) against cuBLAS bf16 and fp8
  choice               the kernel fp4-sm90 ran, by M, for each (N, K) of the results
  kernel-KERNEL        the rows one kernel ran (decode, mid, prefill, prefill-wide)
                       against cuBLAS and the roofline
  moe                  every `fp4bench moe` case: moe-fp4-sm90 (its path, % of the read
                       bandwidth) against the grouped baselines
  moe-summary          the first model's gate_up and down rows (W4A4, random routing)
                       against the grouped vendor baselines
  moe-steps            the MoE layer rows: each step's time for every backend
  targets              the MoE and decode performance targets, each met or missed on the
                       first GPU, with the other GPUs' numbers beside it; GLM-5 cases
                       from balanced-routing rows where a GPU has them, else random

The kernel of a row is its `variant` field; both the kept kernels' names and
their numbered names (v4-decode, v11-mid, v8-prefill, v16-prefill) are read.
Rows that are unsupported or FAILED show their state and reason."""
import json
import os
import re
import sys

BASE, FP8, OURS = "cublas-bf16", "cublaslt-fp8", "fp4-sm90"
KERNELS = ("decode", "mid", "prefill", "prefill-wide")
NUMBERED = {"v4-decode": "decode", "v11-mid": "mid", "v8-prefill": "prefill",
            "v16-prefill": "prefill-wide"}
BEGIN = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->\s*$")
END = "<!-- end generated -->"


def kernel_of(variant):
    """the kept kernel's name for a row's variant field, else the field as is"""
    v = (variant or "").strip()
    return NUMBERED.get(v, v)


# ---- results -------------------------------------------------------------------

class Results:
    """the merged rows of one or more fp4bench JSON files"""

    def __init__(self, paths):
        self.paths, self.docs, self.ceilings = paths, [], None
        self.shapes = {}  # (m, n, k) -> {backend: row}, in the order first seen
        # MoE rows: (model, step, mode, routing, tokens) -> {backend: row}
        self.moe, self.moe_docs, self.dense_docs = {}, [], []
        for p in paths:
            with open(p) as f:
                d = json.load(f)
            if d.get("schema_version") != 1:
                sys.exit(f"{p}: not an fp4bench JSON file of schema 1 (docs/JSON.md)")
            self.docs.append((p, d))
            c = d.get("ceilings") or {}
            if self.ceilings is None and c.get("measured"):
                self.ceilings = c
            mine, moe = {}, {}
            for r in d["rows"]:
                r["_baseline"] = d["settings"].get("baseline")  # what its ratio is against
                r["_read_gbps"] = c.get("read_gbps") if c.get("measured") else None  # its run's
                if r.get("moe"):
                    q = r["moe"]
                    case = (q.get("model"), q.get("step"), q.get("mode"), q.get("routing"),
                            q.get("tokens"))
                    moe.setdefault(case, {})[r["backend"]] = r
                else:
                    mine.setdefault((r["m"], r["n"], r["k"]), {})[r["backend"]] = r
            for group, into in ((mine, self.shapes), (moe, self.moe)):
                for key, rows in group.items():
                    for r in rows.values():
                        r["_peers"] = rows  # the shape's (case's) rows of the same run
                    into.setdefault(key, rows)
            if moe:
                self.moe_docs.append((p, d))
            if mine or not moe:
                self.dense_docs.append((p, d))
        self.ceilings = self.ceilings or {}
        self.others = []  # the Results of other GPUs (targets only)

    def note(self, rows=(), docs=None):
        """the one-line source note of a region; rows: the rows it shows (their
        SM clocks are given as a range); docs: the files it comes from [those
        with GEMM rows]"""
        docs = (self.dense_docs or self.docs) if docs is None else docs

        def one(key):
            vals = []
            for _, d in docs:
                v = key(d)
                if v and v not in vals:
                    vals.append(v)
            return " / ".join(vals) or "unknown"

        def cuda(v):
            return f"{v // 1000}.{v % 1000 // 10}" if v else ""

        dev = one(lambda d: d["device"].get("name") if d["device"].get("present") else "no GPU")
        drv = one(lambda d: d["device"].get("driver_string") or cuda(d["device"].get("driver_version")))
        rt = one(lambda d: cuda(d["device"].get("runtime_version")))
        clk = one(lambda d: f"{d['device'].get('sm_clock_max_mhz', 0):.0f}")
        commit = one(lambda d: d["fp4bench"].get("commit"))
        clocks = [r["telemetry"]["sm_clock_mhz"] for r in rows
                  if r.get("telemetry") and r["telemetry"].get("sm_clock_mhz")]
        lo, hi = (min(clocks), max(clocks)) if clocks else (0, 0)
        run = "" if not clocks else (f", {lo:.0f} MHz in these rows" if lo == hi else
                                     f", {lo:.0f}-{hi:.0f} MHz in these rows")
        src = " + ".join(f"`{show_path(p)}`" for p, _ in docs)
        s = docs[0][1]["settings"]
        how = ", ".join(x for x in (
            "hot L2" if s.get("hot") else "cold L2",
            "CUDA graphs" if s.get("use_graphs") else "plain launches",
            f"{s.get('data', '?')} data") if x)
        return (f"_Generated by `bench/perf_table.py` from {src}: {dev}, driver {drv}, CUDA {rt}, "
                f"SM clock max {clk} MHz{run}; fp4bench {commit}; {how}._")


def show_path(p):
    """a path as the note gives it: relative inside the working folder, else its name"""
    rel = os.path.relpath(os.path.abspath(p))
    return os.path.basename(p) if rel.startswith("..") else rel


def median(r):
    if r is None or r.get("state") != "ok":
        return None
    return (r.get("time_us") or {}).get("median")


def cell_us(r):
    """a row's median, or its state and reason"""
    if r is None:
        return "-"
    if r.get("state") != "ok":
        why = " ".join((r.get("reason") or "").split())
        if len(why) > 60:
            why = why[:57] + "..."
        why = why.replace("|", "\\|")
        return f"{r.get('state')} ({why})" if why else r.get("state", "?")
    t = median(r)
    return "not timed" if t is None else f"{t:.2f}"


def cell_ratio(num, den):
    """den's speed-up over num from the medians: num / den"""
    a, b = median(num), median(den)
    return f"{a / b:.2f}x" if a and b else "-"


def cell_paired(r, base):
    """the row's paired ratio against the baseline with its 95% CI when the
    run's baseline is `base`, else the ratio of the medians"""
    q = (r or {}).get("ratio") if r and r.get("state") == "ok" else None
    if q and q.get("value") and (r.get("_baseline") == base):
        lo, hi = q.get("lo"), q.get("hi")
        ci = f" [{lo:.2f}, {hi:.2f}]" if lo and hi else ""
        return f"{q['value']:.2f}x{ci}"
    return cell_ratio((r or {}).get("_peers", {}).get(base), r)


def ours(rows):
    return rows.get(OURS)


def fastest(rows, backends):
    ts = {b: median(rows.get(b)) for b in backends}
    ts = {b: t for b, t in ts.items() if t}
    return min(ts, key=ts.get) if ts else None


def shape_order(res):
    """shapes grouped by (N, K) in the order first seen, M ascending"""
    groups = {}
    for (m, n, k) in res.shapes:
        groups.setdefault((n, k), []).append(m)
    return [(m, n, k) for (n, k), ms in groups.items() for m in sorted(ms)]


# ---- regions -------------------------------------------------------------------

def region_ceilings(res):
    c = res.ceilings
    dev = (res.dense_docs or res.docs)[0][1]["device"]
    out = [res.note()]
    if not c:
        return out + ["", "No file among the results measured the ceilings (`--no-ceilings`)."]

    def pct(v, peak):
        return f"{100 * v / peak:.0f}%" if v and peak else "-"

    def num(v, unit):
        return f"{v:.0f} {unit}" if v else "not measured"

    out += ["", "| ceiling | measured | datasheet | measured / datasheet |", "|---|---:|---:|---:|"]
    items = (
        ("read bandwidth: 4 GiB streamed with 16-byte loads", c.get("read_gbps"), "GB/s",
         dev.get("peak_bw_gbps")),
        ("cuBLAS bf16 at 8192^3, interleaved (the rows' roofline)", c.get("bf16_tflops"),
         "TFLOP/s", dev.get("peak_bf16_tflops")),
        ("cuBLAS bf16 at 8192^3, back to back", c.get("bf16_sustained_tflops"), "TFLOP/s",
         dev.get("peak_bf16_tflops")),
        ("cuBLASLt fp8 at 8192^3, interleaved", c.get("fp8_tflops"), "TFLOP/s",
         dev.get("peak_fp8_tflops")),
        ("cuBLASLt fp8 at 8192^3, back to back", c.get("fp8_sustained_tflops"), "TFLOP/s",
         dev.get("peak_fp8_tflops")),
    )
    for what, v, unit, peak in items:
        out.append(f"| {what} | {num(v, unit)} | {num(peak, unit)} | {pct(v, peak)} |")
    return out


def region_results(res):
    shapes = shape_order(res)
    shown = [r for s in shapes for r in res.shapes[s].values() if r["backend"] in (BASE, FP8, OURS)]
    out = [res.note(shown), "",
           "| label | M | N | K | fp4-sm90 kernel | fp4-sm90 us | cuBLAS bf16 us | cuBLASLt fp8 us "
           "| fp4-sm90 vs bf16 | fp4-sm90 vs fp8 |",
           "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for s in shapes:
        rows = res.shapes[s]
        if not any(b in rows for b in (BASE, FP8, OURS)):
            continue
        win = fastest(rows, (BASE, FP8, OURS))
        cells = []
        for b in (OURS, BASE, FP8):
            t = cell_us(rows.get(b))
            cells.append(f"**{t}**" if b == win else t)
        r = ours(rows)
        label = next(iter(rows.values()))["label"]
        kern = kernel_of(r.get("variant")) if r else "-"
        out.append(f"| {label} | {s[0]} | {s[1]} | {s[2]} | {kern or '-'} | {cells[0]} | {cells[1]} "
                   f"| {cells[2]} | {cell_paired(r, BASE) if r else '-'} | "
                   f"{cell_ratio(rows.get(FP8), r) if r else '-'} |")
    out += ["", "Bold: the fastest of the three. fp4-sm90 vs bf16: the paired ratio of the "
            "interleaved rounds with its 95% interval (above 1: fp4-sm90 is faster); vs fp8: "
            "the ratio of the medians."]
    return out


def region_choice(res):
    """per (N, K): the M range each kernel ran"""
    groups = {}
    for (m, n, k) in shape_order(res):
        r = ours(res.shapes[(m, n, k)])
        if r is None:
            continue
        kern = kernel_of(r.get("variant")) or r.get("state", "?")
        groups.setdefault((n, k), []).append((m, kern))
    cols = [k for k in KERNELS if any(kk == k for g in groups.values() for _, kk in g)]
    cols += sorted({kk for g in groups.values() for _, kk in g} - set(cols))
    out = [res.note(), "", "| N x K | " + " | ".join(f"{c}: M" for c in cols) + " |",
           "|---|" + "---|" * len(cols)]

    def span(ms):
        ms = sorted(ms)
        return "-" if not ms else (f"{ms[0]}" if len(ms) == 1 else f"{ms[0]} .. {ms[-1]}")

    for (n, k), ms in groups.items():
        out.append(f"| {n} x {k} | " + " | ".join(span([m for m, kk in ms if kk == c])
                                                    for c in cols) + " |")
    return out


def region_kernel(res, kern):
    c = res.ceilings
    bw, rate = c.get("read_gbps") or 0, c.get("bf16_tflops") or 0
    picked = []
    for s in shape_order(res):
        rows = res.shapes[s]
        r = ours(rows)
        if r is not None and kernel_of(r.get("variant")) == kern:
            picked.append((s, rows, r))
    shown = [rows[b] for _, rows, _ in picked for b in (OURS, BASE, FP8) if b in rows]
    out = [res.note(shown), ""]
    if not picked:
        return out + [f"No row of the results ran `{kern}`."]
    out += ["| M | N | K | fp4-sm90 us | bytes floor us | flops floor us | % of roofline "
            "| cuBLAS bf16 us | vs bf16 | cuBLASLt fp8 us | vs fp8 |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (m, n, k), rows, r in picked:
        t = median(r)
        fb = r["bytes"] / (bw * 1e9) * 1e6 if bw and r.get("bytes") else None
        ff = r["flops"] / (rate * 1e12) * 1e6 if rate and r.get("flops") else None
        floor = max(x for x in (fb, ff, 0) if x is not None)
        roof = f"{100 * floor / t:.0f}%" if t and floor else "-"
        out.append(f"| {m} | {n} | {k} | {cell_us(r)} | {'-' if fb is None else f'{fb:.2f}'} "
                   f"| {'-' if ff is None else f'{ff:.2f}'} | {roof} | {cell_us(rows.get(BASE))} "
                   f"| {cell_paired(r, BASE)} | {cell_us(rows.get(FP8))} "
                   f"| {cell_ratio(rows.get(FP8), r)} |")
    return out


MOE_OURS, MOE_BF16, MOE_FP8, MOE_LOOP = "moe-fp4-sm90", "moe-cublas-bf16", "moe-cublaslt-fp8", "moe-loop-fp4"
MODELS = {"glm5": "GLM-5", "deepseek-v3": "DeepSeek-V3", "kimi-k2": "Kimi K2",
          "qwen3-235b": "Qwen3-235B", "qwen3-30b": "Qwen3-30B", "mixtral": "Mixtral",
          "llama4-maverick": "Llama 4 Maverick", "gpt-oss-120b": "gpt-oss-120b"}


def moe_path(r):
    """the moe-fp4-sm90 path(s) a row's experts ran, from its variant (the
    token split) and its tokens an expert"""
    v = (r or {}).get("variant") or ""
    if "wide path" in v:
        return "wide"
    if "streaming path" in v:
        return "streaming"
    m = re.search(r"< (\d+) tokens", v)
    tpe = ((r or {}).get("moe") or {}).get("tokens_per_expert") or {}
    if not m or "max" not in tpe:
        return "-"
    split = int(m.group(1))
    if tpe["max"] < split:
        return "streaming"
    return "wide" if tpe.get("min", 0) >= split else f"both (wide from {split})"


def moe_case(q):
    """a MoE row's case as a reader names it"""
    what = f"{MODELS.get(q.get('model'), q.get('model'))} {q.get('step')}"
    if q.get("mode") != "w4a4":
        what += f" {(q.get('mode') or '').upper()}"
    routing = q.get("routing") or ""
    zipf = re.match(r"skewed\(s=([0-9.]+)", routing)
    if zipf:
        what += f", skewed (Zipf {zipf.group(1)})"
    elif routing.startswith("balanced"):
        what += ", balanced"  # its seed changes nothing
    elif not routing.startswith("random"):
        what += f", {routing}"
    shared = re.search(r"shared=(\d+)", routing)
    if shared and not what.endswith(routing):
        what += f", {shared.group(1)} shared"
    return what


def moe_docs_of(res, shown):
    """the MoE files that hold the rows shown"""
    ids = {id(r) for r in shown}
    return [(p, d) for p, d in res.moe_docs if any(id(r) in ids for r in d["rows"])]


def moe_order(res):
    """the MoE cases by model (as first seen), mode, step, routing, tokens"""
    models = list(dict.fromkeys(c[0] for c in res.moe))
    steps = ("gate_up", "down", "layer")
    return sorted(res.moe, key=lambda c: (models.index(c[0]), c[2] != "w4a4", steps.index(c[1])
                                          if c[1] in steps else 9, c[3] or "", c[4] or 0))


def region_moe(res):
    """every MoE case: moe-fp4-sm90 (its path, % of the read bandwidth)
    against the grouped baselines"""
    cases = moe_order(res)
    if not cases:
        return ["No MoE rows among the results."]
    shown = [r for c in cases for r in res.moe[c].values()]
    out = [res.note(shown, moe_docs_of(res, shown)), ""]
    out += ["| case | T | tokens an expert (min/median/max) | moe-fp4-sm90 path | moe-fp4-sm90 us "
            "| % read BW | moe-cublas-bf16 us | moe-cublaslt-fp8 us | moe-loop-fp4 us "
            "| vs bf16 | vs fp8 |",
            "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        rows = res.moe[c]
        win = fastest(rows, (MOE_OURS, MOE_BF16, MOE_FP8, MOE_LOOP))
        cells = {}
        for b in (MOE_OURS, MOE_BF16, MOE_FP8, MOE_LOOP):
            x = rows.get(b)
            t = cell_us(x) if x is None or x.get("state") == "ok" else x.get("state", "?")
            cells[b] = f"**{t}**" if b == win else t
        r = rows.get(MOE_OURS)
        q = next(iter(rows.values()))["moe"]
        tpe = q.get("tokens_per_expert") or {}
        spread = "/".join(f"{tpe[k]:g}" for k in ("min", "median", "max") if k in tpe) or "-"
        pct = (r or {}).get("moe", {}).get("pct_bandwidth") if median(r) else None
        out.append(f"| {moe_case(q)} | {q.get('tokens')} | {spread} | {moe_path(r)} "
                   f"| {cells[MOE_OURS]} | {'-' if pct is None else f'{pct:.0f}%'} "
                   f"| {cells[MOE_BF16]} | {cells[MOE_FP8]} | {cells[MOE_LOOP]} "
                   f"| {cell_paired(r, MOE_BF16) if r else '-'} "
                   f"| {cell_ratio(rows.get(MOE_FP8), r) if r else '-'} |")
    refused = sorted({x.get("reason") or x.get("backend", "?") for c in cases for x in res.moe[c].values()
                      if x.get("state") == "unsupported"})
    out += ["", "Bold: the fastest backend of the case; \"-\": not in that run. vs bf16: "
            "moe-fp4-sm90's paired ratio against moe-cublas-bf16 with its 95% interval (above 1: "
            "moe-fp4-sm90 is faster); vs fp8: the ratio of the medians. % read BW: the weight and "
            "activation bytes the call reads over the measured read bandwidth."
            + (" Unsupported, as the rows say: " + "; ".join(refused) + "." if refused else "")]
    return out


def region_moe_summary(res):
    """the first model's W4A4 gate_up and down rows with random routing: moe-fp4-sm90
    against the two grouped vendor baselines"""
    cases = [c for c in moe_order(res) if c[0] == next(iter(res.moe))[0] and c[2] == "w4a4"
             and c[1] != "layer" and (c[3] or "").startswith("random")]
    if not cases:
        return ["No MoE rows among the results."]
    shown = [r for c in cases for r in res.moe[c].values()]
    out = [res.note(shown, moe_docs_of(res, shown)), "",
           "| case | T | tokens an expert (median) | moe-fp4-sm90 us | % read BW | moe-cublas-bf16 us "
           "| moe-cublaslt-fp8 us | vs bf16 | vs fp8 |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        rows = res.moe[c]
        win = fastest(rows, (MOE_OURS, MOE_BF16, MOE_FP8))
        cells = {b: (f"**{cell_us(rows.get(b))}**" if b == win else cell_us(rows.get(b)))
                 for b in (MOE_OURS, MOE_BF16, MOE_FP8)}
        r = rows.get(MOE_OURS)
        q = next(iter(rows.values()))["moe"]
        med = (q.get("tokens_per_expert") or {}).get("median")
        pct = (r or {}).get("moe", {}).get("pct_bandwidth") if median(r) else None
        out.append(f"| {moe_case(q)} | {c[4]} | {'-' if med is None else f'{med:g}'} "
                   f"| {cells[MOE_OURS]} | {'-' if pct is None else f'{pct:.0f}%'} "
                   f"| {cells[MOE_BF16]} | {cells[MOE_FP8]} | {cell_paired(r, MOE_BF16) if r else '-'} "
                   f"| {cell_ratio(rows.get(MOE_FP8), r) if r else '-'} |")
    out += ["", "Bold: the fastest of the three. vs bf16: the paired ratio with its 95% interval; "
            "vs fp8: the ratio of the medians."]
    return out


def region_moe_steps(res):
    """the layer rows: each step's time for every backend"""
    cases = [c for c in moe_order(res) if c[1] == "layer"]
    if not cases:
        return ["No MoE layer rows among the results."]
    shown = [r for c in cases for r in res.moe[c].values()]
    out = [res.note(shown, moe_docs_of(res, shown)), ""]
    out += ["| case | T | backend | us | steps (us) |", "|---|---:|---|---:|---|"]
    for c in cases:
        for b, r in res.moe[c].items():
            if r.get("state") != "ok":
                continue
            steps = ", ".join(f"{st['name']} {st['us']:.1f}" for st in r.get("steps") or [])
            out.append(f"| {moe_case(r['moe'])} | {c[4]} | {b} | {cell_us(r)} | {steps or '-'} |")
    return out


# ---- targets -------------------------------------------------------------------
# The performance targets of the routed MoE layer and of dense decode on the H200
# (GLM-5: E = 256, top-8, gate_up [4096 x 6144] and down [6144 x 2048] an expert).
# The targets name balanced routing (16 tokens every expert at T = 512): a case
# is read from balanced-routing rows where the results have them
# (bench/results/<gpu>/moe/glm5-balanced.json), else from random routing
# (seeded), and the note under the table says which.

def moe_row(res, step, tokens, mode="w4a4", routing=None, backend=MOE_OURS, model="glm5"):
    """a MoE case's row of backend; routing None: balanced where the results
    have the case so, else random"""
    for want in (routing,) if routing is not None else ("balanced", "random"):
        for (mo, st, md, rt, t), rows in res.moe.items():
            if (mo, st, md, t) == (model, step, mode, tokens) and (rt or "").startswith(want):
                return rows.get(backend)
    return None


def routing_of(r):
    """a MoE row's routing mode: balanced, random, skewed or trace"""
    return re.split(r"[(,]", ((r or {}).get("moe") or {}).get("routing") or "-")[0]


def dense_row(res, shape, backend=OURS):
    return res.shapes.get(shape, {}).get(backend)


def pct_read(res, r):
    """the % of the read bandwidth measured in a row's run that its bytes take at its median"""
    bw, t = (r or {}).get("_read_gbps") or res.ceilings.get("read_gbps"), median(r)
    return 100 * r["bytes"] / (bw * 1e3) / t if bw and t and r.get("bytes") else None


def speedup(r, base):
    """base's median over r's: how many times faster r is"""
    a, b = median(base), median(r)
    return a / b if a and b else None


def at_most(value, limit):
    if value is None:
        return "not measured"
    return "met" if value <= limit else f"missed by {100 * (value / limit - 1):.0f}%"


def at_least(value, want):
    if value is None:
        return "not measured"
    return "met" if value >= want else f"missed ({value:.2f}x against {want:g}x)"


def fmt_us(r, res, bw=True):
    t = median(r)
    if t is None:
        return cell_us(r)
    p = pct_read(res, r) if bw else None
    return f"{t:.1f} us" + (f" ({p:.0f}% of read BW)" if p is not None else "")


def t_gate_up_512(res):
    r = moe_row(res, "gate_up", 512)
    return fmt_us(r, res), at_most(median(r), 1050)


def t_ratio_512(base, want):
    def f(res):
        r = moe_row(res, "gate_up", 512)
        x = speedup(r, moe_row(res, "gate_up", 512, backend=base))
        return ("-" if x is None else f"{x:.2f}x"), at_least(x, want)
    return f


def t_time(step, tokens, limit):
    def f(res):
        r = moe_row(res, step, tokens)
        return fmt_us(r, res), at_most(median(r), limit)
    return f


def t_8192(res):
    r, b = moe_row(res, "gate_up", 8192), moe_row(res, "gate_up", 8192, backend=MOE_BF16)
    if median(r) is None or median(b) is None:
        return "-", "not measured"
    return f"{median(r):.0f} us against {median(b):.0f}", at_most(median(r), median(b))


def t_skewed(res):
    s, r = moe_row(res, "gate_up", 512, routing="skewed"), moe_row(res, "gate_up", 512)
    x = speedup(r, s)  # skewed time over balanced (or random) time
    if x is None:
        return "-", "not measured"
    return f"{median(s):.0f} us against {median(r):.0f} {routing_of(r)} ({x:.2f}x)", at_most(x, 1.15)


def t_one(step):
    def f(res):
        r = moe_row(res, step, 1)
        floor = (r or {}).get("floor_us") if median(r) else None
        x = median(r) / floor if floor else None
        if x is None:
            return fmt_us(r, res, False), "not measured"
        return f"{median(r):.1f} us, {x:.2f}x the read time ({floor:.1f} us)", at_most(x, 1.3)
    return f


def t_w4a16(res):
    ratios = []
    for (mo, st, md, rt, t), rows in res.moe.items():
        if md == "w4a16" and mo == "glm5" and st in ("gate_up", "down"):
            x = speedup(moe_row(res, st, t, routing=rt or ""), rows.get(MOE_OURS))
            if x is not None:
                ratios.append(x)  # the W4A16 time over the W4A4 time
    if not ratios:
        return "-", "not measured"
    return (f"{min(ratios):.2f}-{max(ratios):.2f}x the W4A4 time ({len(ratios)} rows)",
            at_most(max(ratios), 1.10))


def t_dense(shape):
    def f(res):
        r = dense_row(res, shape)
        p, x = pct_read(res, r), speedup(r, dense_row(res, shape, FP8))
        if p is None or x is None:
            return fmt_us(r, res), "not measured"
        verdict = "met" if p >= 75 and x >= 1.5 else "missed (" + ", ".join(
            w for w, bad in ((f"{p:.0f}% against 75%", p < 75), (f"{x:.2f}x fp8 against 1.5x", x < 1.5))
            if bad) + ")"
        return f"{fmt_us(r, res)}, {x:.2f}x fp8", verdict
    return f


def t_dense_small(res):
    r = dense_row(res, (16, 2048, 6144))
    return fmt_us(r, res), at_most(median(r), 5)


TARGETS = (
    ("GLM-5 gate_up, T = 512 (16 tokens an expert)", "<= 1050 us (>= 75% of read BW)",
     t_gate_up_512),
    ("GLM-5 gate_up, T = 512, against moe-cublaslt-fp8", ">= 2x", t_ratio_512(MOE_FP8, 2)),
    ("GLM-5 gate_up, T = 512, against moe-cublas-bf16", ">= 3.5x", t_ratio_512(MOE_BF16, 3.5)),
    ("GLM-5 down, T = 512", "<= 550 us", t_time("down", 512, 550)),
    ("GLM-5 gate_up, T = 2048 (64 an expert)", "<= 1400 us", t_time("gate_up", 2048, 1400)),
    ("GLM-5 gate_up, T = 8192 (256 an expert)", "no slower than moe-cublas-bf16", t_8192),
    ("GLM-5 gate_up, T = 512, skewed (Zipf 1.2) against balanced routing", "within 15%", t_skewed),
    ("GLM-5 gate_up, T = 1 (8 experts)", "<= 1.3x the read time of their bytes", t_one("gate_up")),
    ("GLM-5 down, T = 1 (8 experts)", "<= 1.3x the read time of their bytes", t_one("down")),
    ("GLM-5 W4A16 against W4A4, gate_up and down", "within 10%", t_w4a16),
    ("dense decode 16x8192x8192", ">= 75% of read BW, >= 1.5x cublaslt-fp8",
     t_dense((16, 8192, 8192))),
    ("dense decode 16x28672x4096", ">= 75% of read BW, >= 1.5x cublaslt-fp8",
     t_dense((16, 28672, 4096))),
    ("dense decode 16x2048x6144", "<= 5 us", t_dense_small),
)


def targets_shown(res):
    """the rows the targets read: GLM-5's gate_up and down cases and the decode shapes"""
    rows = [r for (mo, st, *_), case in res.moe.items() if mo == "glm5" and st in ("gate_up", "down")
            for r in case.values()]
    return rows + [r for s in ((16, 8192, 8192), (16, 28672, 4096), (16, 2048, 6144))
                   for r in res.shapes.get(s, {}).values() if r["backend"] in (OURS, FP8)]


def region_targets(res):
    """each target met or missed on the first GPU, the other GPUs' numbers beside it"""
    gpus = [res] + res.others
    names = [(g.docs[0][1]["device"].get("name") or "no GPU").replace("NVIDIA ", "") for g in gpus]
    out = []
    for g in gpus:
        shown = targets_shown(g)
        ids = {id(r) for r in shown}
        out.append(g.note(shown, [(p, d) for p, d in g.docs if any(id(r) in ids for r in d["rows"])] or g.docs))
    out += ["", f"| case | target | {names[0]} | {names[0]}: target |" + "".join(f" {n} |" for n in names[1:]),
            "|---|---|---|---|" + "---|" * (len(names) - 1)]
    for case, target, f in TARGETS:
        measured = [f(g) for g in gpus]
        out.append(f"| {case} | {target} | {measured[0][0]} | {measured[0][1]} |"
                   + "".join(f" {m[0]} |" for m in measured[1:]))
    others = ", ".join(names[1:])
    out += ["", f"The targets are set for the {names[0]}"
            + (f"; beside it the same runs on the {others}" if others else "")
            + ". % of read BW: the bytes a call reads (the weights of the experts that got tokens, "
            "and the activations) over the read bandwidth measured in the same run. Routing: the "
            "targets name balanced routing (16 tokens every expert at T = 512); "
            + "; ".join(routing_note(g, n) for g, n in zip(gpus, names)) + "."]
    return out


def routing_note(res, name):
    """which routing the GLM-5 rows of res that the targets read have"""
    by = {}
    for t in (1, 512, 2048, 8192):
        r = moe_row(res, "gate_up", t)
        if r:
            by.setdefault(routing_of(r), []).append(str(t))
    if not by:
        return f"the {name} has no GLM-5 rows"
    text = f"the {name}'s rows are " + " and ".join(f"{rt} at T = {', '.join(ts)}" for rt, ts in
                                                    sorted(by.items(), key=lambda i: i[0] != "balanced"))
    r512 = moe_row(res, "gate_up", 512)
    tpe = ((r512 or {}).get("moe") or {}).get("tokens_per_expert") or {}
    if routing_of(r512) == "random" and "min" in tpe and "max" in tpe:
        text += f" ({tpe['min']:g} to {tpe['max']:g} tokens an expert at T = 512)"
    return text


def regions():
    r = {"ceilings": region_ceilings, "results": region_results, "choice": region_choice,
         "moe": region_moe, "moe-summary": region_moe_summary, "moe-steps": region_moe_steps,
         "targets": region_targets}
    for k in KERNELS:
        r["kernel-" + k] = (lambda kk: lambda res: region_kernel(res, kk))(k)
    return r


# ---- files ---------------------------------------------------------------------

def rewrite(text, res, path):
    """text with every generated region rebuilt; the names of the regions"""
    gens, out, names, lines, i = regions(), [], [], text.split("\n"), 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        if name not in gens:
            sys.exit(f"{path}:{i}: unknown region '{name}' (bench/perf_table.py --list)")
        j = i
        while j < len(lines) and lines[j].strip() != END:
            if BEGIN.match(lines[j]):
                sys.exit(f"{path}:{i}: region '{name}' has no '{END}' before the next one")
            j += 1
        if j == len(lines):
            sys.exit(f"{path}:{i}: region '{name}' has no '{END}'")
        out += gens[name](res)
        out.append(lines[j])
        names.append(name)
        i = j + 1
    return "\n".join(out), names


def load_by_gpu(paths):
    """Results of the first file's GPU, with the other GPUs' Results in .others"""
    groups = {}
    for p in paths:
        try:
            with open(p) as f:
                dev = json.load(f).get("device") or {}
        except (OSError, ValueError) as e:
            sys.exit(f"{p}: {e}")
        groups.setdefault(dev.get("name") if dev.get("present") else "no GPU", []).append(p)
    first, *rest = groups.values()
    res = Results(first)
    res.others = [Results(g) for g in rest]
    return res


def usage():
    print(__doc__, file=sys.stderr)
    sys.exit(2)


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args[0] == "--list":
        print("\n".join(regions()))
        return 0
    if args[0] == "--print" and len(args) >= 3:
        gens = regions()
        if args[1] not in gens:
            sys.exit(f"unknown region '{args[1]}' (bench/perf_table.py --list)")
        res = load_by_gpu(args[2:])
        print("\n".join(gens[args[1]](res)))
        return 0
    if args[0] not in ("--update", "--check"):
        usage()
    js = [a for a in args[1:] if a.endswith(".json")]
    mds = [a for a in args[1:] if not a.endswith(".json")]
    if not js or not mds:
        usage()
    res = load_by_gpu(js)
    stale = 0
    for p in mds:
        with open(p) as f:
            old = f.read()
        new, names = rewrite(old, res, p)
        if not names:
            print(f"{p}: no generated region", file=sys.stderr)
        if args[0] == "--check":
            if new != old:
                print(f"{p}: generated regions out of date ({', '.join(names)})", file=sys.stderr)
                stale = 1
        elif new != old:
            with open(p + ".tmp", "w") as f:
                f.write(new)
            os.replace(p + ".tmp", p)
            print(f"{p}: rewrote {', '.join(names)}")
        else:
            print(f"{p}: up to date ({', '.join(names)})")
    return stale


if __name__ == "__main__":
    sys.exit(main())
