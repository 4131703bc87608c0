"""The exact reference of a routed MoE step or layer (docs/MOE.md), for
checking a grouped MoE kernel from Python: the same C functions `fp4bench moe`
verifies its backends with (fp4_moe_grouped_ref_w4a4 / _w4a16,
fp4_moe_combine, fp4_moe_layer_ref).

    y = fp4bench.moe_reference("gate_up", x, gate_up_weights, expert_ids)
    print(fp4bench.compare(my_kernel_y, y, 1e-2, 5e-3))
"""

from __future__ import annotations

from ctypes import (POINTER, CDLL, Structure, byref, c_double, c_float, c_int, c_int32, c_int64,
                    c_uint16)
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from . import _lib
from ._lib import Err, Matrix
from .format import NVFP4, f32_to_bf16, host_matrix

STEPS = ("gate_up", "down")
_PER_TOKEN, _PER_PAIR = 0, 1  # fp4_moe_a_rows
ACTS = ("silu", "swiglu-oai")   # fp4_moe_act, in its order
MODES = ("w4a4", "w4a16")       # fp4_moe_mode, in its order


class _Routing(Structure):  # fp4_moe_routing
    _fields_ = [("tokens", c_int64), ("experts", c_int), ("top_k", c_int),
                ("expert_ids", POINTER(c_int32)), ("weights", POINTER(c_float))]


class _PlanStats(Structure):  # fp4_moe_plan_stats
    _fields_ = [("active_experts", c_int), ("min_tokens", c_int32), ("median_tokens", c_double),
                ("max_tokens", c_int32), ("mean_tokens", c_double)]


class _Dims(Structure):  # fp4_moe_dims
    _fields_ = [("hidden", c_int64), ("inter", c_int64), ("experts", c_int), ("top_k", c_int),
                ("act", c_int)]


class _Weights(Structure):  # fp4_moe_weights
    _fields_ = [("experts", c_int), ("gate_up", POINTER(Matrix)), ("down", POINTER(Matrix))]


class _LayerOpts(Structure):  # fp4_moe_layer_opts
    _fields_ = [("mode", c_int), ("x_encode_scale", c_float), ("h_encode_scale", c_float),
                ("threads", c_int)]


class _LayerOut(Structure):  # fp4_moe_layer_out
    _fields_ = [("out", POINTER(c_float)), ("y", POINTER(c_float)), ("h", POINTER(c_float)),
                ("d", POINTER(c_float)), ("x_encode_scale_used", c_float),
                ("h_encode_scale_used", c_float)]


class _Plan(Structure):  # fp4_moe_plan
    _fields_ = [("tokens", c_int64), ("experts", c_int), ("top_k", c_int), ("pairs", c_int64),
                ("expert_offsets", POINTER(c_int32)), ("expert_counts", POINTER(c_int32)),
                ("pair_index", POINTER(c_int32)), ("pair_row", POINTER(c_int32)),
                ("stats", _PlanStats)]


_bound: Optional[CDLL] = None


def _bind() -> CDLL:
    """The library with the prototypes of the MoE functions set (once)."""
    global _bound
    L = _lib.lib()
    if _bound is not L:
        P = POINTER
        sigs = {
            "fp4_moe_plan_build": (c_int, [P(_Routing), P(_Plan), P(Err)]),
            "fp4_moe_plan_free": (None, [P(_Plan)]),
            "fp4_moe_grouped_ref_w4a4": (c_int, [P(Matrix), c_int, P(Matrix), P(_Plan), P(c_float),
                                                 c_int, P(Err)]),
            "fp4_moe_grouped_ref_w4a16": (c_int, [P(c_uint16), c_int64, c_int64, c_int, P(Matrix),
                                                  P(_Plan), P(c_float), c_int, P(Err)]),
            "fp4_moe_combine": (c_int, [P(c_float), c_int64, P(_Routing), P(c_float), P(Err)]),
            "fp4_moe_layer_ref": (c_int, [P(_Dims), P(_Weights), P(c_uint16), P(_Routing),
                                          P(_LayerOpts), P(_LayerOut), P(Err)]),
        }
        for name, (res, args) in sigs.items():
            try:
                fn = getattr(L, name)
            except AttributeError:
                raise _lib.LibraryNotFound(f"{L._name} is not a compatible libfp4: it lacks {name}") from None
            fn.restype = res
            fn.argtypes = args
        _bound = L
    return L


