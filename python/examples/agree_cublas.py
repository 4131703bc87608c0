#!/usr/bin/env python3
"""The agreement check: the same GEMM timed by the two harnesses must agree.
torch's bf16 matmul timed by fp4bench.bench() against the cublas-bf16 backend
timed by the CLI (`fp4bench run --backend cublas-bf16 --json`), at three shapes;
prints both and exits 1 when a median differs by more than 3%.

    python3 agree_cublas.py
    python3 agree_cublas.py --shape 16x2048x6144,512x2048x6144,8192x8192x8192 --tolerance 0.03

Both sides do the same work on the same bits: the operands come from the same
seed through the library's generator, are dequantized exactly to bf16 without
the global scales, and multiplied with alpha in the epilogue (torch.addmm with
beta 0 here, cublasGemmEx there), one bf16 rounding of D. The CLI runs with
--baseline-tuning off (the plain call torch makes too). Both derive the
operand copies from the least a GEMM moves and the batch from the copies, so
they rotate the same copies in batches of the same size; everything else
(cold L2, CUDA graphs behind a stream gate, warm-up, stopping rule) is the
same rule. Exit status: 0 agree, 1 a median
differs by more than the tolerance or a row failed, 2 cannot run here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_SHAPES = "16x2048x6144,256x2048x6144,4096x2048x6144"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default=DEFAULT_SHAPES, help=f"(default {DEFAULT_SHAPES})")
    ap.add_argument("--tolerance", type=float, default=0.03, help="relative (default 0.03)")
    ap.add_argument("--out", help="keep both JSON reports in this folder")
    ap.add_argument("--baseline-tuning", default="off", choices=("on", "off"),
                    help="the CLI's cublas-bf16 algorithm tuning (default off: the plain "
                         "call torch makes too)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("agree_cublas.py: needs torch (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("agree_cublas.py: needs a CUDA GPU, and torch sees none", file=sys.stderr)
        return 2
    import fp4bench
    from fp4bench import libbackend
    from fp4bench.torch_ops import bf16_matmul

    try:
        prog = fp4bench.program()
        libbackend.find("cublas-bf16")
    except (FileNotFoundError, KeyError) as e:
        print(f"agree_cublas.py: {e} (this needs the CUDA build)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="agree-"))
    out.mkdir(parents=True, exist_ok=True)
    cli_json, py_json = out / "cli.json", out / "python.json"

    # a plain cublasGemmEx (CUBLAS_GEMM_DEFAULT), as torch calls it: the CLI's
    # tuning of the baseline (on by default) would compare two algorithm choices
    cmd = [prog, "run", "--backend", "cublas-bf16", "--shape", args.shape, "--no-ceilings",
           "--baseline-tuning", args.baseline_tuning, "--json", str(cli_json)]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd)
    if p.returncode != 0:
        print(f"agree_cublas.py: the CLI exited {p.returncode}", file=sys.stderr)
        return 1

    torch_mm = fp4bench.Backend(
        bf16_matmul, math="bf16",
        bytes_moved=lambda m, n, k: libbackend.bytes_moved("cublas-bf16", m, n, k))
    rep = fp4bench.bench({"torch-mm": torch_mm}, args.shape, json=str(py_json),
                         baseline_tuning=args.baseline_tuning == "on")
    cli = fp4bench.read_json(str(cli_json))

    print(f"\n{'shape':>16}  {'CLI cublas-bf16 us':>20}  {'Python torch.mm us':>20}  "
          f"{'python/cli':>10}  copies x batch (cli | python)")
    bad = 0
    for r in rep.rows:
        c = cli.row("cublas-bf16", m=r.m, n=r.n, k=r.k)
        shape = f"{r.m}x{r.n}x{r.k}"
        if r.state != "ok" or c.state != "ok":
            print(f"{shape:>16}  {c.state:>20}  {r.state:>20}  {c.reason} {r.reason}")
            bad += 1
            continue
        ratio = r.time_us.median / c.time_us.median
        off = abs(ratio - 1.0) > args.tolerance
        bad += off
        print(f"{shape:>16}  {c.time_us.median:>12.3f} ±{100 * c.time_us.noise:4.2f}%  "
              f"{r.time_us.median:>12.3f} ±{100 * r.time_us.noise:4.2f}%  {ratio:>10.4f}  "
              f"{c.copies} x {c.batch} | {r.copies} x {r.batch}"
              f"{'  DIFFERS' if off else ''}")
    print(f"\nreports: {cli_json} {py_json}")
    if bad:
        print(f"agree_cublas.py: {bad} of {len(rep.rows)} shapes differ by more than "
              f"{100 * args.tolerance:g}% (or failed)", file=sys.stderr)
        return 1
    print(f"agree: every median within {100 * args.tolerance:g}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
