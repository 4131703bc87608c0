"""fp4bench for Python: the NVFP4 format and the exact reference of the fp4bench C
library (through ctypes, bit for bit the CLI's), the exact reference of routed MoE
steps (moe_reference), and bench(), which verifies and times GEMM callables by
the engine's rules and writes the CLI's JSON.

    import fp4bench
    a, b = fp4bench.quantize(x), fp4bench.quantize(w)       # NVFP4, as the CLI quantizes
    print(fp4bench.check(my_gemm(a, b), a, b))              # the verdict of `fp4bench check`

See docs/PYTHON.md.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ._lib import Fp4Error, LibraryNotFound, lib_path, program
from .harness import Backend, Operands, Problem, Unsupported, bench
from .format import (
    NVFP4,
    Verdict,
    check,
    compare,
    dequantize,
    make_operand,
    quantize,
    reference_gemm,
    swizzle_scales,
    tolerances,
    unswizzle_scales,
)
from .libbackend import LibraryBackend
from .moe import LayerResult, moe_layer_reference, moe_reference
from .report import Report, Row, read_json
from .shapes import Case, preset, presets

__all__ = [
    "__version__", "Fp4Error", "LibraryNotFound", "lib_path", "program",
    "NVFP4", "Verdict", "quantize", "dequantize", "reference_gemm", "check", "compare",
    "tolerances", "swizzle_scales", "unswizzle_scales", "make_operand",
    "bench", "Backend", "Operands", "Problem", "Unsupported", "LibraryBackend", "moe_reference",
    "moe_layer_reference", "LayerResult",
    "Report", "Row", "read_json", "Case", "preset", "presets",
]
