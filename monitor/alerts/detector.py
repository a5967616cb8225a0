"""The regression detector: pure functions from counts of stored results to verdicts.

Input: for one window (say the last hour), per (rubric, agent, judge configuration, agent version), the counts of
the **current** segment (inside the window) and of the **baseline** segment (the trailing period before it). A
judge configuration is (rubric version, judge model, prompt version): results are only ever compared within one
configuration, so a new judge model, prompt template or rubric version starts a new baseline (and is reported as
an ``Annotation``) instead of reading as a regression.

For each (rubric, agent) the newest configuration is tested against two baselines: ``trailing`` (the same
configuration before the window) and, when spans carry an agent version, ``previous_version`` (the version that ran
before the current one). Pass rates use a one-sided two-proportion z-test with a Newcombe interval; dimension
scores (1-5, ordinal) a one-sided Mann-Whitney U test with the mean difference as the effect. Every test of the
cycle goes through Benjamini-Hochberg at ``fdr_q``; a verdict is a regression only when it is significant **and**
the drop is at least the minimum effect. Too few results on either side is ``no_verdict``: never an alert and
never a recovery. A series whose results cannot be trusted (too many unscored, judge errors, source behind) is
``cannot_judge``, which also neither fires nor resolves.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from monitor.alerts.stats import TestResult, benjamini_hochberg, mann_whitney_drops, two_proportion_drops

Kind = Literal["pass_rate", "dimension_mean", "slo_burn"]
"""``slo_burn``: an SLO alert (``monitor.slo.service``), which shares the lifecycle of the regression alerts."""
Baseline = Literal["trailing", "previous_version"]
Status = Literal["regression", "ok", "no_verdict", "cannot_judge"]
BASELINES: tuple[Baseline, ...] = ("trailing", "previous_version")
CANNOT_JUDGE_REASONS = ("unscored", "judge_errors", "source_behind", "judge_unavailable", "judge_drift")


@dataclass(frozen=True, order=True)
class JudgeConfig:
    """What must be equal for two results to be comparable."""

    rubric_version: str
    judge_model: str
    prompt_version: str

    def describe(self) -> str:
        return f"rubric version {self.rubric_version}, judge {self.judge_model}, prompt {self.prompt_version}"


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    unscored: int = 0
    judge_errors: int = 0
    """Unscored because the judge could not be reached (a subset of ``unscored``)."""
    first_ts: float = float("inf")
    last_ts: float = float("-inf")
    dimensions: dict[str, list[int]] = field(default_factory=dict)
    """Per dimension, how many applicable scores were 1, 2, 3, 4, 5 (index 0 is score 1)."""

    @property
    def scored(self) -> int:
        return self.passed + self.failed

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.unscored

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.unscored += other.unscored
        self.judge_errors += other.judge_errors
        self.first_ts = min(self.first_ts, other.first_ts)
        self.last_ts = max(self.last_ts, other.last_ts)
        for dimension, counts in other.dimensions.items():
            mine = self.dimensions.setdefault(dimension, [0, 0, 0, 0, 0])
            for i, c in enumerate(counts):
                mine[i] += c


@dataclass(frozen=True)
class SeriesCounts:
    """Counts of one (rubric, agent, judge configuration, agent version) in one window."""

    rubric: str
    agent: str
    config: JudgeConfig
    agent_version: str | None
    current: Counts
    baseline: Counts


@dataclass(frozen=True)
class DetectorSettings:
    min_samples: int = 30
    """Scored evaluations (or dimension scores) needed in the current window and in the baseline for a verdict."""
    min_effect_pass_rate: float = 0.05
    min_effect_dimension: float = 0.25
    fdr_q: float = 0.05
    max_unscored_share: float = 0.2
    max_judge_error_share: float = 0.1
    min_total_for_cannot_judge: int = 10
    """Below this many evaluations in the window, shares are too noisy to call the judge unhealthy."""


class SeriesKey(NamedTuple):
    """What one alert is about. A tuple: tens of thousands are made per cycle."""

    rubric: str
    agent: str
    kind: Kind
    dimension: str = ""
    """Empty for pass_rate."""

    @property
    def id(self) -> str:
        return "|".join((self.rubric, self.agent, self.kind, self.dimension))


class Attribution(NamedTuple):
    dimension: str
    effect: float
    current_mean: float
    baseline_mean: float


@dataclass(slots=True)
class Verdict:
    key: SeriesKey
    baseline: Baseline
    window: str
    status: Status
    config: JudgeConfig | None = None
    current_n: int = 0
    baseline_n: int = 0
    current_value: float | None = None
    baseline_value: float | None = None
    test: TestResult | None = None
    q_value: float | None = None
    reasons: tuple[str, ...] = ()
    """Why ``cannot_judge`` or ``no_verdict``."""
    agent_version: str | None = None
    baseline_agent_version: str | None = None
    attribution: tuple[Attribution, ...] = ()
    """For pass-rate verdicts: the dimensions that moved most, most negative first."""
    window_start_ts: float = 0.0

    @property
    def effect(self) -> float | None:
        return None if self.test is None else self.test.effect


@dataclass(frozen=True)
class Annotation:
    """The judge configuration of a series changed: a new baseline starts."""

    rubric: str
    agent: str
    previous: JudgeConfig
    current: JudgeConfig

    @property
    def key(self) -> str:
        return "|".join((self.rubric, self.agent, *_config_tuple(self.previous), *_config_tuple(self.current)))

    @property
    def changes(self) -> list[str]:
        out = []
        for name, before, after in zip(("rubric version", "judge model", "prompt version"),
                                       _config_tuple(self.previous), _config_tuple(self.current), strict=True):
            if before != after:
                out.append(f"{name} {before} → {after}")
        return out


def _config_tuple(config: JudgeConfig) -> tuple[str, str, str]:
    return (config.rubric_version, config.judge_model, config.prompt_version)


@dataclass
class Detection:
    verdicts: list[Verdict]
    annotations: list[Annotation]
    cannot_judge: dict[tuple[str, str], set[str]]
    """Per (rubric, agent) seen in any window, the reasons it cannot be judged (empty: it can)."""

    def by_key(self) -> dict[SeriesKey, Verdict]:
        """One verdict per alert key: a regression on any baseline or window wins; then ok; then the rest."""
        rank = {"regression": 0, "cannot_judge": 1, "ok": 2, "no_verdict": 3}
        best: dict[SeriesKey, Verdict] = {}
        for verdict in self.verdicts:
            held = best.get(verdict.key)
            if held is None or (rank[verdict.status], _q(verdict)) < (rank[held.status], _q(held)):
                best[verdict.key] = verdict
        return best

    def per_baseline(self) -> dict[tuple[SeriesKey, Baseline], Verdict]:
        """One verdict per metric series (key, baseline): the window with the strongest evidence."""
        rank = {"regression": 0, "ok": 1, "cannot_judge": 2, "no_verdict": 3}
        best: dict[tuple[SeriesKey, Baseline], Verdict] = {}
        for verdict in self.verdicts:
            slot = (verdict.key, verdict.baseline)
            held = best.get(slot)
            if held is None or (rank[verdict.status], _q(verdict)) < (rank[held.status], _q(held)):
                best[slot] = verdict
        return best


def _q(verdict: Verdict) -> float:
    return 1.0 if verdict.q_value is None else verdict.q_value


def detect(windows: Sequence[tuple[str, Sequence[SeriesCounts]]], settings: DetectorSettings,
           global_reasons: Iterable[str] = (), rubric_reasons: Mapping[str, Iterable[str]] | None = None) -> Detection:
    """Verdicts for every series of every window; ``global_reasons`` (source behind, judge unavailable) make
    every series ``cannot_judge``, ``rubric_reasons`` (a drifting judge) every series of that rubric."""
    with without_cyclic_gc():
        return _detect(windows, settings, global_reasons, rubric_reasons)


@contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """Python's cycle collector paused (reference counting still frees everything): a cycle allocates a few
    hundred thousand objects, none of them in a reference cycle, and the collector's passes over that growing heap
    took a third of the detection's time. Re-enabled, if it was, even on an exception."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _detect(windows: Sequence[tuple[str, Sequence[SeriesCounts]]], settings: DetectorSettings,
            global_reasons: Iterable[str], rubric_reasons: Mapping[str, Iterable[str]] | None) -> Detection:
    cycle = _Cycle(settings)
    annotations: dict[str, Annotation] = {}
    cannot_judge: dict[tuple[str, str], set[str]] = {}
    shared = set(global_reasons)
    for window, series in windows:
        grouped: dict[tuple[str, str], list[SeriesCounts]] = defaultdict(list)
        for item in series:
            grouped[(item.rubric, item.agent)].append(item)
        for (rubric, agent), items in sorted(grouped.items()):
            reasons = shared | set((rubric_reasons or {}).get(rubric, ())) | _cannot_judge_reasons(items, settings)
            cannot_judge.setdefault((rubric, agent), set()).update(reasons)
            config = _newest_config(items)
            annotation = _annotation(rubric, agent, items, config)
            if annotation is not None:
                annotations[annotation.key] = annotation
            _series_tests(cycle, window, rubric, agent, items, config, tuple(sorted(reasons)))
    cycle.judge()
    return Detection(cycle.verdicts, sorted(annotations.values(), key=lambda a: a.key), cannot_judge)


