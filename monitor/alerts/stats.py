"""The statistics of the detector (no SciPy): normal tail, Wilson / Newcombe intervals, the two-proportion test,
Mann-Whitney U on 1-5 scores from their counts, and Benjamini-Hochberg.

Everything works on counts, not on lists of observations: a pass rate is (passed, n) and a dimension is the count of
each score 1..5, so one test costs the same for 20 evaluations or 2 million.

A cycle at 100 rubrics x 20 agents x 10 dimensions runs 40,000 Mann-Whitney tests and 4,000 pass-rate tests:
``mann_whitney_drops`` and ``two_proportion_drops`` run them as numpy arrays, with exactly the arithmetic of the
scalar functions (the same operations in the same order on float64, integers kept exact), so a verdict is bit for
bit the one the scalar function gives (tests/test_alerts_fast_path.py compares them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

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
    # Squares as products: x * x is rounded once everywhere, where libm's pow(x, 2) is not always x * x (1 in about
    # 1,200 values) and numpy may take another pow: the batched test below must give these bits exactly.
    a, b, c, d = p1 - l1, u0 - p0, u1 - p1, p0 - l0
    lower = difference - math.sqrt(a * a + b * b)
    upper = difference + math.sqrt(c * c + d * d)
    return lower, upper


class TestResult(NamedTuple):
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
    # Yates' continuity correction towards "no drop": without it the normal approximation is anti-conservative for
    # small windows with pass rates near 1 (6.5 % false alerts at n=60, p=0.9 for a nominal 5 %).
    difference, correction = p1 - p0, 0.5 * (1 / n1 + 1 / n0)
    shrunk = difference + correction if difference < -correction else (
        difference - correction if difference > correction else 0.0)
    return TestResult(difference, normal_sf(-shrunk / math.sqrt(variance)), low, high)


_EXACT_N = 2**25
"""Up to this many evaluations on a side, every integer of ``two_proportion_drop`` (4·n² at most) is exact in
float64, so the batched test equals the scalar one; larger sides go through the scalar function."""


def two_proportion_drops(counts: Sequence[tuple[int, int, int, int]]) -> list[TestResult]:
    """``two_proportion_drop(x1, n1, x0, n0)`` of every (x1, n1, x0, n0), at once: each line below is a line of
    it (and of ``wilson_interval`` and ``newcombe_interval``), operation for operation on float64, so the results
    are the scalar ones bit for bit."""
    if not counts:
        return []
    x1, n1, x0, n0 = np.array(counts, dtype=np.int64).reshape(-1, 4).T
    exact = (n1 > 0) & (n0 > 0) & (n1 <= _EXACT_N) & (n0 <= _EXACT_N)
    # Rows left to the scalar function get harmless values here (their results are replaced below).
    x1, n1, x0, n0 = np.where(exact, x1, 0), np.where(exact, n1, 1), np.where(exact, x0, 0), np.where(exact, n0, 1)
    p1, p0 = x1 / n1, x0 / n0
    pooled = (x1 + x0) / (n1 + n0)
    variance = pooled * (1 - pooled) * (1 / n1 + 1 / n0)

    def wilson(p: Floats, n: Ints) -> tuple[Floats, Floats]:
        z = Z95
        denominator = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denominator
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
        low, high = centre - half, centre + half
        return np.where(low > 0.0, low, 0.0), np.where(high < 1.0, high, 1.0)  # max(0.0, ...), min(1.0, ...)

    l1, u1 = wilson(p1, n1)
    l0, u0 = wilson(p0, n0)
    difference = p1 - p0
    a, b, c, d = p1 - l1, u0 - p0, u1 - p1, p0 - l0
    lower = difference - np.sqrt(a * a + b * b)
    upper = difference + np.sqrt(c * c + d * d)
    correction = 0.5 * (1 / n1 + 1 / n0)
    shrunk = np.where(difference < -correction, difference + correction,
                      np.where(difference > correction, difference - correction, 0.0))
    positive = variance > 0
    z = -shrunk / np.sqrt(np.where(positive, variance, 1.0))
    tests = _test_results(difference, z, positive, lower, upper)
    for index in np.flatnonzero(~exact).tolist():
        tests[index] = two_proportion_drop(*counts[index])
    return tests


def _test_results(effect: Floats, z: Floats, tested: npt.NDArray[np.bool_], low: Floats, high: Floats
                  ) -> list[TestResult]:
    """The batched tests' results, as the scalar ones make them: p = ``normal_sf(z)`` where the variance is
    positive (``tested``), else 1.0 for no drop and 0.0 for a drop. numpy has no erfc: it is taken per test."""
    erfc, root2 = math.erfc, math.sqrt(2.0)
    return [TestResult(e, 0.5 * erfc(t) if v else (1.0 if e >= 0 else 0.0), lo, hi)
            for e, t, v, lo, hi in zip(effect.tolist(), (z / root2).tolist(), tested.tolist(), low.tolist(),
                                       high.tolist(), strict=True)]


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
    are mostly ties). The effect and its interval are on the mean score, which is what dashboards show.

    Unrolled over the five scores: it runs for every dimension of every series in every cycle."""
    c1, c2, c3, c4, c5 = current
    b1, b2, b3, b4, b5 = baseline
    n1 = c1 + c2 + c3 + c4 + c5
    n0 = b1 + b2 + b3 + b4 + b5
    mean1 = (c1 + 2 * c2 + 3 * c3 + 4 * c4 + 5 * c5) / n1
    mean0 = (b1 + 2 * b2 + 3 * b3 + 4 * b4 + 5 * b5) / n0
    var1 = max(0.0, (c1 + 4 * c2 + 9 * c3 + 16 * c4 + 25 * c5 - n1 * mean1 * mean1) / max(1, n1 - 1))
    var0 = max(0.0, (b1 + 4 * b2 + 9 * b3 + 16 * b4 + 25 * b5 - n0 * mean0 * mean0) / max(1, n0 - 1))
    # U of the current sample: pairs where current > baseline, ties counting one half.
    u = (c1 * 0.5 * b1 + c2 * (b1 + 0.5 * b2) + c3 * (b1 + b2 + 0.5 * b3) + c4 * (b1 + b2 + b3 + 0.5 * b4)
         + c5 * (b1 + b2 + b3 + b4 + 0.5 * b5))
    total = n1 + n0
    t1, t2, t3, t4, t5 = c1 + b1, c2 + b2, c3 + b3, c4 + b4, c5 + b5
    ties = (t1 * t1 - 1) * t1 + (t2 * t2 - 1) * t2 + (t3 * t3 - 1) * t3 + (t4 * t4 - 1) * t4 + (t5 * t5 - 1) * t5
    variance = n1 * n0 / 12 * ((total + 1) - ties / (total * (total - 1)))
    standard_error = math.sqrt(var1 / n1 + var0 / n0)
    effect = mean1 - mean0
    low, high = effect - Z95 * standard_error, effect + Z95 * standard_error
    if variance <= 0:
        return TestResult(effect, 1.0 if effect >= 0 else 0.0, low, high)
    # Continuity correction of one half towards "no drop".
    z = (u - n1 * n0 / 2 + 0.5) / math.sqrt(variance)
    return TestResult(effect, normal_sf(-z), low, high)


