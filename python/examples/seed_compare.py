#!/usr/bin/env python3
"""SGLang's sgl_kernel.cutlass_scaled_fp4_mm against FlashInfer's mm_fp4 on the
GLM-5 seed shapes, every FlashInfer backend named explicitly (cutlass, cudnn,
trtllm; never "auto", which hides what ran), verified against the exact
reference and timed by fp4bench.bench(): cold L2, CUDA graphs, interleaved
rounds, paired ratios against SGLang.

    python3 seed_compare.py
    python3 seed_compare.py --json seed.json && fp4bench compare old.json seed.json

Needs a Blackwell GPU (sm_100 or sm_120), torch, sgl_kernel and flashinfer.
A FlashInfer backend that does not run on this GPU (cudnn and trtllm on
sm_120) gets an "unsupported" row with the reason, not a crash.

Signatures relied on (looked up in the packages' sources and documentation):
  sgl_kernel.cutlass_scaled_fp4_mm(a, b, block_scale_a, block_scale_b, alpha,
      out_dtype) -> Tensor
      a uint8 [m, k/2], b uint8 [n, k/2] (the weight, TN), the block scales
      float8_e4m3fn in the 128x4 swizzled layout, [roundup(rows, 128),
      roundup(k/16, 4)], alpha a 1-element float32 CUDA tensor; it allocates
      and returns D [m, n] (sgl-kernel, python/sgl_kernel/gemm.py).
  flashinfer.mm_fp4(a, b, a_descale, b_descale, alpha=None,
      out_dtype=torch.bfloat16, out=None, block_size=16, use_8x4_sf_layout=False,
      backend="auto", ...) -> Tensor
      b is the (k/2, n) column-major view of the [n, k/2] weight (b.T), and
      b_descale likewise the transposed swizzled scales, as FlashInfer's own
      tests call it (tests/gemm/test_mm_fp4.py: mm_fp4(a_fp4, b_fp4.T, a_s,
      b_s.T, alpha, torch.bfloat16, out, block_size=16, use_8x4_sf_layout=False,
      backend=...)); writes into out. alpha and out are always passed (a
      backend returned all zeros without them, FlashInfer #2577).
      backend="trtllm" wants the weight shuffled as nvfp4_quantize(...,
      do_shuffle=True) does it: shuffle_matrix_a(b, 128) on the codes and
      shuffle_matrix_sf_a(plain scales, 128) on the row-major scales.
      mm_fp4.is_backend_supported(backend, cc), where this FlashInfer has it,
      says which backends run on this GPU.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

FI_BACKENDS = ("cutlass", "cudnn", "trtllm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", help="MxNxK[,MxNxK...] (default: the seed preset)")
    ap.add_argument("--json", help="write the report here (fp4bench compare reads it)")
    ap.add_argument("--max-time", type=float, default=10.0, help="seconds per case at most")
    args = ap.parse_args()

    try:
        import torch
    except ImportError:
        print("seed_compare.py: needs torch, sgl_kernel and flashinfer (torch is missing)",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("seed_compare.py: needs a Blackwell GPU (sm_100 or sm_120); torch sees no GPU",
              file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    if major not in (10, 12):
        print(f"seed_compare.py: needs a Blackwell GPU (sm_100 or sm_120); this is "
              f"{torch.cuda.get_device_name()} (sm_{major}{minor}), which has no FP4 tensor "
              "cores (on Hopper try own_kernel.py)", file=sys.stderr)
        return 2
    missing = []
    try:
        import sgl_kernel
    except ImportError:
        missing.append("sgl_kernel (pip install sgl-kernel)")
    try:
        import flashinfer
    except ImportError:
        missing.append("flashinfer (pip install flashinfer-python)")
    if missing:
        print(f"seed_compare.py: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    import fp4bench

    cc = major * 10 + minor

    def sgl(ops: fp4bench.Operands) -> Any:
        return sgl_kernel.cutlass_scaled_fp4_mm(ops.a, ops.b, ops.a_scale, ops.b_scale,
                                                ops.alpha, torch.bfloat16)

    def shuffles() -> tuple[Any, Any]:
        for mod in (flashinfer, getattr(flashinfer, "fp4_quantization", None)):
            if mod is not None and hasattr(mod, "shuffle_matrix_a") and \
                    hasattr(mod, "shuffle_matrix_sf_a"):
                return mod.shuffle_matrix_a, mod.shuffle_matrix_sf_a
        raise fp4bench.Unsupported("this flashinfer has no shuffle_matrix_a/shuffle_matrix_sf_a")

    def flashinfer_backend(name: str) -> fp4bench.Backend:
        mm_fp4 = flashinfer.mm_fp4

        def setup(problem: fp4bench.Problem) -> None:
            check = getattr(mm_fp4, "is_backend_supported", None)
            if check is not None and not check(name, cc):
                raise fp4bench.Unsupported(f"flashinfer mm_fp4 backend {name} does not run "
                                           f"on sm_{cc}")
            for ops in problem.operands:
                if name == "trtllm":
                    shuf_a, shuf_sf = shuffles()
                    b = shuf_a(ops.b, 128)
                    sf = shuf_sf(ops.b_scale_plain, 128).reshape(ops.b_scale_plain.shape)
                    ops.extra.update(b=b, b_scale=sf)
                else:
                    ops.extra.update(b=ops.b, b_scale=ops.b_scale)

        def run(ops: fp4bench.Operands) -> None:
            mm_fp4(ops.a, ops.extra["b"].T, ops.a_scale, ops.extra["b_scale"].T, ops.alpha,
                   torch.bfloat16, ops.out, block_size=16, use_8x4_sf_layout=False,
                   backend=name)

        return fp4bench.Backend(run, setup=setup, math="fp4", needs_dequantized=False,
                                variant=f"flashinfer.mm_fp4 backend={name}")

    backends: dict[str, Any] = {
        "sgl-cutlass": fp4bench.Backend(sgl, math="fp4", needs_dequantized=False,
                                        variant="sgl_kernel.cutlass_scaled_fp4_mm"),
    }
    for name in FI_BACKENDS:
        backends[f"fi-{name}"] = flashinfer_backend(name)

    shapes = args.shape if args.shape else None
    rep = fp4bench.bench(backends, shapes, preset=None if shapes else "seed",
                         baseline="sgl-cutlass", json=args.json, max_time=args.max_time)
    print(rep.table())
    print("ratio: sgl-cutlass time / this backend's time, per interleaved round (above 1: "
          "faster than SGLang)")
    return 1 if any(r.state == "FAILED" for r in rep.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
