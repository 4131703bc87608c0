"""Helpers for the package's tests: the fp4bench program, scratch folders, and
readers written here independently of the library (a .safetensors parser, a
bf16 .npy writer), so that a test compares the package with the CLI's files
rather than the library with itself.

Environment: FP4BENCH (the program), FP4BENCH_LIB (the library or its
folder); tests/cli_python.sh sets both from the build folder."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package from this source tree

import fp4bench  # noqa: E402


def program() -> str:
    """The fp4bench program (FP4BENCH, else beside the library, else PATH)."""
    try:
        return fp4bench.program()
    except FileNotFoundError as e:
        raise unittest.SkipTest(str(e)) from None


def run(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    """Run the program; fail the test on an unexpected exit status."""
    p = subprocess.run([program(), *args], capture_output=True, text=True)
    if check_rc is not None and p.returncode != check_rc:
        raise AssertionError(f"fp4bench {' '.join(args)} exited {p.returncode}, wanted "
                             f"{check_rc}: {p.stderr.strip()} {p.stdout.strip()[-400:]}")
    return p


class TmpDir:
    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="fp4py-"))

    def __truediv__(self, name: str) -> str:
        return str(self.path / name)

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def read_safetensors(path: str) -> dict[str, tuple[str, list[int], bytes]]:
    """{name: (dtype, shape, raw bytes)} of a .safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    data = blob[8 + hlen:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[lo:hi])
    return out


def save_bf16_npy(path: str, bits: np.ndarray) -> None:
    """A .npy of bf16 values as ml_dtypes writes them: a 2-byte void descr."""
    np.save(path, np.ascontiguousarray(bits, dtype=np.uint16).view("V2"))


def gaussian(rows: int, cols: int, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, cols)) * scale).astype(np.float32)
