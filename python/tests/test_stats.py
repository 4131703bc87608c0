"""The port of src/bench/stats.c against the library itself: every statistic
equal to the last bit, the CI of the median and the stopping rule."""

from __future__ import annotations

import math
import unittest
from ctypes import byref, c_double, c_int

import numpy as np

import _util  # noqa: F401  (puts the package on the path)
from fp4bench import _lib
from fp4bench import stats as st


def lib_stats(x: list[float]) -> _lib.Stats:
    arr = (c_double * max(len(x), 1))(*x)
    out = _lib.Stats()
    _lib.lib().fp4_stats_compute(arr, len(x), byref(out))
    return out


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


class StatsPort(unittest.TestCase):
    def samples(self) -> list[list[float]]:
        rng = np.random.default_rng(7)
        out: list[list[float]] = [[], [3.5], [2.0, 1.0], [1.0] * 7, [0.0, 0.0, 1.0],
                                  [5.0, -1.0, 2.0, math.nan, 4.0]]
        for n in (3, 5, 6, 10, 33, 100, 257, 1000):
            out.append(list(rng.lognormal(2.0, 0.1, n)))
            out.append(list(np.round(rng.normal(10, 1, n), 2)))  # ties
        return out

    def test_compute_matches_library(self) -> None:
        for x in self.samples():
            got, want = st.compute(x), lib_stats(x)
            self.assertEqual(got.count, want.count, x)
            for f in ("median", "p10", "p90", "min", "max", "mean", "stdev", "noise"):
                self.assertTrue(same(getattr(got, f), getattr(want, f)),
                                f"{f}: {getattr(got, f)!r} != {getattr(want, f)!r} for n={len(x)}")

    def test_quantile_and_ci_match_library(self) -> None:
        L = _lib.lib()
        for x in self.samples():
            if not x:
                self.assertTrue(math.isnan(st.quantile(x, 0.5)))
                continue
            arr = (c_double * len(x))(*x)
            for q in (0.0, 0.1, 0.5, 0.9, 1.0, 0.37):
                self.assertTrue(same(st.quantile(x, q), L.fp4_quantile(arr, len(x), q)))
            lo, hi = c_double(), c_double()
            L.fp4_median_ci(arr, len(x), byref(lo), byref(hi))
            glo, ghi = st.median_ci(x)
            self.assertTrue(same(glo, lo.value) and same(ghi, hi.value), (len(x), glo, lo.value))

    def test_should_stop_matches_library(self) -> None:
        L = _lib.lib()
        rng = np.random.default_rng(3)
        for _ in range(300):
            n = int(rng.integers(0, 40))
            x = list(rng.lognormal(1, float(rng.choice([0.0005, 0.01, 0.2])), n))
            s = st.compute(x)
            rule = st.StopRule(int(rng.integers(1, 20)), float(rng.choice([0.001, 0.005, 0.05])),
                               float(rng.choice([0.0, 0.5])), float(rng.choice([0.2, 1.0])))
            elapsed = float(rng.uniform(0, 1.5))
            cr = _lib.StopRule(rule.min_samples, rule.noise_target, rule.min_time_s,
                               rule.max_time_s)
            cs = lib_stats(x)
            to = c_int(-1)
            stop = L.fp4_should_stop(byref(cr), byref(cs), elapsed, byref(to))
            self.assertEqual(st.should_stop(rule, s, elapsed), (bool(stop), bool(to.value)))

    def test_paired_ratio(self) -> None:
        base = [10.0, 11.0, 10.5, 10.2, 10.1, 9.9]
        this = [5.0, 5.5, 5.25, 5.1, 5.05, 4.95, 99.0]  # the extra sample is unpaired
        v, lo, hi = st.paired_ratio(base, this)
        self.assertEqual((v, lo, hi), (2.0, 2.0, 2.0))
        self.assertEqual(st.paired_ratio([1.0], [0.0])[0], math.inf)


if __name__ == "__main__":
    unittest.main()
