"""The statistics of the detector, in pure Python (no SciPy): normal tail, Wilson / Newcombe intervals, the
two-proportion test, Mann-Whitney U on 1-5 scores from their counts, and Benjamini-Hochberg.

Everything works on counts, not on lists of observations: a pass rate is (passed, n) and a dimension is the count of
each score 1..5, so one test costs the same for 20 evaluations or 2 million.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054
"""Two-sided 95 % normal quantile: the intervals shown in alerts are 95 % intervals."""


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(x1: int, n1: int, x0: int, n0: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) for p1 - p0: good coverage at small n and near 0 or 1, where
    the Wald interval is too narrow."""
    p1, p0 = x1 / n1, x0 / n0
    l1, u1 = wilson_interval(x1, n1, z)
    l0, u0 = wilson_interval(x0, n0, z)
    difference = p1 - p0
    lower = difference - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2)
    upper = difference + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)
    return lower, upper


@dataclass(frozen=True)
class TestResult:
    effect: float
    """Current minus baseline: pass-rate points (0..1) or mean score points (1..5 scale)."""
    p_value: float
    """One-sided: the probability of a drop at least this large if nothing changed."""
    low: float
    high: float
    """95 % interval of the effect."""


def two_proportion_drop(x1: int, n1: int, x0: int, n0: int) -> TestResult:
    """One-sided pooled z-test that the current proportion x1/n1 is below the baseline x0/n0."""
    p1, p0 = x1 / n1, x0 / n0
    pooled = (x1 + x0) / (n1 + n0)
    variance = pooled * (1 - pooled) * (1 / n1 + 1 / n0)
    low, high = newcombe_interval(x1, n1, x0, n0)
    if variance <= 0:
        # Both all-pass or both all-fail: no evidence of anything.
        return TestResult(p1 - p0, 1.0 if p1 >= p0 else 0.0, low, high)
    z = (p1 - p0) / math.sqrt(variance)
    return TestResult(p1 - p0, normal_sf(-z), low, high)


SCORES = (1, 2, 3, 4, 5)


def _mean_and_variance(counts: Sequence[int]) -> tuple[float, float, int]:
    n = sum(counts)
    mean = sum(s * c for s, c in zip(SCORES, counts, strict=True)) / n
    variance = sum(c * (s - mean) ** 2 for s, c in zip(SCORES, counts, strict=True)) / max(1, n - 1)
    return mean, variance, n


def mann_whitney_u(current: Sequence[int], baseline: Sequence[int]) -> float:
    """U of the current sample from score counts: pairs where current > baseline, ties counting one half."""
    below = 0
    u = 0.0
    for c, b in zip(current, baseline, strict=True):
        u += c * (below + 0.5 * b)
        below += b
    return u


def mann_whitney_drop(current: Sequence[int], baseline: Sequence[int]) -> TestResult:
    """One-sided Mann-Whitney U test that current scores are stochastically lower than baseline ones, from the
    counts of scores 1..5 (index 0 is score 1), with the normal approximation and the tie correction (1-5 scores
    are mostly ties). The effect and its interval are on the mean score, which is what dashboards show."""
    mean1, var1, n1 = _mean_and_variance(current)
    mean0, var0, n0 = _mean_and_variance(baseline)
    u = mann_whitney_u(current, baseline)
    total = n1 + n0
    ties = sum((c + b) ** 3 - (c + b) for c, b in zip(current, baseline, strict=True))
    variance = n1 * n0 / 12 * ((total + 1) - ties / (total * (total - 1)))
    standard_error = math.sqrt(var1 / n1 + var0 / n0)
    effect = mean1 - mean0
    low, high = effect - Z95 * standard_error, effect + Z95 * standard_error
    if variance <= 0:
        return TestResult(effect, 1.0 if effect >= 0 else 0.0, low, high)
    # Continuity correction of one half towards "no drop".
    z = (u - n1 * n0 / 2 + 0.5) / math.sqrt(variance)
    return TestResult(effect, normal_sf(-z), low, high)


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Adjusted p-values (q-values): reject where adjusted <= q keeps the expected false discovery rate <= q."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        running = min(running, p_values[index] * m / rank)
        adjusted[index] = min(1.0, running)
    return adjusted
