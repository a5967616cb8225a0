"""The Prometheus rules of the SLOs: the SLI recorded over every window, and multi-window multi-burn-rate alerts.

Derived from the counters the daemon already serves (``rubric_monitor_evaluations_total`` by outcome, and
``rubric_monitor_dimension_scores_total`` by score for a dimension SLO): no new per-agent series. Per SLO and window:

- ``slo:rubric_monitor_slo_good:increase<w>``, ``..._scored:increase<w>``, ``..._unscored:increase<w>``
  (labels ``slo``, ``rubric``, ``rubric_version``): evaluations of the **active** rubric version
  (``rubric_monitor_rubric_info``), so a new version starts a new SLI, as it starts a new baseline for the
  regression detector. The SLO's own window (28d) sums the 5-minute records instead of reading 28 days of raw
  samples at every evaluation: ``sum_over_time(...increase5m[28d]) / 5`` (each evaluation is counted in five
  overlapping 5-minute records, one a minute).
- ``slo:rubric_monitor_slo_sli:ratio<w>`` (good / scored) and ``slo:rubric_monitor_slo_burn_rate:ratio<w>``
  ((1 - SLI) / (1 - objective)), labels ``slo``, ``rubric``; the objective and the budget left over the window.

Alerts ``RubricSLOBurn{alerting="page"|"ticket"}``: for any condition of the tier, the burn rate over its long
**and** its short window exceeds the factor, and the long window holds at least ``min_evaluations`` scored
evaluations; never while the SLO cannot be judged (the share of unscored evaluations in either window above
``alerts.max_unscored_share``, or the daemon's ``rubric_monitor_cannot_judge`` for the rubric and agents).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.slo.spec import BurnWindow, SloDefinition, agents_regex, duration_seconds

RULE_INTERVAL = "1m"
"""Evaluation interval of the SLO groups (default): the SLO window's counts divide the sum of the 5-minute records
by the number of records that overlap each evaluation (5 at one a minute)."""
BASE_WINDOW = "5m"
RAW_UP_TO = 3 * 86400
"""Windows up to 3 days are read from the raw counters; longer ones sum the 5-minute records."""
ALERT_NAME = "RubricSLOBurn"
GOOD, SCORED, UNSCORED = "good", "scored", "unscored"


def record_name(kind: str, window: str) -> str:
    """``slo:rubric_monitor_slo_<kind>:increase<w>`` (counts) or ``:ratio<w>`` (sli, burn_rate)."""
    operation = "increase" if kind in (GOOD, SCORED, UNSCORED) else "ratio"
    return f"slo:rubric_monitor_slo_{kind}:{operation}{window}"


OBJECTIVE = "slo:rubric_monitor_slo_objective:ratio"
BUDGET_REMAINING = "slo:rubric_monitor_slo_error_budget_remaining:ratio"


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _selectors(slo: SloDefinition) -> dict[str, str]:
    """The raw selector of each count of this SLO."""
    common = f"rubric={quote(slo.rubric)},agent=~{quote(agents_regex(slo.agents))}"
    evaluations = f"rubric_monitor_evaluations_total{{{common}"
    if slo.dimension is None:
        good = f'{evaluations},outcome="pass"}}'
        scored = f'{evaluations},outcome=~"pass|fail"}}'
    else:
        assert slo.min_score is not None
        good_scores = "|".join(str(s) for s in range(slo.min_score, 6))
        scores = f"rubric_monitor_dimension_scores_total{{{common},dimension={quote(slo.dimension)}"
        good = f"{scores},score=~{quote(good_scores)}}}"
        scored = f"{scores}}}"
    return {GOOD: good, SCORED: scored, UNSCORED: f'{evaluations},outcome="unscored"}}'}


def _active(slo: SloDefinition) -> str:
    """Keeps the series of the rubric's active version (a ``*`` join by 1: the info series of several replicas
    count once)."""
    return (f"on (rubric, rubric_version) group_left () "
            f"(max by (rubric, rubric_version) (rubric_monitor_rubric_info{{rubric={quote(slo.rubric)}}}) == 1)")


def _count_rule(slo: SloDefinition, kind: str, selector: str, window: str, interval: str) -> dict[str, Any]:
    labels = {"slo": slo.name}
    if duration_seconds(window) <= RAW_UP_TO:
        expr = f"sum by (rubric, rubric_version) (increase({selector}[{window}]))"
    else:
        per = duration_seconds(BASE_WINDOW) // duration_seconds(interval)
        expr = (f"sum by (rubric, rubric_version) (sum_over_time({record_name(kind, BASE_WINDOW)}"
                f"{{slo={quote(slo.name)}}}[{window}])) / {per}")
    return {"record": record_name(kind, window), "expr": f"({expr}) * {_active(slo)}", "labels": labels}


def _of(name: str, slo: SloDefinition) -> str:
    return f"{name}{{slo={quote(slo.name)}}}"


def _total(kind: str, slo: SloDefinition, window: str) -> str:
    return f"sum by (slo, rubric) ({_of(record_name(kind, window), slo)})"


def recording_rules(slo: SloDefinition, interval: str = RULE_INTERVAL) -> list[dict[str, Any]]:
    selectors = _selectors(slo)
    windows = slo.windows()
    if BASE_WINDOW not in windows:
        windows = [BASE_WINDOW, *windows]
    rules: list[dict[str, Any]] = []
    # The counts first, shortest window first: the long windows sum the 5-minute records of this same evaluation.
    for window in windows:
        for kind in (GOOD, SCORED, UNSCORED):
            rules.append(_count_rule(slo, kind, selectors[kind], window, interval))
    budget = slo.error_budget
    for window in windows:
        sli = f"{_total(GOOD, slo, window)} / {_total(SCORED, slo, window)}"
        rules.append({"record": record_name("sli", window), "expr": sli})
        rules.append({"record": record_name("burn_rate", window),
                      "expr": f"(1 - {_of(record_name('sli', window), slo)}) / {budget:.10g}"})
    rules.append({"record": OBJECTIVE, "expr": f"vector({slo.objective:.10g})",
                  "labels": {"slo": slo.name, "rubric": slo.rubric}})
    rules.append({"record": BUDGET_REMAINING, "expr": f"1 - {_of(record_name('burn_rate', slo.window), slo)}"})
    return rules


def _unscored_share(slo: SloDefinition, window: str) -> str:
    unscored, scored = _total(UNSCORED, slo, window), _total(SCORED, slo, window)
    return f"({unscored} / ({unscored} + {scored}))"


def condition(slo: SloDefinition, burn: BurnWindow, max_unscored_share: float) -> str:
    """One burn-rate condition of the workbook, with the minimum-evaluations guard and the unscored suspension."""
    rate = f"{burn.burn_rate:.10g}"
    return (f"({_of(record_name('burn_rate', burn.long), slo)} > {rate}"
            f" and {_of(record_name('burn_rate', burn.short), slo)} > {rate}"
            f" and {_total(SCORED, slo, burn.long)} >= {slo.alerting.min_evaluations}"
            f" unless {_unscored_share(slo, burn.long)} > {max_unscored_share:.10g}"
            f" unless {_unscored_share(slo, burn.short)} > {max_unscored_share:.10g})")


def cannot_judge(slo: SloDefinition) -> str:
    """The daemon's own verdict: any matching series that cannot be judged (judge errors, source behind, drift)."""
    return (f"max(rubric_monitor_cannot_judge{{rubric={quote(slo.rubric)},agent=~{quote(agents_regex(slo.agents))}}})"
            " == 1")


