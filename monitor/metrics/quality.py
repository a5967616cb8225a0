"""⑥ The quality metrics: counters counted as results are recorded, gauges over rolling windows, prepared once.

Counters (``evaluations``, ``score_sum``, ``dimension_scores`` by value, ``dimension_score_sum``) let Prometheus
compute any window with ``increase()``; they start at zero with the process, and every label set of a (rubric,
version, agent) is created at zero as soon as it is known (from the rollups at start, or its first result), so
rates and ratios exist from the first cycle. The windowed gauges come from the store's hourly rollups
(``monitor.rollups``). ``refresh`` (end of a cycle) renders them, in both text formats, once; scrapes serve
that state and never touch the store.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from monitor.metrics.rollups import AgentLabels, Window, WindowTotals
from monitor.models import EvaluationResult
from monitor.store.base import ResultStore

SCORES = ("1", "2", "3", "4", "5")
"""The values of a dimension score: label values of ``rubric_monitor_dimension_scores_total{score}``."""
OUTCOMES = ("pass", "fail", "unscored")
EXEMPLAR_LABEL = "trace_id"
"""The exemplar's label: the trace id of a recent evaluation (in App Insights, its ``operation_Id``)."""
GZIP_LEVEL = 1
"""Fast: the prepared state is compressed once per cycle; most of the gain of gzip is at level 1."""

TRIPLE = ("rubric", "rubric_version", "agent")


@dataclass(frozen=True)
class FamilySpec:
    """One metric family of the catalog: what ``docs/metrics.md`` lists."""

    name: str
    """Its name as scraped (counters with their ``_total``)."""
    type: str
    labels: tuple[str, ...]
    help: str

    @property
    def base(self) -> str:
        return self.name.removesuffix("_total") if self.type == "counter" else self.name


EVALUATIONS = FamilySpec(
    "rubric_monitor_evaluations_total", "counter", (*TRIPLE, "outcome"),
    "Evaluations recorded, by exclusive outcome: pass, fail (scored) or unscored (no verdict).")
SCORE_SUM = FamilySpec(
    "rubric_monitor_score_sum_total", "counter", TRIPLE,
    "Sum of the overall score (0 to 1) of scored evaluations; mean score over a window = "
    'increase(score_sum_total) / increase(evaluations_total{outcome=~"pass|fail"}).')
DIMENSION_SCORES = FamilySpec(
    "rubric_monitor_dimension_scores_total", "counter", (*TRIPLE, "dimension", "score"),
    "Applicable dimension scores of weighted rubrics, counted by value (score 1 to 5).")
DIMENSION_SCORE_SUM = FamilySpec(
    "rubric_monitor_dimension_score_sum_total", "counter", (*TRIPLE, "dimension"),
    "Sum of the applicable dimension scores (1 to 5); mean = increase(dimension_score_sum_total) / "
    "sum without(score) (increase(dimension_scores_total)).")
PASS_RATE = FamilySpec(
    "rubric_monitor_pass_rate", "gauge", (*TRIPLE, "window"),
    "Share of scored evaluations that passed over a rolling window (unscored ones are left out); a window of n "
    "hours covers its n last whole hours and the current one.")
SCORED = FamilySpec(
    "rubric_monitor_scored_evaluations", "gauge", (*TRIPLE, "window"),
    "Scored evaluations in the rolling window (the pass rate's sample size).")
DIMENSION_MEAN = FamilySpec(
    "rubric_monitor_dimension_mean", "gauge", (*TRIPLE, "dimension", "window"),
    "Mean score (1 to 5) of a dimension over a rolling window.")
QUALITY_FAMILIES = (EVALUATIONS, SCORE_SUM, DIMENSION_SCORES, DIMENSION_SCORE_SUM, PASS_RATE, SCORED,
                    DIMENSION_MEAN)
QUALITY_NAMES = frozenset(spec.base for spec in QUALITY_FAMILIES)
"""As the registry collects them (counters without ``_total``)."""


@dataclass(frozen=True)
class Rendered:
    """The quality families, rendered at the end of a cycle, in each format and encoding a scrape may ask for."""

    text: bytes = b""
    openmetrics: bytes = b""
    """Without its ``# EOF`` line: the exposition appends it after the daemon's own families."""
    text_gzip: bytes = field(default=b"")
    openmetrics_gzip: bytes = field(default=b"")


class PreparedCollector(Collector):
    """A collector of families rendered once per cycle (``rendered``, served as bytes by the exposition), parsed
    back on demand for ``registry.get_sample_value`` and ``generate_latest(registry)``."""

    def __init__(self) -> None:
        self._renderer = Renderer()
        self._parsed: list[Metric] | None = None
        self.rendered = Rendered()

    def _set_rendered(self, text: bytes, openmetrics: bytes) -> None:
        self.rendered = Rendered(text, openmetrics, gzip.compress(text, GZIP_LEVEL),
                                 gzip.compress(openmetrics, GZIP_LEVEL))
        self._parsed = None

    def collect(self) -> Iterable[Metric]:
        """The prepared families, parsed from the rendered text; nothing while the exposition renders the registry
        (it appends the prepared bytes itself)."""
        if SCRAPE_IN_PROGRESS.active:
            return []
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = list(text_string_to_metric_families(self.rendered.text.decode()))
        return list(parsed)


