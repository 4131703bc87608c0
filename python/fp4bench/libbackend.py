"""A backend of the C library (its fp4_backend_ops table) driven through ctypes:
open, supports, prepare, poison, run, read_output, release, close, with the
stream of the caller (torch's current stream under bench()).

    be = LibraryBackend("fp4-sm90")        # fp4_backend_find
    bench({"fp4-sm90": be.backend()}, ...)  # timed by the Python bench

The backend's prepare() uploads its own operand copies from the host NVFP4
matrices (even copies from A, odd copies from -A), as under `fp4bench run`;
its run() is asynchronous on the stream it is given and capturable into a
CUDA graph, so bench() captures it into torch's graph like any callable.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_float, c_int, c_void_p
from typing import Any, Optional

import numpy as np

from . import _lib
from ._lib import BackendOps, Err, Fp4Error, Problem, Shape, Warnings

MATH = {0: "cpu", 1: "cuda-cores", 2: "bf16", 3: "fp8", 4: "fp4"}


def find(name: str) -> "ctypes._Pointer[BackendOps]":
    """The compiled-in table of that name; KeyError when this build lacks it."""
    ops = _lib.lib().fp4_backend_find(name.encode())
    if not ops:
        L = _lib.lib()
        names = [L.fp4_backend_at(i).contents.name.decode() for i in range(L.fp4_backend_count())]
        raise KeyError(f"no backend {name!r} in {_lib.lib_path()} (compiled in: "
                       f"{', '.join(names)})")
    if ops.contents.api_version != _lib.BACKEND_API_VERSION:
        raise Fp4Error(_lib.ERR_UNSUPPORTED,
                       f"backend {name} has API version {ops.contents.api_version}, this "
                       f"package speaks {_lib.BACKEND_API_VERSION}")
    return ops


def bytes_moved(name: str, m: int, n: int, k: int) -> float:
    """The bytes one call of a library backend moves in its own operand formats
    (its bytes_moved slot, or fp4_gemm_min_bytes): give a Python callable doing
    the same work the same figure, and its GB/s and roofline are computed as
    that backend's rows compute them."""
    o = find(name).contents
    s = Shape(m, n, k)
    if o.bytes_moved:
        return float(o.bytes_moved(byref(s)))
    return float(_lib.lib().fp4_gemm_min_bytes(m, n, k))


class Plan:
    """A prepared problem: `copies` operand and output sets on the backend's side."""

    def __init__(self, owner: "LibraryBackend", plan: c_void_p, keep: list[Any], m: int, n: int):
        self.owner = owner
        self.handle = plan
        self._keep = keep  # the host buffers the problem points at
        self.m, self.n = m, n

    @property
    def ops(self) -> BackendOps:
        return self.owner.ops

    def variant(self) -> str:
        if not self.ops.variant or not self.handle:
            return ""
        v = self.ops.variant(self.handle)
        return v.decode("utf-8", "replace") if v else ""

    def poison(self, copy: int, stream: Optional[int] = None) -> None:
        err = Err()
        st = self.ops.poison(self.handle, copy, c_void_p(stream or None), byref(err))
        _lib.check(st, err, f"{self.owner.name} poison")

    def run(self, copy: int, stream: Optional[int] = None) -> None:
        err = Err()
        st = self.ops.run(self.handle, copy, c_void_p(stream or None), byref(err))
        _lib.check(st, err, f"{self.owner.name} run")

    def read_output(self, copy: int) -> np.ndarray:
        """D of one copy as float32 [m, n] (the backend synchronises)."""
        d = np.empty((self.m, self.n), dtype=np.float32)
        err = Err()
        st = self.ops.read_output(self.handle, copy, d.ctypes.data_as(POINTER(c_float)),
                                  byref(err))
        _lib.check(st, err, f"{self.owner.name} read_output")
        return d

    def release(self) -> None:
        if self.handle:
            self.ops.release(self.handle)
            self.handle = c_void_p()


