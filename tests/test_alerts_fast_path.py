"""The fast detector changes no verdict: on random windows it gives exactly (bit for bit) what the first, one test at
a time detector gives (tests/reference_detector.py); the batched Mann-Whitney tests and Benjamini-Hochberg equal
their scalar definitions; the metrics export every series' flag and the detail of the series that are not ok. (The
counts the store reads are held to a hand count in tests/test_alert_windows.py.)"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.alerts.detector import Counts, DetectorSettings, JudgeConfig, SeriesCounts, detect
from monitor.alerts.lifecycle import AlertState
from monitor.alerts.metrics import AlertMetrics
from monitor.alerts.stats import (
    benjamini_hochberg,
    mann_whitney_drop,
    mann_whitney_drops,
    two_proportion_drop,
    two_proportion_drops,
)
from tests import reference_detector

SCORES = st.lists(st.integers(0, 60), min_size=5, max_size=5)
BIG_SCORES = st.lists(st.integers(0, 90_000), min_size=5, max_size=5)
"""Beyond the exact range of the arrays (200,000 scores in a test): those go through the scalar function."""
CONFIGS = (JudgeConfig("1", "judge-a", "1"), JudgeConfig("1", "judge-b", "1"), JudgeConfig("2", "judge-a", "1"))


@st.composite
def counts(draw: st.DrawFn, big: bool = False) -> Counts:
    passed, failed = draw(st.integers(0, 80)), draw(st.integers(0, 80))
    unscored = draw(st.integers(0, 30))
    first = draw(st.floats(0, 1000, allow_nan=False))
    dimensions = {name: draw(BIG_SCORES if big and name == "z" else SCORES)
                  for name in draw(st.sets(st.sampled_from(["x", "y", "z"])))}
    return Counts(passed=passed, failed=failed, unscored=unscored, judge_errors=draw(st.integers(0, unscored)),
                  first_ts=first, last_ts=first + draw(st.floats(0, 100, allow_nan=False)), dimensions=dimensions)


@st.composite
def windows(draw: st.DrawFn) -> list[tuple[str, list[SeriesCounts]]]:
    out = []
    for name in draw(st.sampled_from([["1h"], ["1h", "24h"]])):
        keys = draw(st.sets(st.tuples(st.sampled_from(["r0", "r1"]), st.sampled_from(["a0", "a1", "a2"]),
                                      st.sampled_from(CONFIGS), st.sampled_from([None, "v1", "v2"])), max_size=8))
        big = draw(st.booleans())
        out.append((name, [SeriesCounts(rubric, agent, config, version, draw(counts(big)), draw(counts(big)))
                           for rubric, agent, config, version in sorted(keys, key=repr)]))
    return out


DETECTOR_SETTINGS = st.builds(
    DetectorSettings, min_samples=st.integers(1, 40), min_effect_pass_rate=st.sampled_from([0.0, 0.05, 0.2]),
    min_effect_dimension=st.sampled_from([0.0, 0.25]), fdr_q=st.sampled_from([0.05, 0.5, 1.0]),
    max_unscored_share=st.sampled_from([0.2, 1.0]), max_judge_error_share=st.sampled_from([0.1, 1.0]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows(), DETECTOR_SETTINGS, st.sets(st.sampled_from(["source_behind"])),
       st.sets(st.sampled_from(["r0", "r1"])))
def test_the_fast_detector_gives_the_reference_verdicts(found: list[tuple[str, list[SeriesCounts]]],
                                                        detector: DetectorSettings, shared: set[str],
                                                        drifting: set[str]) -> None:
    rubric_reasons = {rubric: ("judge_drift",) for rubric in drifting}
    fast = detect(found, detector, shared, rubric_reasons)
    reference = reference_detector.detect(found, detector, shared, rubric_reasons)
    # Verdict by verdict, every field: status, values, test (effect, p-value, interval), q-value, reasons,
    # attribution; then the annotations and the series that cannot be judged.
    assert fast.verdicts == reference.verdicts
    assert fast.annotations == reference.annotations and fast.cannot_judge == reference.cannot_judge
    assert fast.by_key() == reference.by_key() and fast.per_baseline() == reference.per_baseline()


def test_regressions_are_found_alike_at_scale() -> None:
    """Hundreds of series, a tenth of them dropping: the same verdicts, and real regressions among them."""
    rng = random.Random(7)

    def window(n: int) -> list[SeriesCounts]:
        out = []
        for agent in range(300):
            drop = agent % 10 == 0
            dims = {f"d{d}": [rng.randint(0, n // 10) for _ in range(3)] + [rng.randint(0, n // 2) for _ in range(2)]
                    for d in range(4)}
            now = Counts(passed=int(n * (0.7 if drop else 0.9)), failed=n // 5, first_ts=1, last_ts=2,
                         dimensions={d: [c * (3 if drop and i < 2 else 1) for i, c in enumerate(v)]
                                     for d, v in dims.items()})
            before = Counts(passed=9 * n, failed=n, first_ts=0, last_ts=1,
                            dimensions={d: [c * 10 for c in v] for d, v in dims.items()})
            out.append(SeriesCounts("r", f"a{agent}", CONFIGS[0], None, now, before))
        return out

    found = [("1h", window(80)), ("24h", window(800))]
    fast = detect(found, DetectorSettings())
    assert fast.verdicts == reference_detector.detect(found, DetectorSettings()).verdicts
    assert sum(v.status == "regression" for v in fast.verdicts) >= 30


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(SCORES, BIG_SCORES), st.one_of(SCORES, BIG_SCORES)), min_size=1, max_size=40))
def test_batched_mann_whitney_equals_the_scalar_test(pairs: list[tuple[list[int], list[int]]]) -> None:
    pairs = [(now, before) for now, before in pairs if sum(now) and sum(before)]
    tests, baseline_means = mann_whitney_drops([p[0] for p in pairs], [p[1] for p in pairs])
    assert tests == [mann_whitney_drop(now, before) for now, before in pairs]
    assert baseline_means == [sum((s + 1) * c for s, c in enumerate(b)) / sum(b) for _, b in pairs]


PROPORTION = st.integers(0, 3000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))
"""(passed, n), all-pass and all-fail included."""


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(PROPORTION, st.just((2**25 + 3, 2**25 + 9))), PROPORTION),
                min_size=1, max_size=60))
def test_batched_two_proportion_tests_equal_the_scalar_test(pairs: list[tuple[tuple[int, int], tuple[int, int]]]
                                                            ) -> None:
    """Bit for bit, at every size (past 2**25 evaluations a side through the scalar one)."""
    counts = [(x1, n1, x0, n0) for (x1, n1), (x0, n0) in pairs if n1 and n0]  # the detector tests n >= 1
    assert two_proportion_drops(counts) == [two_proportion_drop(*c) for c in counts]


def test_batched_mann_whitney_when_every_score_ties() -> None:
    """No variance at all (every score a 5): no evidence, as the scalar test says."""
    pairs = [([0, 0, 0, 0, 40], [0, 0, 0, 0, 900]), ([40, 0, 0, 0, 0], [0, 0, 0, 0, 900])]
    tests, _ = mann_whitney_drops([p[0] for p in pairs], [p[1] for p in pairs])
    assert tests == [mann_whitney_drop(*p) for p in pairs]
    assert tests[0].p_value == 1.0 and tests[1].p_value < 1e-6


@given(st.lists(st.one_of(st.floats(0, 1, allow_nan=False), st.sampled_from([0.0, 0.01, 0.5, 1.0])), max_size=60))
def test_benjamini_hochberg_equals_its_loop(p_values: list[float]) -> None:
    assert benjamini_hochberg(p_values) == reference_detector.benjamini_hochberg(p_values)


def test_metrics_export_every_flag_and_the_detail_of_series_not_ok() -> None:
    """At R rubrics x A agents x D dimensions (one baseline): R·A·(1 + D) flags, R·A·5 cannot-judge gauges, and
    effect, p-value and two sample sizes only for series whose verdict is not ok or whose alert is pending or
    firing (docs/alerts.md)."""
    rng = random.Random(5)
    series = []
    for agent in range(20):
        quiet = Counts(passed=90, failed=10, first_ts=1, last_ts=2, dimensions={"x": [2, 3, 10, 35, 50]})
        drop = Counts(passed=40, failed=60, first_ts=1, last_ts=2, dimensions={"x": [30, 20, 10, 20, 20]})
        few = Counts(passed=5, failed=1, first_ts=1, last_ts=2, dimensions={"x": [0, 0, 1, 2, 3]})
        now = drop if agent < 2 else few if agent < 5 else quiet
        before = Counts(passed=900 + rng.randint(0, 5), failed=100, first_ts=0, last_ts=1,
                        dimensions={"x": [20, 30, 100, 350, 500]})
        series.append(SeriesCounts("r", f"a{agent}", CONFIGS[0], None, now, before))
    detection = detect([("1h", series)], DetectorSettings())
    statuses = {(k.agent, k.kind): v.status for k, v in detection.by_key().items()}
    assert statuses[("a0", "pass_rate")] == "regression" and statuses[("a3", "pass_rate")] == "no_verdict"
    assert statuses[("a9", "pass_rate")] == "ok"
    firing = AlertState(key="r|a0|pass_rate|", rubric="r", agent="a0", kind="pass_rate", dimension="",
                        state="firing", baseline="trailing")
    pending = AlertState(key="r|a9|dimension_mean|x", rubric="r", agent="a9", kind="dimension_mean",
                         dimension="x", state="pending")
    registry = CollectorRegistry()
    metrics = AlertMetrics(registry)
    metrics.publish(detection, {firing.key: firing, pending.key: pending})
    families = {f.name: f.samples for f in text_string_to_metric_families(metrics.rendered.text.decode())}
    assert len(families["rubric_monitor_regression"]) == 20 * (1 + 1)
    assert [s.labels["agent"] for s in families["rubric_monitor_regression"] if s.value == 1] == ["a0"]
    assert len(families["rubric_monitor_cannot_judge"]) == 20 * 5
    # Not ok: a0 and a1 dropped (pass rate and x), a2 to a4 too few; a9's x is ok but its alert is pending.
    detailed = {(s.labels["agent"], s.labels["kind"]) for s in families["rubric_monitor_regression_samples"]}
    assert detailed == {(f"a{a}", kind) for a in range(5) for kind in ("pass_rate", "dimension_mean")} | {
        ("a9", "dimension_mean")}
    assert len(families["rubric_monitor_regression_samples"]) == 2 * len(detailed)
    tested = {(s.labels["agent"], s.labels["kind"]) for s in families["rubric_monitor_regression_effect"]}
    assert tested == {("a0", "pass_rate"), ("a0", "dimension_mean"), ("a1", "pass_rate"),
                      ("a1", "dimension_mean"), ("a9", "dimension_mean")}
    assert {(s.labels["agent"], s.labels["kind"]) for s in families["rubric_monitor_regression_p_value"]} == tested
    # The registry reads the same state (registry.get_sample_value, generate_latest).
    assert registry.get_sample_value("rubric_monitor_regression", {
        "rubric": "r", "agent": "a0", "kind": "pass_rate", "dimension": "", "baseline": "trailing"}) == 1.0
