"""Statistics of timing samples and the stopping rule: a port of
src/bench/stats.c, operation for operation, so that the numbers are the
engine's to the last bit (tests/test_stats.py checks them against the
library's fp4_stats_compute, fp4_median_ci and fp4_should_stop).

Quantiles interpolate linearly between order statistics (numpy's default).
The 95% confidence interval of the median is distribution-free: with the
sample sorted ascending and c = 0.98 sqrt(n), lo = x[floor(n/2 - c)] and
hi = x[ceil(n/2 + c)], indexes clamped to [0, n-1]. noise = (hi - lo) / 2 /
median: +inf for one sample or a median <= 0, NaN for none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def _sorted(x: Sequence[float]) -> list[float]:
    """Ascending, NaNs last (they never become the median of real values)."""
    vals = [float(v) for v in x]
    real = sorted(v for v in vals if not math.isnan(v))
    return real + [math.nan] * (len(vals) - len(real))


def _quantile_sorted(s: list[float], q: float) -> float:
    n = len(s)
    if not (q > 0.0):
        q = 0.0
    if q > 1.0:
        q = 1.0
    h = q * float(n - 1)
    i = int(math.floor(h))
    if i >= n - 1:
        return s[n - 1]
    return s[i] + (h - float(i)) * (s[i + 1] - s[i])


def _ci_ranks(n: int) -> tuple[int, int]:
    c = 0.98 * math.sqrt(float(n))
    lo = math.floor(float(n) / 2.0 - c)
    hi = math.ceil(float(n) / 2.0 + c)
    clamp = lambda v: 0 if v < 0 else (n - 1 if v > n - 1 else int(v))
    return clamp(lo), clamp(hi)


def quantile(x: Sequence[float], q: float) -> float:
    """fp4_quantile: the q-quantile (type 7); NaN for an empty sample."""
    if len(x) == 0:
        return math.nan
    return _quantile_sorted(_sorted(x), q)


def median_ci(x: Sequence[float]) -> tuple[float, float]:
    """fp4_median_ci: the distribution-free 95% CI of the median (NaN, NaN if empty)."""
    if len(x) == 0:
        return math.nan, math.nan
    s = _sorted(x)
    il, ih = _ci_ranks(len(s))
    return s[il], s[ih]


@dataclass
class Stats:
    """fp4_stats: count, quantiles, moments and the noise of the median."""

    count: int = 0
    median: float = math.nan
    p10: float = math.nan
    p90: float = math.nan
    min: float = math.nan
    max: float = math.nan
    mean: float = math.nan
    stdev: float = math.nan
    noise: float = math.nan

    def to_json(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in
                ("count", "median", "p10", "p90", "min", "max", "mean", "stdev", "noise")}


def compute(x: Sequence[float]) -> Stats:
    """fp4_stats_compute."""
    out = Stats()
    n = len(x)
    if n <= 0:
        return out
    s = _sorted(x)
    out.count = n
    out.min = s[0]
    out.max = s[n - 1]
    out.median = _quantile_sorted(s, 0.5)
    out.p10 = _quantile_sorted(s, 0.1)
    out.p90 = _quantile_sorted(s, 0.9)
    total = 0.0
    for v in s:
        total += v
    out.mean = total / float(n)
    ss = 0.0
    for v in s:
        ss += (v - out.mean) * (v - out.mean)
    out.stdev = math.sqrt(ss / float(n - 1)) if n > 1 else 0.0
    il, ih = _ci_ranks(n)
    if n < 2 or not (out.median > 0.0):
        out.noise = math.inf
    else:
        out.noise = (s[ih] - s[il]) / 2.0 / out.median
    return out


@dataclass
class StopRule:
    """fp4_stop_rule, with the engine's defaults."""

    min_samples: int = 10
    noise_target: float = 0.005
    min_time_s: float = 0.0
    max_time_s: float = 10.0


def should_stop(rule: StopRule, s: Stats, elapsed_s: float) -> tuple[bool, bool]:
    """fp4_should_stop: (stop, timed_out). Converged (enough samples, noise under
    the target, min time passed) wins over timed out (elapsed >= max time)."""
    if s.count >= rule.min_samples and s.count > 0 and s.noise < rule.noise_target and \
            elapsed_s >= rule.min_time_s:
        return True, False
    if elapsed_s >= rule.max_time_s:
        return True, True
    return False, False


def _div(a: float, b: float) -> float:
    """a / b with C's IEEE results for b == 0 (inf, or NaN for 0/0)."""
    if b == 0.0:
        return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a) * \
            math.copysign(1.0, b)
    return a / b


def paired_ratio(base: Sequence[float], this: Sequence[float]) -> tuple[float, float, float]:
    """Per-round ratios base/this over the rounds both ran: (median, lo, hi),
    the median and its 95% CI (the engine's fill_ratio)."""
    n = min(len(base), len(this))
    r = [_div(base[i], this[i]) for i in range(n)]
    lo, hi = median_ci(r)
    return quantile(r, 0.5), lo, hi


__all__ = ["Stats", "StopRule", "compute", "quantile", "median_ci", "should_stop",
           "paired_ratio"]
