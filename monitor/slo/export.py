"""The SLOs as specs for the tools teams already run: Sloth (a ``PrometheusServiceLevel``, which the Sloth operator
reads and ``sloth generate`` accepts) and OpenSLO v1 (a ``Service``, and per SLO an ``SLO`` with its ratio
indicator inline, for the OpenSLO tools: oslo, Pyrra's and vendors' converters).

Both count the same events as our own rules: good = passed evaluations (or a dimension scored at least the
minimum), total = scored evaluations; unscored ones are in neither. What they cannot say: the active rubric version
(their queries sum every version) and the suspension while the series cannot be judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.slo.rules import quote
from monitor.slo.spec import SloDefinition, agents_regex

SERVICE = "rubric-monitor"


def _selectors(slo: SloDefinition) -> tuple[str, str]:
    """(good, total) selectors of raw counters, for queries that add their own window."""
    common = f"rubric={quote(slo.rubric)},agent=~{quote(agents_regex(slo.agents))}"
    if slo.dimension is None:
        return (f'rubric_monitor_evaluations_total{{{common},outcome="pass"}}',
                f'rubric_monitor_evaluations_total{{{common},outcome=~"pass|fail"}}')
    assert slo.min_score is not None
    scores = f"rubric_monitor_dimension_scores_total{{{common},dimension={quote(slo.dimension)}"
    good = "|".join(str(s) for s in range(slo.min_score, 6))
    return f"{scores},score=~{quote(good)}}}", f"{scores}}}"


def _bad_selector(slo: SloDefinition) -> str:
    common = f"rubric={quote(slo.rubric)},agent=~{quote(agents_regex(slo.agents))}"
    if slo.dimension is None:
        return f'rubric_monitor_evaluations_total{{{common},outcome="fail"}}'
    assert slo.min_score is not None
    bad = "|".join(str(s) for s in range(1, slo.min_score)) or "none"
    return f"rubric_monitor_dimension_scores_total{{{common},dimension={quote(slo.dimension)},score=~{quote(bad)}}}"


def sloth(slos: Sequence[SloDefinition], name: str = SERVICE, namespace: str = "rubric-monitor") -> dict[str, Any]:
    """A ``sloth.slok.dev/v1`` ``PrometheusServiceLevel``; Sloth's own period applies (``--default-slo-period``:
    give it the SLOs' window, e.g. 28d)."""
    specs = []
    for slo in slos:
        _, total = _selectors(slo)
        page, ticket = slo.alerting.page, slo.alerting.ticket
        specs.append({
            "name": slo.name,
            "objective": round(slo.objective * 100, 6),
            "description": slo.description or slo.describe(),
            "labels": {"rubric": slo.rubric},
            "sli": {"events": {
                "errorQuery": f"sum(rate({_bad_selector(slo)}[{{{{.window}}}}]))",
                "totalQuery": f"sum(rate({total}[{{{{.window}}}}]))",
            }},
            "alerting": {
                "name": "RubricSLOBurn",
                "labels": {"slo": slo.name, "rubric": slo.rubric},
                "annotations": {"summary": f"SLO {slo.name} burns its error budget too fast"},
                "pageAlert": {"labels": {"alerting": "page", **page.labels}} if page.windows
                else {"disable": True},
                "ticketAlert": {"labels": {"alerting": "ticket", **ticket.labels}} if ticket.windows
                else {"disable": True},
            },
        })
    return {"apiVersion": "sloth.slok.dev/v1", "kind": "PrometheusServiceLevel",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"service": SERVICE, "labels": {"app": SERVICE}, "slos": specs}}


def openslo(slos: Sequence[SloDefinition]) -> list[dict[str, Any]]:
    """OpenSLO v1 documents: the ``Service``, then one ``SLO`` per SLO (rolling window, occurrences)."""
    documents: list[dict[str, Any]] = [{
        "apiVersion": "openslo/v1", "kind": "Service",
        "metadata": {"name": SERVICE, "displayName": "Agents scored by rubric-monitor"},
        "spec": {"description": "LLM agent quality: rubric verdicts of an LLM judge (rubric-monitor)."},
    }]
    for slo in slos:
        good, total = _selectors(slo)
        window = slo.window
        documents.append({
            "apiVersion": "openslo/v1", "kind": "SLO",
            "metadata": {"name": slo.name, "displayName": slo.describe()[:200],
                         "labels": {"rubric": [slo.rubric]}},
            "spec": {
                "description": (slo.description or slo.describe())[:1050],
                "service": SERVICE,
                "indicator": {
                    "metadata": {"name": f"{slo.name}-sli"},
                    "spec": {"ratioMetric": {
                        "counter": True,
                        "good": {"metricSource": {"type": "Prometheus", "spec": {"query": good}}},
                        "total": {"metricSource": {"type": "Prometheus", "spec": {"query": total}}},
                    }},
                },
                "timeWindow": [{"duration": window, "isRolling": True}],
                "budgetingMethod": "Occurrences",
                "objectives": [{"displayName": slo.name, "target": slo.objective}],
            },
        })
    return documents
