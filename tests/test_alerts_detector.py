"""The detector's statistics on simulated windows: false alerts on pure noise stay within the configured rate, real
drops are found, tiny windows never alert, judge changes and unhealthy judges never read as regressions."""

from __future__ import annotations

import random

import pytest

from monitor.alerts.detector import Counts, DetectorSettings, JudgeConfig, SeriesCounts, detect
from monitor.alerts.lifecycle import AlertState, step
from monitor.alerts.stats import (
    benjamini_hochberg,
    mann_whitney_drop,
    mann_whitney_u,
    newcombe_interval,
    wilson_interval,
)

CONFIG = JudgeConfig("v1", "gpt-4.1", "1")
SETTINGS = DetectorSettings()


def simulate(rng: random.Random, n: int, pass_rate: float, dimension_means: dict[str, list[float]] | None = None,
             unscored: int = 0, ts: float = 0.0) -> Counts:
    """n scored evaluations; each dimension scored from its 1..5 probabilities."""
    passed = sum(rng.random() < pass_rate for _ in range(n))
    dims = {}
    for name, probabilities in (dimension_means or {}).items():
        counts = [0, 0, 0, 0, 0]
        for score in rng.choices(range(5), weights=probabilities, k=n):
            counts[score] += 1
        dims[name] = counts
    return Counts(passed=passed, failed=n - passed, unscored=unscored, first_ts=ts, last_ts=ts + 1, dimensions=dims)


GOOD = [0.02, 0.03, 0.10, 0.35, 0.50]
WORSE = [0.05, 0.08, 0.20, 0.37, 0.30]


def series(current: Counts, baseline: Counts, config: JudgeConfig = CONFIG, agent_version: str | None = None,
           agent: str = "agent") -> SeriesCounts:
    return SeriesCounts("rubric", agent, config, agent_version, current, baseline)


def test_interval_and_test_values_match_published_examples() -> None:
    # Newcombe (1998), Statistics in Medicine 17:873, table II example (56/70 vs 48/80): 0.0524 to 0.3339.
    low, high = newcombe_interval(56, 70, 48, 80)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)
    assert tuple(round(v, 4) for v in wilson_interval(81, 263)) == (0.2553, 0.3662)  # Wilson, as R's prop.test
    # Mann-Whitney by counts equals the pairwise definition.
    current, baseline = [3, 1, 0, 2, 0], [0, 1, 1, 2, 4]
    xs = [s + 1 for s, c in enumerate(current) for _ in range(c)]
    ys = [s + 1 for s, c in enumerate(baseline) for _ in range(c)]
    pairwise = sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)
    assert mann_whitney_u(current, baseline) == pairwise
    result = mann_whitney_drop(current, baseline)
    assert result.effect == pytest.approx(sum(xs) / len(xs) - sum(ys) / len(ys))
    assert result.p_value < 0.05
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])


def large(rng: random.Random, n: int, pass_rate: float, dimensions: dict[str, list[float]]) -> Counts:
    """A week-long baseline: its pass count drawn by the normal approximation (n draws per window are slow), its
    dimension counts at their expected values (their noise is negligible next to the window's)."""
    passed = min(n, max(0, round(rng.gauss(n * pass_rate, (n * pass_rate * (1 - pass_rate)) ** 0.5))))
    dims = {name: [round(n * p) for p in probabilities] for name, probabilities in dimensions.items()}
    return Counts(passed=passed, failed=n - passed, first_ts=0, last_ts=1, dimensions=dims)


@pytest.mark.parametrize(("current_n", "baseline_n"), [(30, 5040), (60, 420), (60, 10080), (200, 33600)])
def test_pure_noise_false_alerts_stay_within_the_configured_rate(current_n: int, baseline_n: int) -> None:
    """1,000 windows of pure noise per series (a pass rate and three dimensions, the same distribution on both
    sides): windows with any alert stay within the configured rate (fdr_q, 5 %)."""
    rng = random.Random(current_n + baseline_n)
    false_alerts = 0
    windows = 1000
    dims = {"accuracy": GOOD, "tone": GOOD, "policy": WORSE}
    for _ in range(windows):
        current = simulate(rng, current_n, 0.9, dims, ts=100)
        baseline = large(rng, baseline_n, 0.9, dims)
        detection = detect([("1h", [series(current, baseline)])], SETTINGS)
        false_alerts += any(v.status == "regression" for v in detection.verdicts)
    assert false_alerts <= SETTINGS.fdr_q * windows, false_alerts


