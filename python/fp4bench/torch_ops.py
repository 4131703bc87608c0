"""NVFP4 on torch tensors (torch imported here, never by the package itself):
host NVFP4 objects to GPU tensors, and an exact dequantizer from codes and
swizzled scales, for dequantize-then-matmul callables."""

from __future__ import annotations

from typing import Any

from . import format as fmt


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise RuntimeError("fp4bench.torch_ops needs torch") from None
    return torch


def to_torch(q: fmt.NVFP4, device: Any = "cuda") -> dict[str, Any]:
    """{"codes": uint8 [rows, K/2], "scales": float8_e4m3fn [Rp, Kbp] swizzled,
    "scales_plain": uint8 [rows, K/16], "global_scale": float32 [1]} on device."""
    torch = _torch()
    sw = torch.from_numpy(q.scales_swizzled).to(device)
    if hasattr(torch, "float8_e4m3fn"):
        sw = sw.view(torch.float8_e4m3fn)
    return {
        "codes": torch.from_numpy(q.codes).to(device),
        "scales": sw,
        "scales_plain": torch.from_numpy(q.scales).to(device),
        "global_scale": torch.tensor([q.global_scale], dtype=torch.float32, device=device),
    }


class Dequantizer:
    """codes [rows, K/2] + swizzled scales -> bf16 [rows, K] = e2m1 * scale, exactly
    (no global scale: multiply the GEMM by alpha). Tables and the swizzle
    index are built once, on the device; a call allocates only through torch's
    caching allocator (capturable in a CUDA graph)."""

    def __init__(self, rows: int, cols: int, device: Any = "cuda"):
        torch = _torch()
        self.rows, self.cols = rows, cols
        self.e2m1 = torch.from_numpy(fmt.e2m1_table().copy()).to(device)
        self.e4m3 = torch.from_numpy(fmt.e4m3_table().copy()).to(device)
        self.index = torch.from_numpy(fmt.swizzle_index(rows, cols).reshape(-1)).to(device)

    def __call__(self, codes: Any, scales_swizzled: Any) -> Any:
        torch = _torch()
        r, k = self.rows, self.cols
        c = codes.view(torch.uint8)
        nib = torch.stack((c & 0xF, c >> 4), dim=-1).reshape(r, k)  # even K index low
        vals = self.e2m1[nib.long()]
        sf = self.e4m3[scales_swizzled.view(torch.uint8).reshape(-1)[self.index].long()]
        x = vals.view(r, k // 16, 16) * sf.view(r, k // 16, 1)
        return x.view(r, k).to(torch.bfloat16)


def bf16_matmul(ops: Any) -> Any:
    """The GEMM of the cublas-bf16 backend in torch: D = alpha * A_dq B_dq^T with
    the exact bf16 operands of the bundle, fp32 accumulation, alpha applied in
    the GEMM's epilogue (addmm with beta 0, so the NaN poison in ops.out is
    ignored) and one rounding to bf16, written into ops.out."""
    return ops.out.addmm_(ops.a_dq, ops.b_dq.t(), beta=0.0, alpha=ops.alpha_f)


__all__ = ["to_torch", "Dequantizer", "bf16_matmul"]