def _routing_arrays(expert_ids: Any, routing_weights: Any,
                    experts: int) -> tuple[np.ndarray, np.ndarray]:
    """expert_ids as int32 [T, k] with every id in [0, experts), and the
    routing weights as float32 [T, k] (None: ones). The library checks the rest
    (an expert twice in a token, weights not finite)."""
    ids = np.ascontiguousarray(np.asarray(expert_ids), dtype=np.int64)
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise ValueError(f"expert_ids: expected [T, k], got shape {ids.shape}")
    if ids.min() < 0 or ids.max() >= experts:
        raise ValueError(f"expert_ids: ids from {ids.min()} to {ids.max()}, but there are "
                         f"{experts} experts")
    if routing_weights is None:
        return ids.astype(np.int32), np.ones(ids.shape, dtype=np.float32)
    rw = np.ascontiguousarray(np.asarray(routing_weights), dtype=np.float32)
    if rw.shape != ids.shape:
        raise ValueError(f"routing_weights is {list(rw.shape)}, expert_ids {list(ids.shape)}")
    return ids.astype(np.int32), rw


def moe_reference(step: str, x: Any, weights: Sequence[NVFP4], expert_ids: Any,
                  routing_weights: Any = None, *, threads: int = 0) -> np.ndarray:
    """The exact output of one step of a routed MoE layer, float32.

    step:       "gate_up": x is the tokens' input [T, K] and the result y [T*k, N]
                in pair order (row t*k + j: token t through its slot j's expert);
                "down": x is h [T*k, K] in pair order and the result out [T, N],
                each token's k products combined with routing_weights.
    x:          NVFP4 (W4A4: the product uses its values and global scale) or
                bf16 (W4A16: uint16 bits, ml_dtypes, a torch bf16 tensor; float
                arrays are rounded to bf16 first, to nearest even).
    weights:    the step's weight of every expert, E NVFP4 matrices [N, K]
                (out_features x in_features), each with its own global scale.
    expert_ids: int [T, k], distinct experts a token, each in [0, E).
    routing_weights: float [T, k]; needed for down (gate_up ignores it).
    threads:    <= 0: one per online core.

    A pair's product is x.global_scale * W_e.global_scale (a float product; 1
    for x in bf16) times the exact dot product, rounded once to float32; down
    sums the k weighted products in double and rounds once more."""
    if step not in STEPS:
        raise ValueError(f"step {step!r}: want one of {', '.join(STEPS)}")
    if len(weights) < 1:
        raise ValueError("weights: at least one expert")
    if not isinstance(weights[0], NVFP4):
        raise TypeError(f"weights[0] is {type(weights[0]).__name__}, not NVFP4")
    n, k_in = weights[0].shape
    _check_experts("weights", weights, (n, k_in))
    if routing_weights is None and step == "down":
        raise ValueError("down needs routing_weights [T, k]")
    ids32, rw = _routing_arrays(expert_ids, routing_weights, len(weights))
    tokens, top_k = ids32.shape
    rows = tokens if step == "gate_up" else tokens * top_k
    a_rows = _PER_TOKEN if step == "gate_up" else _PER_PAIR
    if isinstance(x, NVFP4):
        x_shape = x.shape
    else:
        kind, arr = host_matrix(x, "x")
        x_bits = np.ascontiguousarray(arr if kind == "bf16" else f32_to_bf16(arr))
        x_shape = x_bits.shape
    if x_shape != (rows, k_in):
        raise ValueError(f"x is {list(x_shape)}; {step} with T = {tokens}, k = {top_k} and "
                         f"weights [{n}, {k_in}] wants [{rows}, {k_in}]")

    L = _bind()
    err = Err()
    routing = _Routing(tokens, len(weights), top_k, ids32.ctypes.data_as(POINTER(c_int32)),
                       rw.ctypes.data_as(POINTER(c_float)))
    plan = _Plan()
    _lib.check(L.fp4_moe_plan_build(byref(routing), byref(plan), byref(err)), err, "MoE routing")
    try:
        b = (Matrix * len(weights))(*[w.c_matrix() for w in weights])
        d = np.empty((tokens * top_k, n), dtype=np.float32)
        dp = d.ctypes.data_as(POINTER(c_float))
        if isinstance(x, NVFP4):
            ma = x.c_matrix()
            st = L.fp4_moe_grouped_ref_w4a4(byref(ma), a_rows, b, byref(plan), dp, c_int(threads),
                                            byref(err))
        else:
            st = L.fp4_moe_grouped_ref_w4a16(x_bits.ctypes.data_as(POINTER(c_uint16)), rows, k_in,
                                             a_rows, b, byref(plan), dp, c_int(threads), byref(err))
        _lib.check(st, err, "MoE reference")
        if step == "gate_up":
            return d
        out = np.empty((tokens, n), dtype=np.float32)
        _lib.check(L.fp4_moe_combine(dp, n, byref(routing), out.ctypes.data_as(POINTER(c_float)),
                                     byref(err)), err, "MoE combine")
        return out
    finally:
        L.fp4_moe_plan_free(byref(plan))


