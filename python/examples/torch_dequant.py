#!/usr/bin/env python3
"""A dequantize-then-matmul NVFP4 GEMM in plain torch, against the bf16 matmul of
the same (exactly dequantized) operands, verified and timed by fp4bench.bench().
Runs wherever torch has a CUDA GPU.

    python3 torch_dequant.py                       # the GLM-5 seed shapes
    python3 torch_dequant.py --shape 16x2048x6144 --json out.json

torch-dequant-mm reads the codes and the swizzled block scales every call,
turns them into bf16 (fp4bench.torch_ops.Dequantizer: two table lookups and a
multiply, exact) and multiplies with alpha in the epilogue; torch-bf16-mm is
the matmul alone on bf16 operands prepared once (the cublas-bf16 backend's
work). The gap is what dequantizing on every call costs.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", help="MxNxK[,MxNxK...] (default: --preset seed)")
    ap.add_argument("--preset", default=None, help="a preset of `fp4bench list` (default seed)")
    ap.add_argument("--json", help="write the report here (fp4bench compare reads it)")
    ap.add_argument("--max-time", type=float, default=10.0, help="seconds per case at most")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_dequant.py: needs torch (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_dequant.py: needs a CUDA GPU, and torch sees none", file=sys.stderr)
        return 2
    import fp4bench
    from fp4bench.torch_ops import Dequantizer, bf16_matmul

    def setup(problem: fp4bench.Problem) -> tuple[Dequantizer, Dequantizer]:
        return Dequantizer(problem.m, problem.k), Dequantizer(problem.n, problem.k)

    def dequant_mm(ops: fp4bench.Operands):
        deq_a, deq_b = ops.state
        a = deq_a(ops.a, ops.a_scale)  # bf16 [m, k], e2m1 * scale
        b = deq_b(ops.b, ops.b_scale)  # bf16 [n, k]
        return ops.out.addmm_(a, b.t(), beta=0.0, alpha=ops.alpha_f)

    shapes = args.shape if args.shape else None
    rep = fp4bench.bench(
        {"torch-bf16-mm": fp4bench.Backend(bf16_matmul, math="bf16"),
         "torch-dequant-mm": fp4bench.Backend(dequant_mm, setup=setup, math="bf16",
                                              needs_dequantized=False)},
        shapes, preset=None if shapes else (args.preset or "seed"),
        baseline="torch-bf16-mm", json=args.json, max_time=args.max_time)
    print(rep.table())
    return 1 if any(r.state == "FAILED" for r in rep.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
