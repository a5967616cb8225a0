"""How well the judge agrees with people, on conversations they labelled: the statistics behind ``rubric-monitor
calibrate`` (``monitor.cli.calibrate``) and the drift canaries (``monitor.trust.canary``), overall and per
dimension:

- pass/fail: accuracy, Cohen's κ, the 2×2 confusion matrix (rows: people, columns: judge);
- the overall score (0 to 1) against the labelled score (or 1/0 for pass/fail): Spearman's ρ, and the mean
  score shift (judge - labelled; without labelled scores, the difference of the pass rates);
- the pass threshold on the judge's score that best separates labelled passes from fails (highest balanced
  accuracy, ties to the lowest threshold), with its precision and recall for "pass";
- per dimension (weighted rubrics, labels with ``dimensions``): exact accuracy, Cohen's κ, quadratically
  weighted κ on the 1-5 scale, Spearman's ρ, agreement within ±1, and the 5×5 confusion matrix.

A statistic that is undefined on the data (κ when both raters use a single category, ρ of a constant) is
``None`` (JSON ``null``), never a made-up number. Labels are JSON lines (or one JSON list) of
``{"id": ..., "passed": true|false, "score": 0..1, "dimensions": {"<id>": 1..5}}``; ``passed`` is required,
the rest optional (other fields, such as the ``rubric``, ``reviewer`` and ``note`` of ``rubric-monitor labels
export``, are ignored here), or CSV with columns ``id``, ``passed``, ``score`` and
``dim:<id>``. Drift canaries use the same labels and the same judging loop.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.errors import ConfigError
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.models import Conversation, EvaluationResult

LEVELS = (1, 2, 3, 4, 5)


# -- labels ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Label:
    """People's verdict on one conversation."""

    id: str
    passed: bool
    score: float | None = None
    dimensions: dict[str, int] = field(default_factory=dict)

    @property
    def agreed_score(self) -> float:
        """The labelled score, or 1/0 for a pass/fail label (for rank correlation)."""
        return self.score if self.score is not None else (1.0 if self.passed else 0.0)


def _passed(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("pass", "fail"):
        return value.strip().lower() == "pass"
    raise ConfigError(where, "passed", f"{value!r} is not true/false, 1/0 or pass/fail")


def parse_label(record: Any, where: str) -> Label:
    if not isinstance(record, dict):
        raise ConfigError(where, None, "each label must be a JSON object")
    identifier = record.get("id")
    if not isinstance(identifier, str) or not identifier:
        raise ConfigError(where, "id", "each label needs the conversation id as a non-empty string")
    if "passed" not in record:
        raise ConfigError(where, "passed", "each label needs 'passed'")
    score = record.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not 0.0 <= float(score) <= 1.0):
        raise ConfigError(where, "score", f"{score!r} is not a number from 0 to 1")
    dimensions = record.get("dimensions") or {}
    if not isinstance(dimensions, dict):
        raise ConfigError(where, "dimensions", "must map dimension ids to scores from 1 to 5")
    for key, value in dimensions.items():
        if isinstance(value, bool) or not isinstance(value, int) or value not in LEVELS:
            raise ConfigError(where, f"dimensions.{key}", f"{value!r} is not an integer from 1 to 5")
    return Label(identifier, _passed(record["passed"], where), None if score is None else float(score),
                 dict(dimensions))


def csv_records(text: str, where: str) -> list[tuple[str, dict[str, Any]]]:
    """Label records of a CSV file: columns ``id``, ``passed``, ``score`` and ``dim:<id>`` (1-5, ``na`` for not
    applicable, empty when not scored); any other column (``rubric``, ``reviewer``, ``note``) is kept as text."""
    records: list[tuple[str, dict[str, Any]]] = []
    for number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        record: dict[str, Any] = {}
        dimensions: dict[str, int] = {}
        not_applicable: list[str] = []
        for column, value in row.items():
            if column is None:
                raise ConfigError(f"{where}:{number}", None, "more fields than the header names")
            value = (value or "").strip()
            if column.startswith("dim:"):
                if value.lower() == "na":
                    not_applicable.append(column[4:])
                elif value:
                    if not value.isdigit():
                        raise ConfigError(f"{where}:{number}", column, f"{value!r} is not 1-5 or na")
                    dimensions[column[4:]] = int(value)
            elif column == "score":
                try:
                    record["score"] = float(value) if value else None
                except ValueError:
                    raise ConfigError(f"{where}:{number}", "score", f"{value!r} is not a number") from None
            elif value or column in ("id", "passed"):
                record[column] = value
        record["dimensions"] = dimensions
        if not_applicable:
            record["not_applicable"] = not_applicable
        records.append((f"{where}:{number}", record))
    return records