class LibraryBackend:
    """One compiled-in backend, opened once (close() or garbage collection closes it)."""

    def __init__(self, name: str, *, tuning: Optional[bool] = None):
        """tuning: a vendor baseline may time its candidate algorithms in
        prepare() (fp4_gemm_problem.tuning); None: as bench()'s baseline_tuning
        says (on by default, as in the CLI), False for a direct prepare()."""
        self.name = name
        self._ops_ptr = find(name)
        self.ops: BackendOps = self._ops_ptr.contents
        self.tuning = tuning
        self._inst = c_void_p()
        self._opened = False
        self._open_error: Optional[Fp4Error] = None
        self.warnings = Warnings()

    @property
    def flags(self) -> int:
        return int(self.ops.flags)

    @property
    def is_gpu(self) -> bool:
        return bool(self.flags & _lib.FLAG_GPU)

    @property
    def math(self) -> str:
        return MATH.get(int(self.ops.math), "")

    def open(self) -> None:
        """Open the instance (once); Fp4Error with the backend's reason if it
        cannot run here (status FP4_ERR_UNSUPPORTED for "not on this GPU")."""
        if self._opened:
            return
        if self._open_error is not None:
            raise self._open_error
        err = Err()
        st = self.ops.open(byref(self._inst), byref(err))
        if st != _lib.OK:
            self._open_error = Fp4Error(st, err.text() or f"{self.name}: open failed")
            raise self._open_error
        if self.ops.set_warnings:
            self.ops.set_warnings(self._inst, byref(self.warnings))
        self._opened = True

    def supports(self, m: int, n: int, k: int) -> None:
        """Raise Fp4Error (status FP4_ERR_UNSUPPORTED: the reason) when the
        backend cannot do this shape."""
        self.open()
        if not self.ops.supports:
            return
        err = Err()
        s = Shape(m, n, k)
        st = self.ops.supports(self._inst, byref(s), byref(err))
        if st != _lib.OK:
            raise Fp4Error(st, err.text() or f"{self.name}: shape {m}x{n}x{k} not supported")

    def prepare(self, a: Any, b: Any, copies: int, a_odd: Any = None,
                tuning: Optional[bool] = None) -> Plan:
        """prepare(problem, copies): a, b, a_odd are NVFP4 host matrices (a_odd
        None: every copy computes with a)."""
        if tuning is None:
            tuning = bool(self.tuning)
        if self.flags & _lib.FLAG_FROM_BF16:
            raise Fp4Error(_lib.ERR_UNSUPPORTED,
                           f"{self.name} starts from bf16 activations, which the Python "
                           "bench does not hand over")
        self.supports(a.rows, b.rows, a.cols)
        ma, mb = a.c_matrix(), b.c_matrix()
        keep: list[Any] = [a, b, ma, mb]
        p = Problem()
        p.shape = Shape(a.rows, b.rows, a.cols)
        p.a = ctypes.pointer(ma)
        p.b = ctypes.pointer(mb)
        p.alpha = c_float(float(np.float32(a.global_scale) * np.float32(b.global_scale)))
        if a_odd is not None:
            mo = a_odd.c_matrix()
            keep += [a_odd, mo]
            p.a_odd = ctypes.pointer(mo)
        p.tuning = c_int(1 if tuning else 0)
        keep.append(p)
        plan = c_void_p()
        err = Err()
        st = self.ops.prepare(self._inst, byref(p), copies, byref(plan), byref(err))
        _lib.check(st, err, f"{self.name} prepare")
        return Plan(self, plan, keep, a.rows, b.rows)

    def close(self) -> None:
        if self._opened:
            self.ops.close(self._inst)
            self._opened = False

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def warning_text(self) -> str:
        return self.warnings.text.decode("utf-8", "replace")

    # ---- as a bench() backend -------------------------------------------------------

    def backend(self) -> Any:
        """A bench.Backend running this library backend on bench's operands:
        setup() prepares one plan with the run's copies (A on even copies, -A on
        odd ones), run() launches the copy on torch's current stream, and the
        output is read back through read_output."""
        from .harness import Backend, Unsupported

        def stream_of(device: str) -> Optional[int]:
            if device != "cuda":
                return None
            import torch

            return int(torch.cuda.current_stream().cuda_stream)

        def setup(problem: Any) -> Plan:
            if problem.device == "cpu" and self.is_gpu:
                raise Unsupported(f"{self.name} runs on a GPU; this bench times on the CPU")
            try:
                tuning = problem.tuning if self.tuning is None else self.tuning
                plan = self.prepare(problem.a, problem.b, problem.copies, problem.a_odd, tuning)
            except Fp4Error as e:
                if e.status == _lib.ERR_UNSUPPORTED:
                    raise Unsupported(str(e)) from None
                raise
            if problem.device == "cuda":
                import torch

                torch.cuda.synchronize()
            return plan

        def run(ops: Any) -> None:
            ops.state.run(ops.copy, stream_of(ops.device))

        def poison(ops: Any) -> None:
            ops.state.poison(ops.copy, stream_of(ops.device))

        def read(ops: Any, returned: Any) -> np.ndarray:
            if ops.device == "cuda":
                import torch

                torch.cuda.current_stream().synchronize()
            return ops.state.read_output(ops.copy)

        def teardown(plan: Plan) -> None:
            plan.release()

        return Backend(run=run, setup=setup, poison=poison, read=read, teardown=teardown,
                       tol_max=float(self.ops.tol_max), tol_norm=float(self.ops.tol_norm),
                       math=self.math, needs_dequantized=False, own_copies=True,
                       bytes_moved=lambda m, n, k: bytes_moved(self.name, m, n, k),
                       variant=lambda plan: plan.variant())


__all__ = ["LibraryBackend", "Plan", "find", "bytes_moved"]
