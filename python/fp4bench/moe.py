"""The exact reference of a routed MoE step (docs/MOE.md), for checking a
grouped MoE kernel from Python: the same C functions `fp4bench moe` verifies
its backends with (fp4_moe_grouped_ref_w4a4 / _w4a16, fp4_moe_combine).

    y = fp4bench.moe_reference("gate_up", x, gate_up_weights, expert_ids)
    print(fp4bench.compare(my_kernel_y, y, 1e-2, 5e-3))
"""

from __future__ import annotations

from ctypes import (POINTER, CDLL, Structure, byref, c_double, c_float, c_int, c_int32, c_int64,
                    c_uint16)
from typing import Any, Optional, Sequence

import numpy as np

from . import _lib
from ._lib import Err, Matrix
from .format import NVFP4, f32_to_bf16, host_matrix

STEPS = ("gate_up", "down")
_PER_TOKEN, _PER_PAIR = 0, 1  # fp4_moe_a_rows


class _Routing(Structure):  # fp4_moe_routing
    _fields_ = [("tokens", c_int64), ("experts", c_int), ("top_k", c_int),
                ("expert_ids", POINTER(c_int32)), ("weights", POINTER(c_float))]


class _PlanStats(Structure):  # fp4_moe_plan_stats
    _fields_ = [("active_experts", c_int), ("min_tokens", c_int32), ("median_tokens", c_double),
                ("max_tokens", c_int32), ("mean_tokens", c_double)]


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
    n, k_in = weights[0].shape
    for e, w in enumerate(weights):
        if not isinstance(w, NVFP4):
            raise TypeError(f"weights[{e}] is {type(w).__name__}, not NVFP4")
        if w.shape != (n, k_in):
            raise ValueError(f"weights[{e}] is {list(w.shape)}, weights[0] {[n, k_in]}: every "
                             "expert's weight has one shape")
    ids = np.ascontiguousarray(np.asarray(expert_ids), dtype=np.int64)
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise ValueError(f"expert_ids: expected [T, k], got shape {ids.shape}")
    if ids.min() < 0 or ids.max() >= len(weights):
        raise ValueError(f"expert_ids: ids from {ids.min()} to {ids.max()}, but there are "
                         f"{len(weights)} experts")
    tokens, top_k = ids.shape
    ids32 = ids.astype(np.int32)
    if routing_weights is None:
        if step == "down":
            raise ValueError("down needs routing_weights [T, k]")
        rw = np.ones((tokens, top_k), dtype=np.float32)
    else:
        rw = np.ascontiguousarray(np.asarray(routing_weights), dtype=np.float32)
        if rw.shape != ids.shape:
            raise ValueError(f"routing_weights is {list(rw.shape)}, expert_ids {list(ids.shape)}")
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