def label_records(path: Path) -> list[tuple[str, Any]]:
    """(where, record) of every label in a JSON lines, JSON list or CSV (``.csv``) file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ConfigError(str(path), None, "not UTF-8 text") from None
    if path.suffix.lower() == ".csv":
        return csv_records(text, str(path))
    records: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        try:
            records = [(f"{path}[{i}]", r) for i, r in enumerate(json.loads(text))]
        except json.JSONDecodeError as exc:
            raise ConfigError(str(path), None, f"not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append((f"{path}:{number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{number}", None, f"not valid JSON: {exc.msg}") from exc
    return records


def read_labels(path: Path) -> dict[str, Label]:
    """Labels by conversation id, from JSON lines, one JSON list or CSV; errors name the file, line and field."""
    labels: dict[str, Label] = {}
    for where, record in label_records(path):
        label = parse_label(record, where)
        if label.id in labels:
            raise ConfigError(where, "id", f"conversation {label.id!r} is labelled twice")
        labels[label.id] = label
    return labels


# -- statistics (no third-party dependency: every formula is the textbook one) -----------------------------------

def confusion(pairs: Sequence[tuple[Any, Any]], categories: Sequence[Any]) -> list[list[int]]:
    """Counts of (first rater, second rater): rows are the first rater's category, columns the second's."""
    index = {c: i for i, c in enumerate(categories)}
    matrix = [[0] * len(categories) for _ in categories]
    for a, b in pairs:
        matrix[index[a]][index[b]] += 1
    return matrix


def cohen_kappa(matrix: Sequence[Sequence[int]], weighted: bool = False) -> float | None:
    """Cohen's κ of a confusion matrix; ``weighted``: quadratic weights (i - j)² / (k - 1)². None when
    undefined (chance agreement is already perfect)."""
    k = len(matrix)
    n = sum(map(sum, matrix))
    if n == 0:
        return None
    rows = [sum(r) for r in matrix]
    cols = [sum(matrix[i][j] for i in range(k)) for j in range(k)]

    def weight(i: int, j: int) -> float:
        if weighted:
            return (i - j) ** 2 / (k - 1) ** 2
        return 0.0 if i == j else 1.0

    observed = sum(weight(i, j) * matrix[i][j] for i in range(k) for j in range(k)) / n
    expected = sum(weight(i, j) * rows[i] * cols[j] for i in range(k) for j in range(k)) / (n * n)
    if expected == 0:
        return None
    return 1.0 - observed / expected


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson's correlation of the ranks (ties averaged). None for fewer than two pairs or a
    constant series."""
    if len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


@dataclass(frozen=True)
class Threshold:
    threshold: float
    balanced_accuracy: float
    accuracy: float
    precision: float | None
    recall: float | None


def best_threshold(scores: Sequence[float], passed: Sequence[bool]) -> Threshold | None:
    """The threshold t (judged pass when score >= t) among the judge's own scores that best separates the
    labelled passes from fails: highest balanced accuracy (mean of the pass and fail recalls, so a rare class
    counts), ties to the lowest t. None without both passes and fails."""
    positives = sum(passed)
    negatives = len(passed) - positives
    if not positives or not negatives:
        return None
    best: Threshold | None = None
    for t in sorted(set(scores)):
        tp = sum(1 for s, p in zip(scores, passed, strict=True) if s >= t and p)
        fp = sum(1 for s, p in zip(scores, passed, strict=True) if s >= t and not p)
        tn = negatives - fp
        balanced = (tp / positives + tn / negatives) / 2
        if best is None or balanced > best.balanced_accuracy:
            best = Threshold(t, balanced, (tp + tn) / len(passed), tp / (tp + fp) if tp + fp else None,
                             tp / positives)
    return best


# -- the report --------------------------------------------------------------------------------------------------

