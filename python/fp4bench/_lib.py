"""Loading libfp4 (the fp4bench C library) with ctypes, and the C types it uses.

The structures below mirror include/fp4/*.h field for field; the backend table
is checked against FP4_BACKEND_API_VERSION before any of its slots is used.

Where the library is looked for, in order:
  1. the FP4BENCH_LIB environment variable (the .so file, or a folder holding it);
  2. this package's own folder (a libfp4.so copied in beside the Python files);
  3. the build folder of the source tree this package sits in (<repo>/build), and
     the folder of an `fp4bench` program on PATH (the build folder holds both,
     an install puts the library in ../lib);
  4. the system's library path (ldconfig, LD_LIBRARY_PATH).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int64,
    c_longlong,
    c_size_t,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Optional

BACKEND_API_VERSION = 4  # FP4_BACKEND_API_VERSION in include/fp4/backend.h
ERR_MSG_LEN = 384
LABEL_LEN = 64
NAME_LEN = 48

# fp4_status values (include/fp4/status.h)
OK = 0
ERR_UNSUPPORTED = 8

# fp4_backend_ops.flags
FLAG_GPU = 1 << 0
FLAG_REFERENCE = 1 << 1
FLAG_LOSSY = 1 << 2
FLAG_NOT_GEMM = 1 << 3
FLAG_FROM_BF16 = 1 << 4

_LIB_NAMES = ("libfp4.so", "libfp4.so.0")


class LibraryNotFound(ImportError):
    """libfp4 could not be found or loaded; the message says where it looked."""


class Fp4Error(RuntimeError):
    """A library call failed: status is the fp4_status, the message the library's."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# ---- structures --------------------------------------------------------------------


class Err(Structure):
    _fields_ = [("status", c_int), ("msg", c_char * ERR_MSG_LEN)]

    def text(self) -> str:
        return self.msg.decode("utf-8", "replace")


class Matrix(Structure):
    _fields_ = [
        ("rows", c_int64),
        ("cols", c_int64),
        ("codes", POINTER(c_uint8)),
        ("scales", POINTER(c_uint8)),
        ("global_scale", c_float),
    ]


class Shape(Structure):
    _fields_ = [("m", c_int64), ("n", c_int64), ("k", c_int64)]


class Problem(Structure):
    _fields_ = [
        ("shape", Shape),
        ("a", POINTER(Matrix)),
        ("b", POINTER(Matrix)),
        ("alpha", c_float),
        ("a_odd", POINTER(Matrix)),
        ("a_bf16", POINTER(c_uint16)),
        ("tuning", c_int),
    ]


class Verdict(Structure):
    _fields_ = [
        ("err_max", c_double),
        ("err_norm", c_double),
        ("nonfinite", c_longlong),
        ("zeros_d", c_longlong),
        ("zeros_r", c_longlong),
        ("all_zero", c_int),
        ("pass_", c_int),
        ("why", c_char * 160),
    ]


class Stats(Structure):
    _fields_ = [
        ("count", c_int),
        ("median", c_double),
        ("p10", c_double),
        ("p90", c_double),
        ("min", c_double),
        ("max", c_double),
        ("mean", c_double),
        ("stdev", c_double),
        ("noise", c_double),
    ]


class StopRule(Structure):
    _fields_ = [
        ("min_samples", c_int),
        ("noise_target", c_double),
        ("min_time_s", c_double),
        ("max_time_s", c_double),
    ]


class Case(Structure):
    _fields_ = [("shape", Shape), ("label", c_char * LABEL_LEN)]


class CaseList(Structure):
    _fields_ = [("items", POINTER(Case)), ("count", c_int), ("cap", c_int)]


class DeviceInfo(Structure):
    _fields_ = [
        ("present", c_int),
        ("why_absent", c_char * ERR_MSG_LEN),
        ("name", c_char * 128),
        ("cc_major", c_int),
        ("cc_minor", c_int),
        ("sms", c_int),
        ("l2_bytes", c_double),
        ("mem_bytes", c_double),
        ("driver_version", c_int),
        ("runtime_version", c_int),
        ("sm_clock_max_mhz", c_double),
        ("mem_clock_max_mhz", c_double),
        ("nvml", c_int),
        ("driver_string", c_char * 64),
        ("cpu_threads", c_int),
        ("peak_bf16_tflops", c_double),
        ("peak_fp8_tflops", c_double),
        ("peak_fp4_tflops", c_double),
        ("peak_bw_gbps", c_double),
    ]


class Warnings(Structure):
    _fields_ = [("count", c_int), ("text", c_char * 1024)]


