"""Judge-human agreement from stored labels, per rubric and dimension, with sample sizes and 95% intervals.

Measures (the ``measure`` label of ``rubric_monitor_judge_agreement``):

- overall (``dimension=""``): ``pass_fail``, the share of labels whose pass/fail matches the judge's, and
  ``kappa``, Cohen's κ of the two;
- per dimension, on the pairs where both scored it (1-5): ``weighted_kappa`` (quadratic weights),
  ``within_one`` (the share within ±1) and ``exact``.

Shares carry a Wilson score interval; κ a percentile bootstrap interval (fixed seed: the same labels give the same
interval on every replica). The statistics are ``monitor.trust.agreement``'s, the ones ``calibrate`` reports. Only
labels of the uniform share estimate agreement without bias (``ReviewStore.labelled_verdicts``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from monitor.models import EvaluationResult
from monitor.review.store import StoredLabel
from monitor.trust.agreement import LEVELS, cohen_kappa, confusion

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 400
MEASURES = ("pass_fail", "kappa", "weighted_kappa", "within_one", "exact")


@dataclass(frozen=True)
class Measure:
    value: float | None
    lower: float | None
    upper: float | None
    n: int


@dataclass
class RubricAgreement:
    rubric: str
    measures: dict[tuple[str, str], Measure] = field(default_factory=dict)
    """(dimension, measure) → value; dimension "" is the overall verdict."""
    labels: dict[str, int] = field(default_factory=dict)
    """Pairs behind each dimension's measures (dimension "": pass/fail pairs)."""


def wilson(successes: int, n: int) -> tuple[float | None, float | None]:
    """The 95% Wilson score interval of a share (sound at 0, 1 and small n, unlike the normal one)."""
    if n == 0:
        return None, None
    p = successes / n
    denominator = 1 + Z95 ** 2 / n
    centre = (p + Z95 ** 2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(pairs: Sequence[tuple[object, object]], statistic: Callable[[Sequence[tuple[object, object]]],
                                                                          float | None],
              resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 20261202) -> tuple[float | None, float | None]:
    """The 2.5th and 97.5th percentiles of the statistic over resamples of the pairs (undefined ones dropped)."""
    if len(pairs) < 2:
        return None, None
    draw = random.Random(seed)
    values = sorted(v for v in (statistic(draw.choices(pairs, k=len(pairs))) for _ in range(resamples))
                    if v is not None)
    if not values:
        return None, None
    return values[int(0.025 * (len(values) - 1))], values[int(math.ceil(0.975 * (len(values) - 1)))]


def _share(hits: int, n: int) -> Measure:
    lower, upper = wilson(hits, n)
    return Measure(hits / n if n else None, lower, upper, n)


def _kappa(pairs: Sequence[tuple[object, object]], categories: Sequence[object], weighted: bool) -> Measure:
    def statistic(sample: Sequence[tuple[object, object]]) -> float | None:
        return cohen_kappa(confusion(sample, categories), weighted=weighted)

    lower, upper = bootstrap(pairs, statistic)
    return Measure(statistic(pairs), lower, upper, len(pairs))


def agreement(labelled: Sequence[tuple[StoredLabel, EvaluationResult]]) -> dict[str, RubricAgreement]:
    """Per rubric: the measures of the module docstring over every (label, verdict) pair given."""
    by_rubric: dict[str, list[tuple[StoredLabel, EvaluationResult]]] = {}
    for label, result in labelled:
        if result.outcome != "unscored":
            by_rubric.setdefault(label.rubric, []).append((label, result))
    report: dict[str, RubricAgreement] = {}
    for rubric, pairs in sorted(by_rubric.items()):
        found = RubricAgreement(rubric)
        verdicts = [(label.passed, result.passed) for label, result in pairs]
        found.measures[("", "pass_fail")] = _share(sum(a == b for a, b in verdicts), len(verdicts))
        found.measures[("", "kappa")] = _kappa(verdicts, (True, False), weighted=False)
        found.labels[""] = len(verdicts)
        dimensions = sorted({d for label, _ in pairs for d, v in label.dimensions.items() if v is not None})
        for dimension in dimensions:
            scores: list[tuple[int, int]] = []
            for label, result in pairs:
                person = label.dimensions.get(dimension)
                judged = next((d for d in result.dimension_scores if d.id == dimension), None)
                if person is not None and judged is not None and judged.applicable and judged.score:
                    scores.append((person, judged.score))
            if not scores:
                continue
            found.measures[(dimension, "weighted_kappa")] = _kappa(scores, LEVELS, weighted=True)
            found.measures[(dimension, "within_one")] = _share(sum(abs(a - b) <= 1 for a, b in scores), len(scores))
            found.measures[(dimension, "exact")] = _share(sum(a == b for a, b in scores), len(scores))
            found.labels[dimension] = len(scores)
        report[rubric] = found
    return report