def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def dimension_agreement(pairs: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """People's 1-5 scores against the judge's, for one dimension."""
    matrix = confusion(pairs, LEVELS)
    n = len(pairs)
    return {
        "n": n,
        "accuracy": _round(sum(a == b for a, b in pairs) / n) if n else None,
        "within_one": _round(sum(abs(a - b) <= 1 for a, b in pairs) / n) if n else None,
        "kappa": _round(cohen_kappa(matrix)),
        "weighted_kappa": _round(cohen_kappa(matrix, weighted=True)),
        "spearman": _round(spearman([float(a) for a, _ in pairs], [float(b) for _, b in pairs])),
        "confusion": {"levels": list(LEVELS), "rows": "labelled", "columns": "judge", "matrix": matrix},
    }


def agreement(labels: dict[str, Label], results: dict[str, EvaluationResult]) -> dict[str, Any]:
    """The calibration report (see the module docstring) for conversations that are both labelled and judged."""
    scored = [(labels[i], r) for i, r in results.items() if i in labels and r.outcome != "unscored"]
    unscored = sorted(i for i, r in results.items() if i in labels and r.outcome == "unscored")
    overall_pairs = [(label.passed, result.passed) for label, result in scored]
    matrix = confusion(overall_pairs, (True, False))
    judge_scores = [result.score or 0.0 for _, result in scored]
    best = best_threshold(judge_scores, [label.passed for label, _ in scored])
    report: dict[str, Any] = {
        "labelled": len(labels),
        "judged": len(scored),
        "unscored": unscored,
        "not_found": sorted(set(labels) - set(results)),
        "overall": {
            "accuracy": _round(sum(a == b for a, b in overall_pairs) / len(scored)) if scored else None,
            "kappa": _round(cohen_kappa(matrix)),
            "spearman": _round(spearman(judge_scores, [label.agreed_score for label, _ in scored])),
            "confusion": {"labels": ["pass", "fail"], "rows": "labelled", "columns": "judge", "matrix": matrix},
            "mean_score_shift": _round(score_shift(scored)),
        },
        "best_threshold": None if best is None else {
            "threshold": _round(best.threshold), "balanced_accuracy": _round(best.balanced_accuracy),
            "accuracy": _round(best.accuracy), "precision": _round(best.precision), "recall": _round(best.recall),
        },
        "dimensions": {},
    }
    dimension_ids = sorted({d for label, _ in scored for d in label.dimensions})
    for dimension in dimension_ids:
        pairs = []
        for label, result in scored:
            judged = next((d for d in result.dimension_scores if d.id == dimension), None)
            if dimension in label.dimensions and judged is not None and judged.applicable and judged.score:
                pairs.append((label.dimensions[dimension], judged.score))
        report["dimensions"][dimension] = dimension_agreement(pairs)
    return report


def score_shift(scored: Sequence[tuple[Label, EvaluationResult]]) -> float | None:
    """How far the judge sits above (positive) or below people: the mean of (judge score - labelled score) over
    the labels that carry a score; without any, the judge's pass rate minus the labelled pass rate (a 0.9 is
    not a shift from a bare "pass")."""
    with_score = [(label.score, result.score or 0.0) for label, result in scored if label.score is not None]
    if with_score:
        return sum(judged - agreed for agreed, judged in with_score) / len(with_score)
    if not scored:
        return None
    return sum(float(result.passed) - float(label.passed) for label, result in scored) / len(scored)


# -- judging ------------------------------------------------------------------------------------------------------

async def judge_conversations(conversations: Sequence[Conversation], rubric: Any, evaluator: Evaluator,
                              context: EvaluationContext, concurrency: int,
                              keep_going: Callable[[], bool] = lambda: True) -> dict[str, EvaluationResult]:
    """One conversation-level verdict per conversation, ``concurrency`` at a time (the judge's own limiter
    still applies); once ``keep_going()`` is False (a spent budget) no new evaluation starts and the rest are
    left out. A ``JudgeError`` propagates: agreement measured on a judge that cannot be reached means nothing."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(conversation: Conversation) -> tuple[str, EvaluationResult] | None:
        async with gate:
            if not keep_going():
                return None
            results = await evaluator.evaluate(conversation, rubric, context)
        return conversation.id, results[-1]

    return dict(r for r in await asyncio.gather(*(one(c) for c in conversations)) if r is not None)
