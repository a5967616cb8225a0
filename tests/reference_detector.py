"""The detector as it was written first: one verdict at a time, each test by the scalar functions of
``monitor.alerts.stats`` and Benjamini-Hochberg as a plain loop. The reference that tests/test_alerts_fast_path.py
holds the fast detector (tests batched as arrays) to, verdict for verdict."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from monitor.alerts.detector import (
    Annotation,
    Attribution,
    Baseline,
    Counts,
    Detection,
    DetectorSettings,
    JudgeConfig,
    SeriesCounts,
    SeriesKey,
    Verdict,
)
from monitor.alerts.stats import mann_whitney_drop, two_proportion_drop


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        running = min(running, p_values[index] * m / rank)
        adjusted[index] = min(1.0, running)
    return adjusted


def detect(windows: Sequence[tuple[str, Sequence[SeriesCounts]]], settings: DetectorSettings,
           global_reasons: Iterable[str] = (), rubric_reasons: Mapping[str, Iterable[str]] | None = None) -> Detection:
    """Verdicts for every series of every window; ``global_reasons`` (source behind, judge unavailable) make
    every series ``cannot_judge``, ``rubric_reasons`` (a drifting judge) every series of that rubric."""
    verdicts: list[Verdict] = []
    candidates: list[Verdict] = []
    min_effects: list[float] = []
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
            annotation = _annotation(rubric, agent, items)
            if annotation is not None:
                annotations[annotation.key] = annotation
            for verdict, min_effect in _series_tests(window, rubric, agent, items, settings):
                if reasons:
                    verdict.status = "cannot_judge"
                    verdict.reasons = tuple(sorted(reasons))
                    verdicts.append(verdict)
                elif verdict.test is not None:
                    candidates.append(verdict)
                    min_effects.append(min_effect)
                    verdicts.append(verdict)
                else:
                    verdicts.append(verdict)
    adjusted = benjamini_hochberg([v.test.p_value for v in candidates if v.test is not None])
    for verdict, min_effect, q in zip(candidates, min_effects, adjusted, strict=True):
        assert verdict.test is not None
        verdict.q_value = q
        significant = q <= settings.fdr_q and verdict.test.effect <= -min_effect
        verdict.status = "regression" if significant else "ok"
    return Detection(verdicts, sorted(annotations.values(), key=lambda a: a.key), cannot_judge)


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
    live = [i for i in items if i.current.total]
    if not live:
        return None
    return max(live, key=lambda i: (i.current.last_ts, i.config)).config


def _annotation(rubric: str, agent: str, items: Sequence[SeriesCounts]) -> Annotation | None:
    newest = _newest_config(items)
    if newest is None:
        return None
    last_seen: dict[JudgeConfig, float] = {}
    for item in items:
        if item.config != newest:
            seen = max(item.current.last_ts, item.baseline.last_ts)
            last_seen[item.config] = max(last_seen.get(item.config, float("-inf")), seen)
    if not last_seen:
        return None
    previous = max(last_seen, key=lambda c: (last_seen[c], c))
    return Annotation(rubric, agent, previous, newest)


def _series_tests(window: str, rubric: str, agent: str, items: Sequence[SeriesCounts],
                  settings: DetectorSettings) -> Iterable[tuple[Verdict, float]]:
    config = _newest_config(items)
    same = [i for i in items if i.config == config]
    dimensions = sorted({d for i in same for part in (i.current, i.baseline) for d in part.dimensions})
    start = min((i.current.first_ts for i in same), default=0.0)
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
    for baseline_name, now, before, version, previous in pairs:

        def blank(key: SeriesKey, baseline: Baseline = baseline_name, agent_version: str | None = version,
                  baseline_agent_version: str | None = previous) -> Verdict:
            return Verdict(key=key, baseline=baseline, window=window, status="no_verdict", config=config,
                           agent_version=agent_version, baseline_agent_version=baseline_agent_version,
                           window_start_ts=start)

        dimension_verdicts = [
            _dimension_verdict(blank(SeriesKey(rubric, agent, "dimension_mean", dimension)),
                               now.dimensions.get(dimension), before.dimensions.get(dimension), settings)
            for dimension in dimensions]
        pass_rate = _pass_rate_verdict(blank(SeriesKey(rubric, agent, "pass_rate")), now, before, settings)
        if pass_rate.test is not None:
            pass_rate.attribution = _attribution(dimension_verdicts)
        yield pass_rate, settings.min_effect_pass_rate
        for verdict in dimension_verdicts:
            yield verdict, settings.min_effect_dimension


def _pass_rate_verdict(verdict: Verdict, now: Counts, before: Counts, settings: DetectorSettings) -> Verdict:
    verdict.current_n, verdict.baseline_n = now.scored, before.scored
    if now.scored:
        verdict.current_value = now.passed / now.scored
    if before.scored:
        verdict.baseline_value = before.passed / before.scored
    if now.scored < settings.min_samples or before.scored < settings.min_samples:
        verdict.reasons = (f"too few evaluations (need {settings.min_samples} on each side)",)
        return verdict
    verdict.test = two_proportion_drop(now.passed, now.scored, before.passed, before.scored)
    return verdict


def _dimension_verdict(verdict: Verdict, now: Sequence[int] | None, before: Sequence[int] | None,
                       settings: DetectorSettings) -> Verdict:
    now, before = now or _NONE, before or _NONE
    n1, n0 = sum(now), sum(before)
    verdict.current_n, verdict.baseline_n = n1, n0
    if n1 < settings.min_samples or n0 < settings.min_samples:
        verdict.current_value, verdict.baseline_value = _mean(now), _mean(before)
        verdict.reasons = (f"too few scores (need {settings.min_samples} on each side)",)
        return verdict
    verdict.test = test = mann_whitney_drop(now, before)
    verdict.baseline_value = baseline = _mean(before)
    verdict.current_value = None if baseline is None else baseline + test.effect
    return verdict


_NONE = (0, 0, 0, 0, 0)


def _mean(counts: Sequence[int]) -> float | None:
    c1, c2, c3, c4, c5 = counts
    n = c1 + c2 + c3 + c4 + c5
    return None if n == 0 else (c1 + 2 * c2 + 3 * c3 + 4 * c4 + 5 * c5) / n


def _attribution(dimensions: Sequence[Verdict], top: int = 3) -> tuple[Attribution, ...]:
    """The dimensions whose mean fell most, from this cycle's dimension verdicts of the same series."""
    moved = [Attribution(v.key.dimension, v.current_value - v.baseline_value, v.current_value, v.baseline_value)
             for v in dimensions if v.current_value is not None and v.baseline_value is not None]
    moved.sort(key=lambda a: (a.effect, a.dimension))
    return tuple(a for a in moved[:top] if a.effect < 0)
