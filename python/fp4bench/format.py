"""NVFP4 through the C library: quantize, dequantize, the swizzled scales, the
exact reference GEMM and the verdict of `fp4bench check`, bit for bit the CLI's.

Shapes: an operand is [rows, K] (A is [M, K], B is [N, K]); codes are
[rows, K/2] bytes (even K index in the low nibble), scales [rows, K/16] UE4M3
bytes row-major, the swizzled scales [roundup(rows, 128), roundup(K/16, 4)]
bytes in the 128x4 layout (docs/FORMAT.md).
"""

from __future__ import annotations

import functools
import warnings
from ctypes import POINTER, byref, c_double, c_float, c_int, c_uint8, c_uint16
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import _lib
from ._lib import Err, Fp4Error, Matrix

# The tolerances of a bf16-output GEMM with fp32 accumulation: those of
# cublas-bf16 and fp4-sm90, and the defaults of `fp4bench check`. Used when the
# library in use has no cublas-bf16 compiled in (a CPU-only build).
BF16_TOL_MAX = 1e-2
BF16_TOL_NORM = 5e-3
DEFAULT_TOL_BACKEND = "cublas-bf16"


# ---- bf16 in numpy (uint16 bit patterns) -------------------------------------------------


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32, exactly."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even, NaN kept NaN
    (the rule of fp4_bf16_from_float)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    if nan.any():
        r[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return r


# ---- inputs: numpy arrays or torch tensors ------------------------------------------------


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def host_matrix(x: Any, what: str = "x") -> tuple[str, np.ndarray]:
    """A 2-D input as ("f32", float32 array) or ("bf16", uint16 bit patterns),
    C-contiguous on the host. Accepts numpy float32/float16/float64, uint16 as
    bf16 bits, ml_dtypes bfloat16 or a 2-byte void dtype (a bf16 .npy), and torch
    tensors of those dtypes (copied to the host). float16 converts exactly;
    float64 rounds once to float32."""
    if _is_torch(x):
        import torch  # the caller has torch: x is one of its tensors

        t = x.detach()
        if t.dtype == torch.bfloat16:
            arr = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
            return _check2d("bf16", arr, what)
        if t.dtype in (torch.float16, torch.float32, torch.float64):
            return _check2d("f32", t.to(torch.float32).cpu().contiguous().numpy(), what)
        raise TypeError(f"{what}: torch dtype {t.dtype} is not a float type fp4bench reads "
                        "(float32, bfloat16, float16, float64)")
    arr = np.asarray(x)
    if arr.dtype == np.uint16 or arr.dtype.name == "bfloat16" or \
            (arr.dtype.kind == "V" and arr.dtype.itemsize == 2):  # a bf16 .npy, as io.h reads it
        return _check2d("bf16", np.ascontiguousarray(arr).view(np.uint16), what)
    if arr.dtype in (np.float32, np.float16, np.float64):
        return _check2d("f32", np.ascontiguousarray(arr, dtype=np.float32), what)
    raise TypeError(f"{what}: dtype {arr.dtype} is not one fp4bench reads "
                    "(float32, float16, float64, uint16 as bf16 bits, bfloat16)")


def _check2d(kind: str, arr: np.ndarray, what: str) -> tuple[str, np.ndarray]:
    if arr.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D [rows, K] matrix, got shape {arr.shape}")
    return kind, np.ascontiguousarray(arr)


def output_f32(d: Any, what: str = "d") -> np.ndarray:
    """A GEMM output (numpy or torch; float32/float16/bf16) as a float32 host array."""
    kind, arr = host_matrix(d, what)
    return bf16_to_f32(arr) if kind == "bf16" else arr


# ---- the NVFP4 matrix ----------------------------------------------------------------------


def _swizzled_dims(rows: int, cols: int) -> tuple[int, int]:
    L = _lib.lib()
    return int(L.fp4_swizzled_rows(rows)), int(L.fp4_swizzled_kblocks(cols))


def _u8p(a: np.ndarray) -> Any:
    return a.ctypes.data_as(POINTER(c_uint8))


@dataclass(frozen=True, eq=False)
class NVFP4:
    """An NVFP4 matrix [rows, cols] (cols = K, a multiple of 16).

    codes:           uint8 [rows, cols/2], two E2M1 codes a byte, even K index low
    scales:          uint8 [rows, cols/16], UE4M3 block scales, plain row-major
    global_scale:    the fp32 decode scale (ModelOpt's weight_scale_2)
    scales_swizzled: uint8 [roundup(rows,128), roundup(cols/16,4)], the 128x4
                     layout GEMM kernels read (fp4_swizzle_scales), padding zero
    value(r, c) = e2m1(code) * e4m3(scale) * global_scale.
    """

    codes: np.ndarray
    scales: np.ndarray
    global_scale: float
    scales_swizzled: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        codes = np.ascontiguousarray(self.codes, dtype=np.uint8)
        scales = np.ascontiguousarray(self.scales, dtype=np.uint8)
        if codes.ndim != 2 or scales.ndim != 2:
            raise ValueError("codes and scales must be 2-D")
        rows, cols = codes.shape[0], codes.shape[1] * 2
        if scales.shape != (rows, cols // 16) or cols % 16:
            raise ValueError(f"codes {codes.shape} and scales {scales.shape} do not make an "
                             "NVFP4 matrix (scales must be [rows, K/16], codes [rows, K/2])")
        object.__setattr__(self, "codes", codes)
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "global_scale", float(np.float32(self.global_scale)))
        if self.scales_swizzled is None:
            object.__setattr__(self, "scales_swizzled", swizzle_scales(scales, cols))

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def cols(self) -> int:
        return int(self.codes.shape[1] * 2)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def c_matrix(self) -> Matrix:
        """The fp4_matrix view of this object (valid while the object lives)."""
        return Matrix(self.rows, self.cols, _u8p(self.codes), _u8p(self.scales),
                      c_float(self.global_scale))

    def negated(self) -> "NVFP4":
        """-self: every code's sign bit flipped, scales and global scale kept
        (the A of the odd copies, whose exact product is -R)."""
        return NVFP4(self.codes ^ np.uint8(0x88), self.scales, self.global_scale,
                     self.scales_swizzled)

    def dequantize(self, with_global_scale: bool = True) -> np.ndarray:
        return dequantize(self, with_global_scale=with_global_scale)

    def save(self, path: str, input_scale: Optional[float] = None) -> None:
        """Write a ModelOpt-style .safetensors (fp4_nvfp4_save): weight U8 [rows, K/2],
        weight_scale F8_E4M3 [rows, K/16], weight_scale_2 F32, input_scale if given."""
        err = Err()
        m = self.c_matrix()
        st = _lib.lib().fp4_nvfp4_save(str(path).encode(), byref(m),
                                       c_float(-1.0 if input_scale is None else input_scale),
                                       byref(err))
        _lib.check(st, err, "save")

    @classmethod
    def load(cls, path: str) -> "NVFP4":
        """Read a ModelOpt-style .safetensors (fp4_nvfp4_load)."""
        return _from_library(lambda m, err: _lib.lib().fp4_nvfp4_load(str(path).encode(),
                                                                       byref(m), byref(err)),
                             f"load {path}")

    def __repr__(self) -> str:
        return f"NVFP4(shape={self.shape}, global_scale={self.global_scale!r})"


def _from_library(fill: Any, what: str) -> NVFP4:
    """Call fill(matrix, err) that allocates an fp4_matrix, copy it out, free it."""
    m = Matrix()
    err = Err()
    st = fill(m, err)
    _lib.check(st, err, what)
    try:
        rows, cols = int(m.rows), int(m.cols)
        codes = np.ctypeslib.as_array(m.codes, shape=(rows * (cols // 2),)).copy()
        scales = np.ctypeslib.as_array(m.scales, shape=(rows * (cols // 16),)).copy()
        gs = float(m.global_scale)
    finally:
        _lib.lib().fp4_matrix_free(byref(m))
    return NVFP4(codes.reshape(rows, cols // 2), scales.reshape(rows, cols // 16), gs)


def swizzle_scales(scales: np.ndarray, cols: int) -> np.ndarray:
    """Plain [rows, cols/16] scale bytes -> the 128x4 swizzled buffer, shaped
    [roundup(rows,128), roundup(cols/16,4)] (fp4_swizzle_scales)."""
    plain = np.ascontiguousarray(scales, dtype=np.uint8)
    if plain.ndim != 2 or cols % 16 != 0 or plain.shape[1] != cols // 16:
        raise ValueError(f"scales for {cols} columns are [rows, {cols // 16}] bytes "
                         f"(cols a multiple of 16), not {list(plain.shape)}")
    rows = plain.shape[0]
    rp, kp = _swizzled_dims(rows, cols)
    out = np.zeros((rp, kp), dtype=np.uint8)
    err = Err()
    st = _lib.lib().fp4_swizzle_scales(_u8p(plain), rows, cols, _u8p(out), byref(err))
    _lib.check(st, err, "swizzle")
    return out


def unswizzle_scales(swizzled: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The inverse of swizzle_scales: plain [rows, cols/16] bytes."""
    sw = np.ascontiguousarray(swizzled, dtype=np.uint8).reshape(-1)
    rp, kp = _swizzled_dims(rows, cols)
    if sw.size != rp * kp:
        raise ValueError(f"a swizzled buffer for [{rows}, {cols}] has {rp * kp} bytes, "
                         f"not {sw.size}")
    out = np.zeros((rows, cols // 16), dtype=np.uint8)
    err = Err()
    st = _lib.lib().fp4_unswizzle_scales(_u8p(sw), rows, cols, _u8p(out), byref(err))
    _lib.check(st, err, "unswizzle")
    return out


def swizzle_index(rows: int, cols: int) -> np.ndarray:
    """int64 [rows, cols/16]: the byte offset of scale (r, kb) in the flat swizzled
    buffer (fp4_swizzle_offset's formula, vectorised):
    (r/128)*(Kbp/4)*512 + (kb/4)*512 + (r%32)*16 + ((r/32)%4)*4 + kb%4."""
    _, kbp = _swizzled_dims(rows, cols)
    r = np.arange(rows, dtype=np.int64)[:, None]
    kb = np.arange(cols // 16, dtype=np.int64)[None, :]
    return ((r // 128) * (kbp // 4) * 512 + (kb // 4) * 512 + (r % 32) * 16 +
            ((r // 32) % 4) * 4 + kb % 4)


@functools.lru_cache(maxsize=None)
def _table(name: str, n: int) -> np.ndarray:
    fn = getattr(_lib.lib(), name)
    t = np.array([fn(i) for i in range(n)], dtype=np.float32)
    t.setflags(write=False)
    return t


def e2m1_table() -> np.ndarray:
    """float32 [16]: the value of every E2M1 code (fp4_e2m1_decode), read-only."""
    return _table("fp4_e2m1_decode", 16)


def e4m3_table() -> np.ndarray:
    """float32 [256]: the value of every E4M3 byte (fp4_e4m3_decode; 0x7F and 0xFF
    NaN), read-only."""
    return _table("fp4_e4m3_decode", 256)


# ---- quantize / dequantize -------------------------------------------------------------------


def quantize(x: Any, global_scale: Optional[float] = None, *,
             encode_scale: Optional[float] = None) -> NVFP4:
    """Quantize a [rows, K] matrix to NVFP4 the way inference engines do
    (fp4_quantize_f32 / fp4_quantize_bf16): bit for bit `fp4bench quantize`.

    x: numpy float32 / float16 / float64, uint16 (bf16 bit patterns), ml_dtypes
       bfloat16, or a torch tensor of those (bf16 goes to fp4_quantize_bf16).
    global_scale: the decode scale to quantize for (weight_scale_2); the
       library uses the fp32 encode scale 1/global_scale. None: 2688/amax(|x|).
    encode_scale: the encode scale itself, as `fp4bench quantize --encode-scale`
       takes it (exclusive with global_scale).
    The result's global_scale is 1/encode_scale in fp32, as the library sets it.
    A given scale that zeroes or clips every nonzero block is a ValueError (the
    tensor would be lost), one that zeroes or clips some blocks a warning, as
    `fp4bench quantize` does.
    """
    if global_scale is not None and encode_scale is not None:
        raise ValueError("give global_scale or encode_scale, not both")
    enc = 0.0
    if global_scale is not None:
        if not (global_scale > 0 and np.isfinite(global_scale)):
            raise ValueError(f"global_scale must be positive and finite, not {global_scale}")
        enc = float(np.float32(1.0) / np.float32(global_scale))
    elif encode_scale is not None:
        if not (encode_scale > 0 and np.isfinite(encode_scale)):
            raise ValueError(f"encode_scale must be positive and finite, not {encode_scale}")
        enc = float(np.float32(encode_scale))
    kind, arr = host_matrix(x)
    rows, cols = arr.shape
    L = _lib.lib()
    if kind == "bf16":
        ptr = arr.ctypes.data_as(POINTER(c_uint16))
        fill = lambda m, err: L.fp4_quantize_bf16(ptr, rows, cols, c_float(enc), byref(m),
                                                  byref(err))
    else:
        ptr = arr.ctypes.data_as(POINTER(c_float))
        fill = lambda m, err: L.fp4_quantize_f32(ptr, rows, cols, c_float(enc), byref(m),
                                                 byref(err))
    q = _from_library(fill, "quantize")
    if enc > 0:
        _check_encode_scale(bf16_to_f32(arr) if kind == "bf16" else arr, q, enc)
    return q


def _check_encode_scale(x: np.ndarray, q: NVFP4, enc: float) -> None:
    """The CLI's check_encode_scale (src/cli/cmd_tensor.c) on a quantized tensor."""
    bm = np.abs(x.astype(np.float32)).reshape(x.shape[0], -1, 16).max(axis=2)
    nonzero = bm > 0
    zeroed = nonzero & (e4m3_table()[q.scales] == 0)
    clipped = nonzero & ~zeroed & (np.float64(enc) * (bm / np.float32(6.0)) > 448.0)
    amax = float(bm.max()) if bm.size else 0.0
    fits = 2688.0 / amax if amax > 0 else 1.0
    n, z, c = int(nonzero.sum()), int(zeroed.sum()), int(clipped.sum())
    if n and z == n:
        raise ValueError(f"encode_scale {enc:g}: every block's scale rounds to 0 in E4M3, so the "
                         f"tensor would be all zeros; its largest |x| is {amax:g}, which scale "
                         f"{fits:g} fits")
    if n and c == n:
        raise ValueError(f"encode_scale {enc:g}: every block's scale is clipped at E4M3's "
                         f"largest, so every value would be clipped; its largest |x| is {amax:g}, "
                         f"which scale {fits:g} fits")
    if c:
        warnings.warn(f"encode_scale {enc:g} clips {c} of {n} blocks at E4M3's largest scale "
                      f"({fits:g} fits the largest |x|, {amax:g})", stacklevel=3)
    if z:
        warnings.warn(f"encode_scale {enc:g} rounds {z} of {n} blocks to 0 ({fits:g} fits the "
                      f"largest |x|, {amax:g})", stacklevel=3)


def dequantize(q: NVFP4, with_global_scale: bool = True) -> np.ndarray:
    """float32 [rows, K]: e2m1 * scale * global_scale (fp4_dequantize_f32).
    with_global_scale=False leaves the global scale out: e2m1 * scale, exact in
    bf16 and fp16 (what bf16 GEMM backends multiply, with alpha applied after)."""
    m = q.c_matrix()
    if not with_global_scale:
        m.global_scale = 1.0
    out = np.empty((q.rows, q.cols), dtype=np.float32)
    err = Err()
    st = _lib.lib().fp4_dequantize_f32(byref(m), out.ctypes.data_as(POINTER(c_float)), byref(err))
    _lib.check(st, err, "dequantize")
    return out


_NUMPY_KINDS = ("gaussian", "codes", "outliers")


def data_kind(data: str) -> int:
    """The library's fp4_data_kind of a --data name (fp4_data_kind_parse);
    ValueError for a name it does not know."""
    v = c_int(-1)
    if _lib.lib().fp4_data_kind_parse(data.encode(), byref(v)) != 0:
        raise ValueError(f"unknown data kind {data!r} (the library knows "
                         f"{', '.join(data_kinds())})")
    return int(v.value)


def data_kinds() -> list[str]:
    """Every --data name the library knows."""
    L = _lib.lib()
    out = []
    for i in range(16):
        name = L.fp4_data_kind_name(i)
        if not name or name == b"unknown":
            break
        out.append(name.decode())
    return out


def make_operand(data: str, rows: int, cols: int, seed: int) -> NVFP4:
    """A reproducible random operand of the engine's kinds (gaussian, codes,
    outliers, and any the library adds): the bytes `fp4bench run` makes from
    the same seed when the library exports its generator (fp4_make_operand),
    else numpy data of the same distribution quantized by the library."""
    kind = data_kind(data)
    seed &= (1 << 64) - 1
    if _lib.has_symbol("fp4_make_operand"):
        L = _lib.lib()
        return _from_library(lambda m, err: L.fp4_make_operand(kind, rows, cols, seed,
                                                               byref(m), byref(err)),
                             f"make a {data} operand")
    if data not in _NUMPY_KINDS:
        raise ValueError(f"data {data!r} needs the library's generator (fp4_make_operand)")
    rng = np.random.default_rng(seed)
    if data == "codes":
        codes = rng.integers(0, 256, size=(rows, cols // 2), dtype=np.uint8)
        scales = rng.integers(1, 0x7F, size=(rows, cols // 16), dtype=np.uint8)
        return NVFP4(codes, scales, float(np.float32(1.0) / np.float32(2688.0)))
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    if data == "outliers":
        chi = (rng.standard_normal((3, rows, cols), dtype=np.float32) ** 2).sum(0) / 3
        x = x / np.sqrt(np.maximum(chi, 1e-6))
        x[:, 7::32] *= 30.0
    return quantize(f32_to_bf16(x))


# ---- the exact reference and the verdict ---------------------------------------------------


def _alpha(a: NVFP4, b: NVFP4) -> float:
    return float(np.float32(a.global_scale) * np.float32(b.global_scale))


def reference_gemm(a: NVFP4, b: NVFP4, alpha: Optional[float] = None,
                   threads: int = 0) -> np.ndarray:
    """The exact D [M, N] = alpha * A B^T in float32 (fp4_gemm_reference), alpha
    = a.global_scale * b.global_scale in fp32 unless given; threads <= 0: one
    per online core. The same bytes as `fp4bench gemm` with the cpu-ref backend."""
    if a.cols != b.cols:
        raise ValueError(f"A has K={a.cols} but B has K={b.cols}")
    al = _alpha(a, b) if alpha is None else float(np.float32(alpha))
    ma, mb = a.c_matrix(), b.c_matrix()
    d = np.empty((a.rows, b.rows), dtype=np.float32)
    err = Err()
    st = _lib.lib().fp4_gemm_reference(byref(ma), byref(mb), c_float(al),
                                       d.ctypes.data_as(POINTER(c_float)), c_int(threads),
                                       byref(err))
    _lib.check(st, err, "reference GEMM")
    return d


def naive_element(a: NVFP4, b: NVFP4, row: int, col: int, alpha: Optional[float] = None) -> float:
    """One element by the library's independent double loop (for spot checks)."""
    al = _alpha(a, b) if alpha is None else float(np.float32(alpha))
    ma, mb = a.c_matrix(), b.c_matrix()
    return float(_lib.lib().fp4_gemm_naive_element(byref(ma), byref(mb), c_float(al), row, col))


@dataclass(frozen=True)
class Verdict:
    """fp4_verdict: the comparison of a result D with the exact reference R."""

    passed: bool
    err_max: float      # max|D-R| / max|R|
    err_norm: float     # ||D-R||_2 / ||R||_2
    nonfinite: int      # NaN or Inf in D
    zeros_d: int
    zeros_r: int
    all_zero: bool      # D all zero while R is not
    why: str
    tol_max: float
    tol_norm: float

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        """As `fp4bench check` prints it."""
        head = (f"max|D-R|/max|R| = {self.err_max:.3g} (tol {self.tol_max:.3g}), "
                f"||D-R||/||R|| = {self.err_norm:.3g} (tol {self.tol_norm:.3g}), "
                f"NaN/Inf {self.nonfinite}")
        return f"{head}: PASS" if self.passed else f"{head}: FAIL: {self.why}"


def tolerances(backend: Optional[str] = None) -> tuple[float, float]:
    """(tol_max, tol_norm) of a compiled-in backend (fp4_backend_find). None:
    cublas-bf16's, or the bf16 constants when this library has no cublas-bf16."""
    name = backend or DEFAULT_TOL_BACKEND
    ops = _lib.lib().fp4_backend_find(name.encode())
    if ops:
        return float(ops.contents.tol_max), float(ops.contents.tol_norm)
    if backend is None:
        return BF16_TOL_MAX, BF16_TOL_NORM
    raise KeyError(f"no backend named {backend!r} in {_lib.lib_path()} "
                   f"(compiled in: {', '.join(backend_names())})")


def backend_names() -> list[str]:
    L = _lib.lib()
    return [L.fp4_backend_at(i).contents.name.decode() for i in range(L.fp4_backend_count())]


def compare(d: Any, r: np.ndarray, tol_max: float, tol_norm: float) -> Verdict:
    """fp4_compare_outputs on two [M, N] results (d any float dtype, r float32)."""
    d32 = output_f32(d)
    r32 = np.ascontiguousarray(r, dtype=np.float32)
    if d32.shape != r32.shape:
        raise ValueError(f"D is {list(d32.shape)}, the reference {list(r32.shape)}")
    v = _lib.Verdict()
    _lib.lib().fp4_compare_outputs(d32.ctypes.data_as(POINTER(c_float)),
                                   r32.ctypes.data_as(POINTER(c_float)), d32.size,
                                   c_double(tol_max), c_double(tol_norm), byref(v))
    return Verdict(bool(v.pass_), float(v.err_max), float(v.err_norm), int(v.nonfinite),
                   int(v.zeros_d), int(v.zeros_r), bool(v.all_zero),
                   v.why.decode("utf-8", "replace"), float(tol_max), float(tol_norm))


def check(d: Any, a: NVFP4, b: NVFP4, *, backend: Optional[str] = None,
          tol_max: Optional[float] = None, tol_norm: Optional[float] = None,
          reference: Optional[np.ndarray] = None) -> Verdict:
    """The verdict of `fp4bench check`: D [M, N] (numpy or torch, float32 /
    float16 / bf16) against the exact reference of A and B.

    Tolerances: tol_max / tol_norm when given, else those of `backend` (looked
    up with fp4_backend_find), else cublas-bf16's (1e-2, 5e-3: a bf16 output
    with fp32 accumulation, the CLI's defaults). reference: R when already
    computed (reference_gemm(a, b))."""
    tm, tn = tolerances(backend)
    if tol_max is not None:
        tm = float(tol_max)
    if tol_norm is not None:
        tn = float(tol_norm)
    r = reference_gemm(a, b) if reference is None else reference
    return compare(d, r, tm, tn)


__all__ = [
    "NVFP4", "Verdict", "quantize", "dequantize", "reference_gemm", "check", "compare",
    "tolerances", "swizzle_scales", "unswizzle_scales", "make_operand", "naive_element",
    "bf16_to_f32", "f32_to_bf16", "backend_names", "Fp4Error", "swizzle_index",
    "e2m1_table", "e4m3_table", "data_kind", "data_kinds",
]