class QualityMetrics(PreparedCollector):
    """The quality counters and windowed gauges; a ``Collector`` yielding the state prepared by ``refresh``."""

    def __init__(self, windows: Sequence[Window], max_agents_per_rubric: int) -> None:
        super().__init__()
        self.agents = AgentLabels(max_agents_per_rubric)
        self.windows = WindowTotals(windows)
        self._lock = threading.Lock()
        self._evaluations: dict[tuple[str, ...], float] = {}
        self._score_sum: dict[tuple[str, ...], float] = {}
        self._dimension_scores: dict[tuple[str, ...], float] = {}
        self._dimension_sum: dict[tuple[str, ...], float] = {}
        self._exemplars: dict[tuple[str, tuple[str, ...]], str] = {}
        """Per counter series, the OpenMetrics exemplar of its latest increment, formatted when counted."""
        self._seeded = False

    # counting ----------------------------------------------------------------------------------------------

    def record(self, result: EvaluationResult) -> None:
        with self._lock:
            triple = (result.rubric, result.rubric_version, self.agents.label(result.rubric, result.agent))
            scores = [(d.id, d.score) for d in result.dimension_scores
                      if d.applicable and d.score is not None and result.outcome != "unscored"]
            self._create(triple, [dimension for dimension, _ in scores])
            trace_id = result.trace_ids[-1] if result.trace_ids else None
            at = result.evaluated_at.timestamp()
            self._count(EVALUATIONS, self._evaluations, (*triple, result.outcome), 1.0, trace_id, at)
            if result.outcome == "unscored" or result.score is None:
                return
            self._count(SCORE_SUM, self._score_sum, triple, result.score, trace_id, at)
            for dimension, score in scores:
                self._count(DIMENSION_SCORES, self._dimension_scores, (*triple, dimension, str(score)), 1.0,
                            trace_id, at)
                self._count(DIMENSION_SCORE_SUM, self._dimension_sum, (*triple, dimension), float(score),
                            trace_id, at)

    def _create(self, triple: tuple[str, str, str], dimensions: Iterable[str]) -> None:
        """Every label set of a (rubric, version, agent) and its dimensions, at zero until counted."""
        for outcome in OUTCOMES:
            self._evaluations.setdefault((*triple, outcome), 0.0)
        self._score_sum.setdefault(triple, 0.0)
        for dimension in dimensions:
            self._dimension_sum.setdefault((*triple, dimension), 0.0)
            for score in SCORES:
                self._dimension_scores.setdefault((*triple, dimension, score), 0.0)

    def _count(self, spec: FamilySpec, values: dict[tuple[str, ...], float], labels: tuple[str, ...],
               amount: float, trace_id: str | None, at: float) -> None:
        values[labels] = values.get(labels, 0.0) + amount
        if trace_id:
            # OpenMetrics allows 128 characters of exemplar labels; a trace id is 32 hex digits.
            self._exemplars[(spec.name, labels)] = (
                f' # {{{EXEMPLAR_LABEL}="{_escape(trace_id[:64])}"}} {_number(amount)} {at:.3f}')

    # end of cycle ------------------------------------------------------------------------------------------

    def refresh(self, store: ResultStore, now: datetime) -> None:
        """Bring the windows up to date from the rollups, then render every quality family once."""
        self.windows.refresh(store, now.timestamp())
        with self._lock:
            if not self._seeded:
                self._seed()
        self.prepare()

    def prepare(self) -> None:
        """Render without reading the store (a daemon whose store is down still serves its counters)."""
        with self._lock:  # copies, so that recording goes on while the copy is rendered
            counters = [(EVALUATIONS, dict(self._evaluations)), (SCORE_SUM, dict(self._score_sum)),
                        (DIMENSION_SCORES, dict(self._dimension_scores)),
                        (DIMENSION_SCORE_SUM, dict(self._dimension_sum))]
            exemplars = dict(self._exemplars)
            gauges = self._window_values()
        self._set_rendered(*self._renderer.render(counters, exemplars, gauges))

    def _seed(self) -> None:
        """At start: the agents of the longest window get their labels (busiest first), and every label set seen
        in it is created at zero."""
        longest = self.windows.longest
        if longest is None:
            self._seeded = True
            return
        rows = list(self.windows.sums(longest))
        busy: dict[tuple[str, str], float] = {}
        for (rubric, _, agent, dimension), sums in rows:
            if dimension == "":
                busy[(rubric, agent)] = busy.get((rubric, agent), 0) + sums[0] + sums[2]
        self.agents.seed(busy)
        dimensions: dict[tuple[str, str, str], list[str]] = {}
        for (rubric, version, agent, dimension), _ in rows:
            found = dimensions.setdefault((rubric, version, self.agents.label(rubric, agent)), [])
            if dimension:
                found.append(dimension)
        for triple, names in dimensions.items():
            self._create(triple, names)
        self._seeded = True

    def _window_values(self) -> list[tuple[FamilySpec, dict[tuple[str, ...], float]]]:
        pass_rate: dict[tuple[str, ...], float] = {}
        scored: dict[tuple[str, ...], float] = {}
        dimension_mean: dict[tuple[str, ...], float] = {}
        for window in self.windows.windows:
            # Agents beyond the limit share "other": their sums are added before any ratio is taken.
            merged: dict[tuple[str, str, str, str], list[float]] = {}
            for (rubric, version, agent, dimension), sums in self.windows.sums(window):
                entry = merged.setdefault((rubric, version, self.agents.label(rubric, agent), dimension),
                                          [0.0, 0.0, 0.0])
                entry[0] += sums[0]
                entry[1] += sums[1]
                entry[2] += sums[3]
            for (rubric, version, agent, dimension), (count, passed, total) in merged.items():
                if dimension:
                    if count > 0:
                        dimension_mean[(rubric, version, agent, dimension, window.name)] = total / count
                    continue
                scored[(rubric, version, agent, window.name)] = count
                if count > 0:
                    pass_rate[(rubric, version, agent, window.name)] = passed / count
        return [(PASS_RATE, pass_rate), (SCORED, scored), (DIMENSION_MEAN, dimension_mean)]

    @property
    def family_names(self) -> frozenset[str]:
        """What the exposition serves from ``rendered`` rather than collects."""
        return QUALITY_NAMES