def test_pure_noise_without_a_minimum_effect_still_within_the_rate() -> None:
    # The minimum effect helps; the test itself must also hold its level on its own.
    rng = random.Random(5)
    settings = DetectorSettings(min_effect_pass_rate=0.0, min_effect_dimension=0.0)
    alerts = 0
    for _ in range(1000):
        current = simulate(rng, 200, 0.8, {"accuracy": GOOD}, ts=100)
        baseline = simulate(rng, 1400, 0.8, {"accuracy": GOOD}, ts=0)
        alerts += any(v.status == "regression" for v in detect([("1h", [series(current, baseline)])],
                                                               settings).verdicts)
    # Two tests per window at q=0.05, one-sided: at most about 5 % of windows; 70 is 3 standard deviations above.
    assert alerts <= 70, alerts


@pytest.mark.parametrize("before", [0.9, 0.7])
def test_a_ten_point_drop_with_200_per_window_is_detected(before: float) -> None:
    rng = random.Random(7)
    found = 0
    for _ in range(200):
        current = simulate(rng, 200, before - 0.10, ts=100)
        baseline = simulate(rng, 1400, before, ts=0)
        verdicts = detect([("1h", [series(current, baseline)])], SETTINGS).verdicts
        found += any(v.status == "regression" and v.key.kind == "pass_rate" for v in verdicts)
    assert found >= 0.85 * 200, found


def test_fewer_than_the_minimum_never_alerts_even_on_a_total_collapse() -> None:
    current = Counts(passed=0, failed=SETTINGS.min_samples - 1, first_ts=100, last_ts=101,
                     dimensions={"accuracy": [SETTINGS.min_samples - 1, 0, 0, 0, 0]})
    baseline = Counts(passed=5000, failed=0, first_ts=0, last_ts=1, dimensions={"accuracy": [0, 0, 0, 0, 5000]})
    detection = detect([("1h", [series(current, baseline)])], SETTINGS)
    assert {v.status for v in detection.verdicts} == {"no_verdict"}
    assert all("too few" in v.reasons[0] for v in detection.verdicts)
    # And too small a baseline is no verdict too.
    detection = detect([("1h", [series(baseline, current)])], SETTINGS)
    assert {v.status for v in detection.verdicts} == {"no_verdict"}


def test_a_dimension_drop_is_found_and_attributed() -> None:
    rng = random.Random(3)
    current = simulate(rng, 300, 0.6, {"accuracy": WORSE, "tone": GOOD}, ts=100)
    baseline = simulate(rng, 2000, 0.85, {"accuracy": GOOD, "tone": GOOD}, ts=0)
    detection = detect([("1h", [series(current, baseline)])], SETTINGS)
    by_key = detection.by_key()
    statuses = {(k.kind, k.dimension): v.status for k, v in by_key.items()}
    assert statuses[("pass_rate", "")] == "regression"
    assert statuses[("dimension_mean", "accuracy")] == "regression"
    assert statuses[("dimension_mean", "tone")] == "ok"
    pass_rate = next(v for k, v in by_key.items() if k.kind == "pass_rate")
    assert pass_rate.attribution[0].dimension == "accuracy"
    assert pass_rate.test is not None and pass_rate.test.low < pass_rate.test.effect < pass_rate.test.high < 0


def test_a_judge_model_change_is_an_annotation_and_a_new_baseline_not_a_regression() -> None:
    rng = random.Random(9)
    old = series(simulate(rng, 100, 0.9, ts=100), simulate(rng, 2000, 0.9, ts=0))
    # The stricter new judge passes far fewer: compared with nothing yet, so no verdict.
    new_config = JudgeConfig("v1", "gpt-5", "1")
    new = series(simulate(rng, 100, 0.5, ts=200), Counts(), config=new_config)
    detection = detect([("1h", [old, new])], SETTINGS)
    assert [a.changes for a in detection.annotations] == [["judge model gpt-4.1 → gpt-5"]]
    assert all(v.config == new_config for v in detection.verdicts)
    assert {v.status for v in detection.verdicts} == {"no_verdict"}


