"""A stand-in for torch, just enough of it for bench(device="cuda") to run on a
machine without torch or a GPU: tensors are numpy arrays (bf16 kept as its
float32 values), CUDA events read the host clock, a CUDA graph replays
nothing. It exercises the GPU code path of the harness (operand bundles,
verification, capture, rounds), never its timing. Only the tests use it."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class dtype:
    def __init__(self, name: str, np_dtype: Any):
        self.name, self.np = name, np.dtype(np_dtype)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


uint8 = dtype("uint8", np.uint8)
int16 = dtype("int16", np.int16)
int32 = dtype("int32", np.int32)
int64 = dtype("int64", np.int64)
float16 = dtype("float16", np.float16)
float32 = dtype("float32", np.float32)
float64 = dtype("float64", np.float64)
bfloat16 = dtype("bfloat16", np.float32)      # values, rounded to bf16
float8_e4m3fn = dtype("float8_e4m3fn", np.uint8)  # the bytes
_BY_NP = {np.dtype(np.uint8): uint8, np.dtype(np.int16): int16, np.dtype(np.int32): int32,
          np.dtype(np.int64): int64, np.dtype(np.float16): float16,
          np.dtype(np.float32): float32, np.dtype(np.float64): float64}


def _bf16_round(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    out = r.view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


class device:
    def __init__(self, type: str, index: int = 0):
        self.type, self.index = type, index


class Tensor:
    def __init__(self, a: np.ndarray, dt: dtype, dev: Any = "cpu"):
        self.a, self.dtype, self.device = a, dt, dev

    @property
    def shape(self) -> tuple:
        return self.a.shape

    def to(self, x: Any) -> "Tensor":
        if isinstance(x, dtype):
            if x is bfloat16:
                return Tensor(_bf16_round(self.a.astype(np.float32)), x, self.device)
            return Tensor(self.a.astype(x.np), x, self.device)
        return Tensor(self.a.copy(), self.dtype, x)

    def view(self, x: dtype) -> "Tensor":
        if self.dtype is int16 and x is bfloat16:
            bits = self.a.view(np.uint16).astype(np.uint32) << 16
            return Tensor(bits.view(np.float32), x, self.device)
        if self.dtype is bfloat16 and x is int16:
            u = self.a.astype(np.float32).view(np.uint32) >> 16
            return Tensor(u.astype(np.uint16).view(np.int16), x, self.device)
        if x.np.itemsize == self.dtype.np.itemsize and x is not bfloat16:
            return Tensor(self.a.view(x.np), x, self.device)
        raise TypeError(f"fake torch: cannot view {self.dtype} as {x}")

    def clone(self) -> "Tensor":
        return Tensor(self.a.copy(), self.dtype, self.device)

    def fill_(self, v: float) -> "Tensor":
        self.a.fill(v)
        return self

    def zero_(self) -> "Tensor":
        self.a.fill(0)
        return self

    def detach(self) -> "Tensor":
        return self

    def contiguous(self) -> "Tensor":
        return self

    def cpu(self) -> "Tensor":
        return Tensor(self.a, self.dtype, "cpu")

    def numpy(self) -> np.ndarray:
        return self.a

    def numel(self) -> int:
        return int(self.a.size)

    def element_size(self) -> int:
        return 2 if self.dtype is bfloat16 else int(self.a.itemsize)

    def max(self) -> "Tensor":
        return Tensor(np.array(self.a.max()), self.dtype, self.device)


def from_numpy(a: np.ndarray) -> Tensor:
    return Tensor(a, _BY_NP[a.dtype])


def ones(n: int, dtype: dtype = float32, device: Any = None) -> Tensor:
    return Tensor(np.ones(n, dtype=dtype.np), dtype, device)


def full(shape: Any, v: float, dtype: dtype = float32, device: Any = None) -> Tensor:
    return Tensor(np.full(shape, v, dtype=dtype.np), dtype, device)


def empty(n: int, dtype: dtype = float32, device: Any = None) -> Tensor:
    return Tensor(np.empty(n, dtype=dtype.np), dtype, device)


def tensor(v: Any, dtype: dtype = float32, device: Any = None) -> Tensor:
    return Tensor(np.array(v, dtype=dtype.np), dtype, device)


class _Version:
    cuda = "12.8"


version = _Version()


class _Props:
    name = "NVIDIA H200"
    major, minor = 9, 0
    multi_processor_count = 132
    total_memory = 150 * 10**9
    L2_cache_size = 1 << 20  # small: the tests' shapes rotate through a few copies


class _Cuda:
    class Event:
        def __init__(self, enable_timing: bool = False):
            self.t = 0.0

        def record(self, stream: Any = None) -> None:
            self.t = time.perf_counter()

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: "_Cuda.Event") -> float:
            return (end.t - self.t) * 1e3

    class Stream:
        cuda_stream = 0

        def wait_stream(self, other: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

    class CUDAGraph:
        """Replays the calls that captured(fn) recorded while it was capturing,
        writing into the tensors the capture returned, as a real graph does."""

        def __init__(self) -> None:
            self.calls: list = []

        def replay(self) -> None:
            for fn, ops, ret in self.calls:
                new = fn(ops)
                if isinstance(ret, Tensor) and isinstance(new, Tensor) and new is not ret:
                    ret.a[...] = new.a

        def reset(self) -> None:
            self.calls = []

    class _Ctx:
        def __init__(self, *a: Any, **k: Any):
            pass

        def __enter__(self) -> None:
            return None

        def __exit__(self, *a: Any) -> bool:
            return False

    class graph:
        def __init__(self, g: "_Cuda.CUDAGraph", **k: Any):
            self.g = g

        def __enter__(self) -> None:
            _Cuda.capturing = self.g

        def __exit__(self, *a: Any) -> bool:
            _Cuda.capturing = None
            return False

    capturing: Any = None
    stream = _Ctx

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def get_device_properties(dev: Any) -> _Props:
        return _Props()

    @staticmethod
    def current_stream() -> "_Cuda.Stream":
        return _Cuda.Stream()

    @staticmethod
    def synchronize() -> None:
        pass

    @staticmethod
    def _sleep(cycles: int) -> None:
        pass

    @staticmethod
    def mem_get_info(dev: Any = None) -> tuple[int, int]:
        return (100 * 10**9, 150 * 10**9)

    @staticmethod
    def empty_cache() -> None:
        pass


cuda = _Cuda()


def captured(fn: Any) -> Any:
    """fn, recorded into the graph being captured (the stand-in's replay runs it)."""

    def run(ops: Any) -> Any:
        ret = fn(ops)
        if _Cuda.capturing is not None:
            _Cuda.capturing.calls.append((fn, ops, ret))
        return ret

    return run