@dataclass(frozen=True)
class LayerResult:
    """moe_layer_reference's result, float32, pair order (row t*k + j):
    out [T, H] the layer's output; y [T*k, 2I] gate_up's; h [T*k, I] the
    activation's, before its W4A4 quantization or bf16 rounding; d [T*k, H]
    down's, before the routing weights; the W4A4 encode scales used (0 in W4A16)."""

    out: np.ndarray
    y: np.ndarray
    h: np.ndarray
    d: np.ndarray
    x_encode_scale: float
    h_encode_scale: float


def _check_experts(name: str, ws: Sequence[NVFP4], shape: tuple[int, int]) -> None:
    for e, w in enumerate(ws):
        if not isinstance(w, NVFP4):
            raise TypeError(f"{name}[{e}] is {type(w).__name__}, not NVFP4")
        if w.shape != shape:
            raise ValueError(f"{name}[{e}] is {list(w.shape)}, want {list(shape)}")


def moe_layer_reference(x: Any, gate_up: Sequence[NVFP4], down: Sequence[NVFP4], expert_ids: Any,
                        routing_weights: Any, *, mode: str = "w4a16", act: str = "silu",
                        x_encode_scale: float = 0.0, h_encode_scale: float = 0.0,
                        threads: int = 0) -> LayerResult:
    """The exact routed MoE layer (fp4_moe_layer_ref): gate_up, the activation,
    down, the weighted combine, with the rounding points of docs/MOE.md.

    x:         bf16 [T, H] (uint16 bits, ml_dtypes, torch bf16; float arrays are
               rounded to bf16 first).
    gate_up:   E NVFP4 [2I, H], rows 0..I-1 the gate and I..2I-1 the up
               projection; down: E NVFP4 [H, I].
    expert_ids, routing_weights: [T, k].
    mode:      "w4a16" (x and h in bf16) or "w4a4" (x and h quantized to NVFP4 with
               one encode scale each: given, else 2688 / amax over the tensor;
               a GPU pipeline matches a static scale, so pass the ones a first
               call returns).
    act:       "silu" (silu(gate) * up) or "swiglu-oai" (gpt-oss's clamped SwiGLU)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: want one of {', '.join(MODES)}")
    if act not in ACTS:
        raise ValueError(f"act {act!r}: want one of {', '.join(ACTS)}")
    if len(gate_up) < 1 or len(gate_up) != len(down):
        raise ValueError(f"{len(gate_up)} gate_up and {len(down)} down weights: want one of each "
                         "an expert")
    two_i, hidden = gate_up[0].shape
    inter = two_i // 2
    if two_i % 2:
        raise ValueError(f"gate_up is [{two_i}, {hidden}]: 2I rows, an even number")
    _check_experts("gate_up", gate_up, (two_i, hidden))
    _check_experts("down", down, (hidden, inter))
    kind, arr = host_matrix(x, "x")
    x_bits = np.ascontiguousarray(arr if kind == "bf16" else f32_to_bf16(arr))
    ids32, rw = _routing_arrays(expert_ids, routing_weights, len(gate_up))
    tokens, top_k = ids32.shape
    if x_bits.shape != (tokens, hidden):
        raise ValueError(f"x is {list(x_bits.shape)}; T = {tokens} tokens of H = {hidden} want "
                         f"[{tokens}, {hidden}]")

    L = _bind()
    err = Err()
    E = len(gate_up)
    gu = (Matrix * E)(*[w.c_matrix() for w in gate_up])
    dn = (Matrix * E)(*[w.c_matrix() for w in down])
    dims = _Dims(hidden, inter, E, top_k, ACTS.index(act))
    weights = _Weights(E, gu, dn)
    routing = _Routing(tokens, E, top_k, ids32.ctypes.data_as(POINTER(c_int32)),
                       rw.ctypes.data_as(POINTER(c_float)))
    opts = _LayerOpts(MODES.index(mode), c_float(x_encode_scale), c_float(h_encode_scale),
                      c_int(threads))
    pairs = tokens * top_k
    out = np.empty((tokens, hidden), dtype=np.float32)
    y = np.empty((pairs, two_i), dtype=np.float32)
    h = np.empty((pairs, inter), dtype=np.float32)
    d = np.empty((pairs, hidden), dtype=np.float32)
    fp = POINTER(c_float)
    io = _LayerOut(out.ctypes.data_as(fp), y.ctypes.data_as(fp), h.ctypes.data_as(fp),
                   d.ctypes.data_as(fp), 0.0, 0.0)
    _lib.check(L.fp4_moe_layer_ref(byref(dims), byref(weights), x_bits.ctypes.data_as(POINTER(c_uint16)),
                                   byref(routing), byref(opts), byref(io), byref(err)), err,
               "MoE layer reference")
    return LayerResult(out, y, h, d, float(io.x_encode_scale_used), float(io.h_encode_scale_used))