class _Cycle:
    """The verdicts of one detection as they are made, and what is left to compute once they all are: the tests
    (run together as arrays: ``two_proportion_drops`` for pass rates, ``mann_whitney_drops`` for the tens of
    thousands of dimensions), the attribution of pass-rate verdicts (from their dimensions' results), and the false
    discovery control over every test."""

    def __init__(self, settings: DetectorSettings) -> None:
        self.settings = settings
        self.verdicts: list[Verdict] = []
        self.pass_rates: list[Verdict] = []
        """Pass-rate verdicts with a test to run; ``pass_rate_counts`` their (x1, n1, x0, n0)."""
        self.pass_rate_counts: list[tuple[int, int, int, int]] = []
        self.pass_rate_judged: list[bool] = []
        """Per ``pass_rates``: whether it enters the false discovery control."""
        self.tested: list[Verdict] = []
        """Dimension verdicts with a test to run (those of series that cannot be judged too: their values show)."""
        self.judged: list[bool] = []
        """Per ``tested``: whether it enters the false discovery control."""
        self.current: list[Sequence[int]] = []
        self.baseline: list[Sequence[int]] = []
        self.attributions: list[tuple[Verdict, list[Verdict]]] = []
        self.dimension_keys: dict[tuple[str, str], tuple[list[str], list[SeriesKey]]] = {}
        """Per (rubric, agent): its sorted dimensions and their keys, made once for every window and baseline."""

    def judge(self) -> None:
        settings = self.settings
        pass_rate_tests = two_proportion_drops(self.pass_rate_counts)
        tests, baseline_means = mann_whitney_drops(self.current, self.baseline)
        pass_rate_p = [t.p_value for t, judged in zip(pass_rate_tests, self.pass_rate_judged, strict=True) if judged]
        dimension_p = [t.p_value for t, judged in zip(tests, self.judged, strict=True) if judged]
        # The order of the p-values does not change a q-value (ties get the same one): pass rates, then dimensions.
        adjusted = benjamini_hochberg(pass_rate_p + dimension_p)
        q_values = iter(adjusted)
        for verdict, test, judged in zip(self.pass_rates, pass_rate_tests, self.pass_rate_judged, strict=True):
            verdict.test = test
            if judged:
                verdict.q_value = q = next(q_values)
                significant = q <= settings.fdr_q and test.effect <= -settings.min_effect_pass_rate
                verdict.status = "regression" if significant else "ok"
        fdr_q, dropped_by = settings.fdr_q, -settings.min_effect_dimension  # a regression's effect is at most this
        for verdict, test, baseline, judged in zip(self.tested, tests, baseline_means, self.judged, strict=True):
            verdict.test = test
            verdict.baseline_value = baseline
            verdict.current_value = baseline + test.effect
            if judged:
                verdict.q_value = q = next(q_values)
                verdict.status = "regression" if q <= fdr_q and test.effect <= dropped_by else "ok"
        for pass_rate, dimensions in self.attributions:
            pass_rate.attribution = _attribution(dimensions)