def test_previous_agent_version_is_a_baseline() -> None:
    rng = random.Random(4)
    v1 = series(simulate(rng, 10, 0.9, ts=100), simulate(rng, 800, 0.9, ts=0), agent_version="1.4.0")
    v2 = series(simulate(rng, 300, 0.7, ts=200), Counts(), agent_version="1.5.0")
    detection = detect([("1h", [v1, v2])], SETTINGS)
    release = [v for v in detection.verdicts if v.baseline == "previous_version"]
    assert release and release[0].status == "regression"
    assert (release[0].agent_version, release[0].baseline_agent_version) == ("1.5.0", "1.4.0")


def test_unscored_or_judge_errors_or_a_late_source_cannot_be_judged() -> None:
    rng = random.Random(1)
    current = simulate(rng, 200, 0.5, ts=100, unscored=100)
    baseline = simulate(rng, 2000, 0.9, ts=0)
    detection = detect([("1h", [series(current, baseline)])], SETTINGS)
    assert {v.status for v in detection.verdicts} == {"cannot_judge"}
    assert detection.cannot_judge[("rubric", "agent")] == {"unscored"}
    healthy = simulate(rng, 200, 0.5, ts=100)
    detection = detect([("1h", [series(healthy, baseline)])], SETTINGS, global_reasons=["source_behind"])
    assert {v.status for v in detection.verdicts} == {"cannot_judge"}
    # Neither fires nor resolves: a firing alert stays firing, an inactive one stays inactive.
    firing = AlertState(key="rubric|agent|pass_rate|", rubric="rubric", agent="agent", kind="pass_rate",
                        dimension="", state="firing", firing_since=0.0, last_notified=0.0)
    changed, transitions = step({firing.key: firing}, detection.by_key(), 10_000.0, 0.0, 1e9)
    assert transitions == [] and all(s.state == "firing" for s in changed.values())


def test_lifecycle_pending_firing_renotify_resolved() -> None:
    rng = random.Random(2)
    bad = detect([("1h", [series(simulate(rng, 300, 0.6, ts=100), simulate(rng, 2000, 0.9, ts=0))])], SETTINGS)
    good = detect([("1h", [series(simulate(rng, 300, 0.9, ts=100), simulate(rng, 2000, 0.9, ts=0))])], SETTINGS)
    few = detect([("1h", [series(simulate(rng, 5, 0.0, ts=100), simulate(rng, 2000, 0.9, ts=0))])], SETTINGS)
    states: dict[str, AlertState] = {}

    def run(detection_verdicts: object, now: float) -> list[str]:
        changed, transitions = step(states, detection_verdicts, now, 600.0, 3600.0)  # type: ignore[arg-type]
        states.update(changed)
        return [t.kind + (" again" if t.renotify else "") for t in transitions]

    key = "rubric|agent|pass_rate|"
    assert run(bad.by_key(), 0) == [] and states[key].state == "pending"
    assert run(bad.by_key(), 300) == [] and states[key].state == "pending"
    assert run(bad.by_key(), 600) == ["firing"] and states[key].state == "firing"
    assert run(few.by_key(), 900) == [] and states[key].state == "firing"  # no verdict: no recovery
    assert run(bad.by_key(), 4200) == ["firing again"]
    assert run(good.by_key(), 4300) == [] and states[key].state == "firing"  # recovery must persist too
    assert run(good.by_key(), 4900) == ["resolved"] and states[key].state == "resolved"
    assert run(bad.by_key(), 5000) == [] and states[key].state == "pending"
    assert run(good.by_key(), 5100) == [] and states[key].state == "inactive"  # pending never notified


@pytest.mark.parametrize(("changed", "text"), [
    (JudgeConfig("v2", "gpt-4.1", "1"), "rubric version v1 → v2"),
    (JudgeConfig("v1", "gpt-4.1", "2"), "prompt version 1 → 2"),
])
def test_a_rubric_or_prompt_version_change_starts_a_new_baseline(changed: JudgeConfig, text: str) -> None:
    rng = random.Random(6)
    old = series(simulate(rng, 100, 0.9, ts=100), simulate(rng, 2000, 0.9, ts=0))
    new = series(simulate(rng, 100, 0.4, ts=200), Counts(), config=changed)
    detection = detect([("1h", [old, new])], SETTINGS)
    assert [a.changes for a in detection.annotations] == [[text]]
    assert {v.status for v in detection.verdicts} == {"no_verdict"}
