"""Workloads: GEMM shapes with labels, from the library's presets
(fp4_cases_from_preset, the same lists as `fp4bench list --preset NAME`) or
given by hand."""

from __future__ import annotations

from ctypes import byref
from dataclasses import dataclass
from typing import Iterable, Sequence, Union

from . import _lib
from ._lib import CaseList, Err


@dataclass(frozen=True)
class Case:
    """One GEMM D[m, n] = A[m, k] B[n, k]^T and its label."""

    m: int
    n: int
    k: int
    label: str = "custom"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def _from_list(fill, what: str) -> list[Case]:
    cl = CaseList()
    err = Err()
    L = _lib.lib()
    st = fill(cl, err)
    try:
        _lib.check(st, err, what)
        return [Case(int(c.shape.m), int(c.shape.n), int(c.shape.k),
                     c.label.decode("utf-8")) for c in (cl.items[i] for i in range(cl.count))]
    finally:
        L.fp4_cases_free(byref(cl))


def preset(name: str) -> list[Case]:
    """The shapes of a named preset ("seed", "sweep-m", "targets", "models", "odd")."""
    L = _lib.lib()
    return _from_list(lambda cl, err: L.fp4_cases_from_preset(byref(cl), name.encode(),
                                                              byref(err)),
                      f"preset {name!r}")


def presets() -> dict[str, str]:
    """Every preset's name and one-line summary."""
    L = _lib.lib()
    return {L.fp4_preset_name(i).decode(): L.fp4_preset_summary(i).decode()
            for i in range(L.fp4_preset_count())}


def parse(arg: str) -> list[Case]:
    """"MxNxK[,MxNxK...]" as `fp4bench run --shape` reads it."""
    L = _lib.lib()
    return _from_list(lambda cl, err: L.fp4_cases_parse_shapes(byref(cl), arg.encode(),
                                                               byref(err)),
                      f"shapes {arg!r}")


ShapeLike = Union[Case, str, Sequence]


def cases(shapes: Union[None, str, Iterable[ShapeLike]] = None,
          preset_name: Union[None, str] = None) -> list[Case]:
    """Normalise shapes for bench(): a Case, an (M, N, K) or (M, N, K, label)
    tuple, an "MxNxK" string, or a list of these; else the named preset."""
    if shapes is None:
        return preset(preset_name or "seed")
    if preset_name is not None:
        raise ValueError("give shapes or a preset, not both")
    if isinstance(shapes, str):
        return parse(shapes)
    if isinstance(shapes, tuple) and len(shapes) in (3, 4) and \
            all(isinstance(v, int) for v in shapes[:3]):
        shapes = [shapes]  # one (M, N, K) given bare
    out: list[Case] = []
    for s in shapes:
        if isinstance(s, Case):
            c = s
        elif isinstance(s, str):
            out.extend(parse(s))
            continue
        elif isinstance(s, (tuple, list)) and len(s) in (3, 4):
            c = Case(int(s[0]), int(s[1]), int(s[2]), str(s[3]) if len(s) == 4 else "custom")
        else:
            raise ValueError(f"a shape is (M, N, K) or (M, N, K, label), not {s!r}")
        if min(c.m, c.n, c.k) < 1 or c.k % 16:
            raise ValueError(f"bad shape {c.m}x{c.n}x{c.k}: sizes >= 1 and K a multiple of 16")
        if c.k > 1 << 20:  # fp4_shape_check: the exact reference's integer sums
            raise ValueError(f"bad shape {c.m}x{c.n}x{c.k}: K above 2^20")
        if c.m * c.n > 1 << 61:
            raise ValueError(f"bad shape {c.m}x{c.n}x{c.k}: the output size overflows")
        try:
            label = c.label.encode()
        except UnicodeEncodeError:
            raise ValueError(f"label {c.label!r} is not valid UTF-8 text") from None
        if b"\0" in label:
            raise ValueError(f"label {c.label!r} holds a NUL character")
        if len(label) >= _lib.LABEL_LEN:
            raise ValueError(f"label {c.label!r} is longer than {_lib.LABEL_LEN - 1} bytes")
        out.append(c)
    return out


__all__ = ["Case", "preset", "presets", "parse", "cases"]