def _cannot_judge_reasons(items: Sequence[SeriesCounts], settings: DetectorSettings) -> set[str]:
    """Over the current window, every configuration together: the judge's health is not a property of one."""
    total = sum(i.current.total for i in items)
    reasons: set[str] = set()
    if total < settings.min_total_for_cannot_judge:
        return reasons
    if sum(i.current.unscored for i in items) / total > settings.max_unscored_share:
        reasons.add("unscored")
    if sum(i.current.judge_errors for i in items) / total > settings.max_judge_error_share:
        reasons.add("judge_errors")
    return reasons


def _newest_config(items: Sequence[SeriesCounts]) -> JudgeConfig | None:
    """The configuration of the most recent result in the current window."""
    if len(items) == 1:  # the usual case: one configuration, one agent version
        return items[0].config if items[0].current.total else None
    live = [i for i in items if i.current.total]
    if not live:
        return None
    return max(live, key=lambda i: (i.current.last_ts, i.config)).config


def _annotation(rubric: str, agent: str, items: Sequence[SeriesCounts], newest: JudgeConfig | None
                ) -> Annotation | None:
    if newest is None or len(items) == 1:
        return None  # nothing in the window, or nothing else to compare with
    last_seen: dict[JudgeConfig, float] = {}
    for item in items:
        if item.config != newest:
            seen = max(item.current.last_ts, item.baseline.last_ts)
            last_seen[item.config] = max(last_seen.get(item.config, float("-inf")), seen)
    if not last_seen:
        return None
    previous = max(last_seen, key=lambda c: (last_seen[c], c))
    return Annotation(rubric, agent, previous, newest)