OPEN_FN = CFUNCTYPE(c_int, POINTER(c_void_p), POINTER(Err))
CLOSE_FN = CFUNCTYPE(None, c_void_p)
SUPPORTS_FN = CFUNCTYPE(c_int, c_void_p, POINTER(Shape), POINTER(Err))
PREPARE_FN = CFUNCTYPE(c_int, c_void_p, POINTER(Problem), c_int, POINTER(c_void_p), POINTER(Err))
COPY_FN = CFUNCTYPE(c_int, c_void_p, c_int, c_void_p, POINTER(Err))  # poison, run
READ_FN = CFUNCTYPE(c_int, c_void_p, c_int, POINTER(c_float), POINTER(Err))
RELEASE_FN = CFUNCTYPE(None, c_void_p)
SHAPE_DOUBLE_FN = CFUNCTYPE(c_double, POINTER(Shape))  # bytes_moved, flops
VARIANT_FN = CFUNCTYPE(c_char_p, c_void_p)
SET_WARNINGS_FN = CFUNCTYPE(None, c_void_p, POINTER(Warnings))
OWN_REFERENCE_FN = CFUNCTYPE(c_double, c_void_p, c_int64, c_int64)


class BackendOps(Structure):
    """fp4_backend_ops (include/fp4/backend.h, API version 4)."""

    _fields_ = [
        ("api_version", c_int),
        ("name", c_char_p),
        ("summary", c_char_p),
        ("flags", c_uint),
        ("math", c_int),
        ("tol_max", c_double),
        ("tol_norm", c_double),
        ("open", OPEN_FN),
        ("close", CLOSE_FN),
        ("supports", SUPPORTS_FN),
        ("prepare", PREPARE_FN),
        ("poison", COPY_FN),
        ("run", COPY_FN),
        ("read_output", READ_FN),
        ("release", RELEASE_FN),
        ("bytes_moved", SHAPE_DOUBLE_FN),
        ("variant", VARIANT_FN),
        ("flops", SHAPE_DOUBLE_FN),
        ("set_warnings", SET_WARNINGS_FN),
        ("own_reference", OWN_REFERENCE_FN),
        ("own_tol", c_double),
    ]


# ---- finding and loading -------------------------------------------------------------


def _candidates() -> list[Path]:
    """Every path tried, in the documented order (the system path comes after)."""
    out: list[Path] = []

    def add_dir(d: Path) -> None:
        for name in _LIB_NAMES:
            out.append(d / name)

    env = os.environ.get("FP4BENCH_LIB")
    if env:
        p = Path(env)
        if p.is_dir():
            add_dir(p)
        else:
            out.append(p)
    here = Path(__file__).resolve().parent
    add_dir(here)
    repo = here.parent.parent  # <repo>/python/fp4bench -> <repo>
    if (repo / "CMakeLists.txt").is_file():
        add_dir(repo / "build")
    prog = shutil.which("fp4bench")
    if prog:
        pdir = Path(prog).resolve().parent
        add_dir(pdir)
        add_dir(pdir.parent / "lib")
        add_dir(pdir.parent / "lib64")
    return out