def alerting_rules(slo: SloDefinition, max_unscored_share: float) -> list[dict[str, Any]]:
    rules = []
    for tier_name, tier in slo.tiers():
        conditions = " or ".join(condition(slo, burn, max_unscored_share) for burn in tier.windows)
        described = "; ".join(f"{b.burn_rate:g}x over {b.long} and {b.short}" for b in tier.windows)
        rules.append({
            "alert": ALERT_NAME,
            "expr": f"({conditions}) unless on () ({cannot_judge(slo)})",
            "labels": {"alerting": tier_name, **tier.labels},
            "annotations": {
                "summary": f"SLO {slo.name} burns its error budget too fast ({tier_name})",
                "description": (f"{slo.describe()}. Burn-rate condition: {described}, with at least "
                                f"{slo.alerting.min_evaluations} scored evaluations in the long window. Budget "
                                f"left, burn rates and evaluations: `rubric-monitor slo status --slo {slo.name}`."),
            },
        })
    return rules


def rule_groups(slos: Sequence[SloDefinition], max_unscored_share: float, interval: str = RULE_INTERVAL
                ) -> dict[str, Any]:
    """The rules file: one group per SLO (its records, then its alerts, which read them in the same evaluation),
    evaluated every ``interval``, a divisor of 5m (the end-to-end test and the benchmark run faster than 1m)."""
    step = duration_seconds(interval)
    if step > duration_seconds(BASE_WINDOW) or duration_seconds(BASE_WINDOW) % step:
        raise ValueError(f"rule interval {interval}: must divide {BASE_WINDOW}")
    return {"groups": [{"name": f"rubric-monitor-slo-{slo.name}", "interval": interval,
                        "rules": recording_rules(slo, interval) + alerting_rules(slo, max_unscored_share)}
                       for slo in slos]}


def prometheus_rule(rules: dict[str, Any], name: str = "rubric-slos") -> dict[str, Any]:
    """The kube-prometheus PrometheusRule whose ``spec`` is the rules file."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "namespace": "rubric-monitor",
            "labels": {"app.kubernetes.io/name": "rubric-monitor", "release": "kube-prometheus-stack"},
        },
        "spec": rules,
    }