def _series_tests(cycle: _Cycle, window: str, rubric: str, agent: str, items: Sequence[SeriesCounts],
                  config: JudgeConfig | None, why: tuple[str, ...]) -> None:
    """The verdicts of one (rubric, agent) in one window, added to ``cycle`` (their tests are queued there);
    ``why``: the reasons it cannot be judged (empty: it can)."""
    settings = cycle.settings
    same = [i for i in items if i.config == config]
    if len(same) == 1:
        found = same[0].current.dimensions.keys() | same[0].baseline.dimensions.keys()
    else:
        found = {d for i in same for part in (i.current, i.baseline) for d in part.dimensions}
    dimensions, dimension_keys = cycle.dimension_keys.get((rubric, agent)) or ([], [])
    if len(dimensions) != len(found) or not found.issuperset(dimensions):
        dimensions = sorted(found)
        dimension_keys = [SeriesKey(rubric, agent, "dimension_mean", dimension) for dimension in dimensions]
        cycle.dimension_keys[(rubric, agent)] = (dimensions, dimension_keys)
    start = same[0].current.first_ts if len(same) == 1 else min((i.current.first_ts for i in same), default=0.0)
    pairs = _baseline_pairs(same)
    min_samples = settings.min_samples
    # Too few scores is "no verdict"; a series that cannot be judged says why instead, test or not.
    status: Status = "cannot_judge" if why else "no_verdict"
    too_few = why or (f"too few scores (need {min_samples} on each side)",)
    judged = not why
    verdicts, tested, queued, now_counts, before_counts = (
        cycle.verdicts, cycle.tested, cycle.judged, cycle.current, cycle.baseline)
    for baseline_name, now, before, version, previous in pairs:
        pass_rate = Verdict(SeriesKey(rubric, agent, "pass_rate"), baseline_name, window, "no_verdict", config,
                            agent_version=version, baseline_agent_version=previous, window_start_ts=start)
        tested_pass_rate = _pass_rate_verdict(pass_rate, now, before, settings)
        if tested_pass_rate:
            cycle.pass_rates.append(pass_rate)
            cycle.pass_rate_counts.append((now.passed, now.scored, before.passed, before.scored))
            cycle.pass_rate_judged.append(judged)
        if why:
            pass_rate.status, pass_rate.reasons = "cannot_judge", why
        verdicts.append(pass_rate)
        first = len(verdicts)
        now_dimensions, before_dimensions = now.dimensions, before.dimensions
        for key, dimension in zip(dimension_keys, dimensions, strict=True):
            counts_now = now_dimensions.get(dimension) or _NONE
            counts_before = before_dimensions.get(dimension) or _NONE
            n1, n0 = sum(counts_now), sum(counts_before)
            verdict = Verdict(key, baseline_name, window, status, config, n1, n0, None, None, None, None, why,
                              version, previous, (), start)
            verdicts.append(verdict)
            if n1 >= min_samples and n0 >= min_samples:
                tested.append(verdict)
                queued.append(judged)
                now_counts.append(counts_now)
                before_counts.append(counts_before)
            else:
                verdict.current_value, verdict.baseline_value = _mean(counts_now), _mean(counts_before)
                verdict.reasons = too_few
        if tested_pass_rate:
            cycle.attributions.append((pass_rate, verdicts[first:]))