class _ScrapeInProgress(threading.local):
    active = False


SCRAPE_IN_PROGRESS = _ScrapeInProgress()
"""Set by the exposition while it renders the registry's other collectors: the quality families are appended
pre-rendered, so collecting them again would double them (and cost the render it avoids)."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str, openmetrics: bool) -> str:
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n")
    return escaped.replace('"', '\\"') if openmetrics else escaped


def _number(value: float) -> str:
    return repr(float(value))


class Renderer:
    """The Prometheus text format (0.0.4) and OpenMetrics 1.0 of the quality families, written directly: the
    generic client formats a few microseconds per sample, which at 200,000 series is seconds per cycle. Each
    series' name and labels are formatted once and kept (the label sets are bounded: that is the point)."""

    def __init__(self) -> None:
        self._prefixes: dict[tuple[str, tuple[str, ...]], str] = {}

    def _prefix(self, name: str, names: tuple[str, ...], values: tuple[str, ...]) -> str:
        key = (name, values)
        prefix = self._prefixes.get(key)
        if prefix is None:
            labels = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))
            prefix = self._prefixes[key] = f"{name}{{{labels}}} "
        return prefix

    def render(self, counters: Iterable[tuple[FamilySpec, dict[tuple[str, ...], float]]],
               exemplars: dict[tuple[str, tuple[str, ...]], str],
               gauges: Iterable[tuple[FamilySpec, dict[tuple[str, ...], float]]]) -> tuple[bytes, bytes]:
        text: list[str] = []
        openmetrics: list[str] = []
        lines = 0
        prefixes = self._prefixes
        for spec, values in counters:
            name = spec.name
            text.append(f"# HELP {name} {_help(spec.help, False)}\n# TYPE {name} counter")
            openmetrics.append(f"# HELP {spec.base} {_help(spec.help, True)}\n# TYPE {spec.base} counter")
            for labels, value in values.items():
                line = (prefixes.get((name, labels)) or self._prefix(name, spec.labels, labels)) + repr(value)
                text.append(line)
                exemplar = exemplars.get((name, labels))
                openmetrics.append(line if exemplar is None else line + exemplar)
            lines += len(values)
        for spec, values in gauges:
            name = spec.name
            text.append(f"# HELP {name} {_help(spec.help, False)}\n# TYPE {name} gauge")
            openmetrics.append(f"# HELP {name} {_help(spec.help, True)}\n# TYPE {name} gauge")
            samples = [(prefixes.get((name, labels)) or self._prefix(name, spec.labels, labels)) + repr(value)
                       for labels, value in values.items()]
            text.extend(samples)
            openmetrics.extend(samples)
            lines += len(values)
        if len(prefixes) > 2 * lines + 10_000:
            prefixes.clear()  # series that went (old rubric versions, windows emptied) are forgotten
        return ("\n".join(text) + "\n").encode(), ("\n".join(openmetrics) + "\n").encode()
