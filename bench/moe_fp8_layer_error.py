#!/usr/bin/env python3
"""How far an fp8 MoE layer is from the exact NVFP4 layer (docs/MOE.md,
"Matching a GPU pipeline"): a synthetic layer (H 1024, I 512, E 16, k 4,
T 64, gaussian data, random routing; SiLU, or with --act swiglu-oai
gpt-oss's clamped SwiGLU with gate_up scaled by 4 as fp4bench moe makes
its weights; the weights' global scales divided by sqrt(K)) through
  - the exact W4A16 layer: bf16 x, NVFP4 weights, h and d in double;
  - an fp8 layer from bf16 x, as moe-cublaslt-fp8 runs it: x and h in e4m3
    with one scale each (448 / amax), each expert's weight in e4m3 with its
    own scale, bf16 y and d;
and, for W4A4, x and h quantized to NVFP4 with static scales, those values
put to e4m3 (scale 1/8), against the exact W4A4 layer. Prints max|D-R| /
max|R| and ||D-R|| / ||R|| for each. Needs numpy and the fp4bench package
(python/; FP4BENCH_LIB names libfp4.so if it is not found). Takes seconds."""
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from fp4bench import format as F  # noqa: E402

E, K_TOP, T, H, I = 16, 4, 64, 1024, 512
E4M3 = np.unique(np.abs(F.e4m3_table()[np.isfinite(F.e4m3_table())]).astype(np.float64))


def e4m3(x):
    """nearest e4m3 value, saturating at 448 (ties: the lower; rare here)"""
    a = np.minimum(np.abs(x), 448.0)
    i = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    lo, hi = E4M3[i - 1], E4M3[i]
    return np.sign(x) * np.where(a - lo < hi - a, lo, hi)


def bf16(x):
    return F.bf16_to_f32(F.f32_to_bf16(np.asarray(x, np.float32))).astype(np.float64)


def nvfp4_values(a, encode_scale):
    """NVFP4 of a with a static encode scale: e2m1 x scale (no global) and the global scale"""
    with warnings.catch_warnings():  # a static scale may clip a block (the fp8 h's): as a GPU would
        warnings.simplefilter("ignore", UserWarning)
        q = F.quantize(np.asarray(a, np.float32), global_scale=1.0 / encode_scale)
    return q.dequantize(with_global_scale=False).astype(np.float64), 1.0 / encode_scale


def e4m3_weight(m):
    v = m.dequantize(with_global_scale=False).astype(np.float64)
    enc = 448.0 / np.abs(v).max()
    return e4m3(v * enc) / enc * m.global_scale


def silu(g, u):
    return g / (1.0 + np.exp(-g)) * u


def swiglu_oai(g, u):  # FP4_MOE_SWIGLU_ALPHA 1.702, FP4_MOE_SWIGLU_LIMIT 7
    g = np.minimum(g, 7.0)
    u = np.clip(u, -7.0, 7.0)
    return g / (1.0 + np.exp(-1.702 * g)) * (u + 1.0)


def main():
    act = silu
    if sys.argv[1:] == ["--act", "swiglu-oai"]:
        act = swiglu_oai
    elif sys.argv[1:]:
        sys.exit("usage: moe_fp8_layer_error.py [--act swiglu-oai]")
    gain_gu = (4.0 if act is swiglu_oai else 1.0) / np.sqrt(H)  # as fp4bench moe's weights
    rng = np.random.default_rng(1)
    gu = [F.make_operand("gaussian", 2 * I, H, 10 + e) for e in range(E)]
    dn = [F.make_operand("gaussian", H, I, 100 + e) for e in range(E)]
    gu_x = [m.dequantize().astype(np.float64) * gain_gu for m in gu]
    dn_x = [m.dequantize().astype(np.float64) / np.sqrt(I) for m in dn]
    gu_8, dn_8 = [e4m3_weight(m) * gain_gu for m in gu], [e4m3_weight(m) / np.sqrt(I) for m in dn]
    ids = np.array([rng.choice(E, K_TOP, replace=False) for _ in range(T)])
    rw = rng.random((T, K_TOP))
    rw /= rw.sum(1, keepdims=True)
    x = bf16(rng.standard_normal((T, H)))
    amax_x = np.abs(x).max()
    for mode in ("w4a16", "w4a4"):
        if mode == "w4a4":
            xv, xg = nvfp4_values(x, 448.0 * 6.0 / amax_x)
            x_ref, x_8 = xv * xg, e4m3(xv / 8.0) * 8.0 * xg
        else:
            x_ref, x_8 = x, e4m3(x * 448.0 / amax_x) / (448.0 / amax_x)
        h_ref, h_8 = np.zeros((T, K_TOP, I)), np.zeros((T, K_TOP, I))
        for t in range(T):
            for j in range(K_TOP):
                e = ids[t, j]
                y = x_ref[t] @ gu_x[e].T
                y8 = bf16(x_8[t] @ gu_8[e].T)
                h_ref[t, j], h_8[t, j] = act(y[:I], y[I:]), act(y8[:I], y8[I:])
        if mode == "w4a4":  # h to NVFP4 (the static scale from the exact h), then e4m3
            enc_h = 448.0 * 6.0 / np.abs(h_ref).max()
            hv, hg = nvfp4_values(h_ref.reshape(-1, I), enc_h)
            h_ref = (hv * hg).reshape(h_ref.shape)
            hv8, _ = nvfp4_values(h_8.reshape(-1, I), enc_h)
            h_8 = (e4m3(hv8 / 8.0) * 8.0 * hg).reshape(h_8.shape)
        else:  # one scale from the fp8 layer's own activation (calibrated)
            enc = 448.0 / np.abs(h_8).max()
            h_8 = e4m3(h_8 * enc) / enc
        out_ref, out_8 = np.zeros((T, H)), np.zeros((T, H))
        for t in range(T):
            for j in range(K_TOP):
                e = ids[t, j]
                out_ref[t] += rw[t, j] * (h_ref[t, j] @ dn_x[e].T)
                out_8[t] += rw[t, j] * bf16(h_8[t, j] @ dn_8[e].T)
        d = out_8 - out_ref
        print(f"{act.__name__} {mode}: fp8 layer against the exact layer: max|D-R|/max|R| {np.abs(d).max() / np.abs(out_ref).max():.3f}"
              f", ||D-R||/||R|| {np.linalg.norm(d) / np.linalg.norm(out_ref):.3f}")


if __name__ == "__main__":
    main()