def _baseline_pairs(same: Sequence[SeriesCounts]
                    ) -> list[tuple[Baseline, Counts, Counts, str | None, str | None]]:
    """(baseline, current counts, baseline counts, agent version, baseline agent version) to test, of the series
    of one configuration."""
    # Trailing: the same configuration, every agent version, before the window.
    if len(same) == 1:
        current, baseline = same[0].current, same[0].baseline  # the usual case: nothing to add up
    else:
        current, baseline = Counts(), Counts()
        for item in same:
            current.add(item.current)
            baseline.add(item.baseline)
    pairs: list[tuple[Baseline, Counts, Counts, str | None, str | None]] = [
        ("trailing", current, baseline, None, None)]
    # Previous version: the newest agent version in the window against the version that ran before it.
    versioned = [i for i in same if i.agent_version is not None]
    live = [i for i in versioned if i.current.total]
    if live:
        version = max(live, key=lambda i: i.current.last_ts).agent_version
        older: dict[str | None, float] = {}
        for item in versioned:
            if item.agent_version != version:
                seen = max(item.current.last_ts, item.baseline.last_ts)
                older[item.agent_version] = max(older.get(item.agent_version, float("-inf")), seen)
        if older:
            previous = max(older, key=lambda v: (older[v], v or ""))
            mine, theirs = Counts(), Counts()
            for item in versioned:
                if item.agent_version == version:
                    mine.add(item.current)
                elif item.agent_version == previous:
                    theirs.add(item.current)
                    theirs.add(item.baseline)
            pairs.append(("previous_version", mine, theirs, version, previous))
    return pairs


def _pass_rate_verdict(verdict: Verdict, now: Counts, before: Counts, settings: DetectorSettings) -> bool:
    """Fill in the sample sizes and values; whether there are enough for a test (run with the cycle's others)."""
    verdict.current_n, verdict.baseline_n = now.scored, before.scored
    if now.scored:
        verdict.current_value = now.passed / now.scored
    if before.scored:
        verdict.baseline_value = before.passed / before.scored
    if now.scored < settings.min_samples or before.scored < settings.min_samples:
        verdict.reasons = (f"too few evaluations (need {settings.min_samples} on each side)",)
        return False
    return True


_NONE = (0, 0, 0, 0, 0)


def _mean(counts: Sequence[int]) -> float | None:
    c1, c2, c3, c4, c5 = counts
    n = c1 + c2 + c3 + c4 + c5
    return None if n == 0 else (c1 + 2 * c2 + 3 * c3 + 4 * c4 + 5 * c5) / n


def _attribution(dimensions: Sequence[Verdict], top: int = 3) -> tuple[Attribution, ...]:
    """The dimensions whose mean fell most, from this cycle's dimension verdicts of the same series."""
    # Only falls can be named, and they sort before any rise: the rest are never made.
    moved = [Attribution(v.key.dimension, effect, v.current_value, v.baseline_value)
             for v in dimensions if v.current_value is not None and v.baseline_value is not None
             and (effect := v.current_value - v.baseline_value) < 0]
    moved.sort(key=lambda a: (a.effect, a.dimension))
    return tuple(moved[:top])