_EXACT_TOTAL = 200_000
"""Up to this many scores in a test, every integer of ``mann_whitney_drop`` (the tie sum grows as the cube of the
total) stays below 2**53, so float64 holds it exactly and the array arithmetic equals Python's; larger tests go
through the scalar function."""


def mann_whitney_drops(current: Sequence[Sequence[int]], baseline: Sequence[Sequence[int]]
                       ) -> tuple[list[TestResult], list[float]]:
    """``mann_whitney_drop`` of every pair (current[i], baseline[i]), and the baseline mean scores, at once.

    Same results as the scalar function, bit for bit: each line below is its line, operation for operation, on
    int64 (exact) and float64 (IEEE, rounded as Python rounds). Pairs it cannot do exactly (an empty side, or more
    than ``_EXACT_TOTAL`` scores) are left to the scalar function."""
    if not current:
        return [], []
    # Flattened first: numpy reads one flat list of ints twice as fast as a list of short lists.
    c = np.array(list(chain.from_iterable(current)), dtype=np.int64).reshape(-1, 5)
    b = np.array(list(chain.from_iterable(baseline)), dtype=np.int64).reshape(-1, 5)
    c1, c2, c3, c4, c5 = c.T
    b1, b2, b3, b4, b5 = b.T
    n1 = c1 + c2 + c3 + c4 + c5
    n0 = b1 + b2 + b3 + b4 + b5
    total = n1 + n0
    exact = (n1 > 0) & (n0 > 0) & (total <= _EXACT_TOTAL)
    # Rows left to the scalar function get harmless values here (their results are replaced below).
    n1 = np.where(exact, n1, 1)
    n0 = np.where(exact, n0, 1)
    total = np.where(exact, total, 2)
    mean1 = (c1 + 2 * c2 + 3 * c3 + 4 * c4 + 5 * c5) / n1
    mean0 = (b1 + 2 * b2 + 3 * b3 + 4 * b4 + 5 * b5) / n0
    # Python's max(0.0, v) is v only when v > 0.0.
    var1 = (c1 + 4 * c2 + 9 * c3 + 16 * c4 + 25 * c5 - n1 * mean1 * mean1) / np.maximum(1, n1 - 1)
    var1 = np.where(var1 > 0.0, var1, 0.0)
    var0 = (b1 + 4 * b2 + 9 * b3 + 16 * b4 + 25 * b5 - n0 * mean0 * mean0) / np.maximum(1, n0 - 1)
    var0 = np.where(var0 > 0.0, var0, 0.0)
    u = (c1 * 0.5 * b1 + c2 * (b1 + 0.5 * b2) + c3 * (b1 + b2 + 0.5 * b3) + c4 * (b1 + b2 + b3 + 0.5 * b4)
         + c5 * (b1 + b2 + b3 + b4 + 0.5 * b5))
    t1, t2, t3, t4, t5 = c1 + b1, c2 + b2, c3 + b3, c4 + b4, c5 + b5
    ties = (t1 * t1 - 1) * t1 + (t2 * t2 - 1) * t2 + (t3 * t3 - 1) * t3 + (t4 * t4 - 1) * t4 + (t5 * t5 - 1) * t5
    variance = n1 * n0 / 12 * ((total + 1) - ties / (total * (total - 1)))
    standard_error = np.sqrt(var1 / n1 + var0 / n0)
    effect = mean1 - mean0
    low, high = effect - Z95 * standard_error, effect + Z95 * standard_error
    positive = variance > 0
    z = (u - n1 * n0 / 2 + 0.5) / np.sqrt(np.where(positive, variance, 1.0))
    tests = _test_results(effect, -z, positive, low, high)
    means = mean0.tolist()
    if not exact.all():
        for index in np.flatnonzero(~exact).tolist():
            tests[index] = mann_whitney_drop(current[index], baseline[index])
            b_counts = baseline[index]
            means[index] = sum((s + 1) * n for s, n in enumerate(b_counts)) / sum(b_counts)
    return tests, means


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Adjusted p-values (q-values): reject where adjusted <= q keeps the expected false discovery rate <= q.

    q of the i-th smallest p is min over k >= i of p_(k) * m / k, capped at 1; as arrays (a cycle adjusts tens of
    thousands), with the ties of p in their given order, as a stable sort keeps them."""
    m = len(p_values)
    if m == 0:
        return []
    p = np.array(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    running = np.minimum.accumulate(scaled[::-1])[::-1]
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, running)
    return list(adjusted.tolist())
