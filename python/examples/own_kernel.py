#!/usr/bin/env python3
"""Our fp4-sm90 kernels (the C library's backend table, through ctypes) on torch's
current stream: one call checked against the exact reference, then timed by
fp4bench.bench() against torch's bf16 matmul on the GLM-5 seed shapes.

    python3 own_kernel.py
    python3 own_kernel.py --shape 16x2048x6144,4096x2048x6144 --json own.json

Needs the CUDA build of libfp4.so (FP4BENCH_LIB) and a Hopper GPU (sm_90): on
any other GPU the fp4-sm90 rows say "unsupported" with the backend's reason.
The backend uploads its own operand copies in prepare() (A on even copies, -A
on odd ones) and launches on the stream it is given, so bench() captures it
into torch's CUDA graph like any torch callable.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", help="MxNxK[,MxNxK...] (default: the seed preset)")
    ap.add_argument("--json", help="write the report here (fp4bench compare reads it)")
    ap.add_argument("--max-time", type=float, default=10.0, help="seconds per case at most")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("own_kernel.py: needs torch (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("own_kernel.py: needs a CUDA GPU, and torch sees none", file=sys.stderr)
        return 2
    import fp4bench
    from fp4bench.torch_ops import bf16_matmul

    try:
        sm90 = fp4bench.LibraryBackend("fp4-sm90")
    except KeyError as e:
        print(f"own_kernel.py: {e.args[0]}: this needs the CUDA build of libfp4.so",
              file=sys.stderr)
        return 2

    # One call by hand: quantize, prepare one copy, run on torch's stream, check.
    x = torch.randn(16, 6144, dtype=torch.bfloat16)
    w = torch.randn(2048, 6144, dtype=torch.bfloat16) * 0.02
    a, b = fp4bench.quantize(x), fp4bench.quantize(w)
    try:
        plan = sm90.prepare(a, b, copies=1)
    except fp4bench.Fp4Error as e:
        print(f"own_kernel.py: fp4-sm90 cannot run here: {e}", file=sys.stderr)
        return 2
    try:
        plan.run(0, torch.cuda.current_stream().cuda_stream)
        torch.cuda.current_stream().synchronize()
        verdict = fp4bench.check(plan.read_output(0), a, b, backend="fp4-sm90")
        print(f"fp4-sm90 ({plan.variant()}) 16x2048x6144, one call: "
              f"{'ok' if verdict else 'MISMATCH'}: {verdict.why}")
    finally:
        plan.release()
    if not verdict:
        return 1

    shapes = args.shape if args.shape else None
    rep = fp4bench.bench({"torch-bf16-mm": fp4bench.Backend(bf16_matmul, math="bf16"),
                          "fp4-sm90": sm90},
                         shapes, preset=None if shapes else "seed", baseline="torch-bf16-mm",
                         json=args.json, max_time=args.max_time)
    print(rep.table())
    if sm90.warning_text():
        print(f"warnings from fp4-sm90:\n{sm90.warning_text()}", file=sys.stderr)
    return 1 if any(r.state == "FAILED" for r in rep.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