def _bind(lib: ctypes.CDLL) -> None:
    """Prototypes of every function the package calls."""
    P = POINTER
    sigs: dict[str, tuple[object, list[object]]] = {
        "fp4_status_str": (c_char_p, [c_int]),
        "fp4_quantize_f32": (c_int, [P(c_float), c_int64, c_int64, c_float, P(Matrix), P(Err)]),
        "fp4_quantize_bf16": (c_int, [P(c_uint16), c_int64, c_int64, c_float, P(Matrix), P(Err)]),
        "fp4_dequantize_f32": (c_int, [P(Matrix), P(c_float), P(Err)]),
        "fp4_matrix_free": (None, [P(Matrix)]),
        "fp4_check_dims": (c_int, [c_int64, c_int64, P(Err)]),
        "fp4_swizzled_rows": (c_int64, [c_int64]),
        "fp4_swizzled_kblocks": (c_int64, [c_int64]),
        "fp4_swizzled_size": (c_size_t, [c_int64, c_int64]),
        "fp4_swizzle_scales": (c_int, [P(c_uint8), c_int64, c_int64, P(c_uint8), P(Err)]),
        "fp4_unswizzle_scales": (c_int, [P(c_uint8), c_int64, c_int64, P(c_uint8), P(Err)]),
        "fp4_gemm_min_bytes": (c_double, [c_int64, c_int64, c_int64]),
        "fp4_gemm_reference": (c_int, [P(Matrix), P(Matrix), c_float, P(c_float), c_int, P(Err)]),
        "fp4_gemm_naive_element": (c_double, [P(Matrix), P(Matrix), c_float, c_int64, c_int64]),
        "fp4_compare_outputs": (None, [P(c_float), P(c_float), c_size_t, c_double, c_double,
                                       P(Verdict)]),
        "fp4_e4m3_decode": (c_float, [c_uint8]),
        "fp4_e2m1_decode": (c_float, [c_uint8]),
        "fp4_backend_find": (P(BackendOps), [c_char_p]),
        "fp4_backend_count": (c_int, []),
        "fp4_backend_at": (P(BackendOps), [c_int]),
        "fp4_cases_from_preset": (c_int, [P(CaseList), c_char_p, P(Err)]),
        "fp4_cases_parse_shapes": (c_int, [P(CaseList), c_char_p, P(Err)]),
        "fp4_cases_free": (None, [P(CaseList)]),
        "fp4_preset_count": (c_int, []),
        "fp4_preset_name": (c_char_p, [c_int]),
        "fp4_preset_summary": (c_char_p, [c_int]),
        "fp4_stats_compute": (None, [P(c_double), c_int, P(Stats)]),
        "fp4_quantile": (c_double, [P(c_double), c_int, c_double]),
        "fp4_median_ci": (None, [P(c_double), c_int, P(c_double), P(c_double)]),
        "fp4_should_stop": (c_int, [P(StopRule), P(Stats), c_double, P(c_int)]),
        "fp4_device_describe": (None, [P(DeviceInfo)]),
        "fp4_data_kind_name": (c_char_p, [c_int]),
        "fp4_data_kind_parse": (c_int, [c_char_p, P(c_int)]),
        "fp4_nvfp4_save": (c_int, [c_char_p, P(Matrix), c_float, P(Err)]),
        "fp4_nvfp4_load": (c_int, [c_char_p, P(Matrix), P(Err)]),
    }
    missing = []
    for name, (res, args) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = res
        fn.argtypes = args
    if missing:
        raise LibraryNotFound(
            f"{lib._name} is not a compatible libfp4: it lacks {', '.join(missing)}")
    # Optional: the engine's operand generator (src/bench/inputs.c). Used when
    # present so that bench() feeds the same operands as `fp4bench run`.
    try:
        fn = lib.fp4_make_operand
        fn.restype = c_int
        fn.argtypes = [c_int, c_int64, c_int64, c_uint64, P(Matrix), P(Err)]
    except AttributeError:
        pass


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded at the first call); LibraryNotFound if none."""
    global _lib
    if _lib is not None:
        return _lib
    tried: list[str] = []
    errors: list[str] = []
    for path in _candidates():
        tried.append(str(path))
        if not path.exists():
            continue
        try:
            handle = ctypes.CDLL(str(path))
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _bind(handle)
        _lib = handle
        return handle
    system = ctypes.util.find_library("fp4")
    for name in ([system] if system else []) + list(_LIB_NAMES):
        tried.append(f"{name} (system library path)")
        try:
            handle = ctypes.CDLL(name)
        except OSError:
            continue
        _bind(handle)
        _lib = handle
        return handle
    msg = ("fp4bench: the C library libfp4.so was not found. Build it (make, or "
           "cmake --build build) and set FP4BENCH_LIB to the .so file or its folder. "
           "Looked at: " + "; ".join(tried))
    if errors:
        msg += ". Could not load: " + "; ".join(errors)
    raise LibraryNotFound(msg)


def lib_path() -> str:
    """The file name the library was loaded from."""
    return str(lib()._name)


def check(status: int, err: Err, what: str) -> None:
    """Raise Fp4Error for a failed call (status != FP4_OK)."""
    if status != OK:
        text = err.text() or lib().fp4_status_str(status).decode()
        raise Fp4Error(status, f"{what}: {text}")


def program() -> str:
    """The fp4bench program: FP4BENCH, else beside the loaded library (the build
    folder holds both; an install puts it in ../bin), else PATH. FileNotFoundError
    when none is found."""
    env = os.environ.get("FP4BENCH")
    if env:
        return env
    here = Path(lib_path()).resolve().parent
    for cand in (here / "fp4bench", here.parent / "bin" / "fp4bench"):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which("fp4bench")
    if found:
        return found
    raise FileNotFoundError("the fp4bench program was not found (set FP4BENCH, or build it "
                            f"beside {lib_path()})")


def has_symbol(name: str) -> bool:
    return hasattr(lib(), name)
