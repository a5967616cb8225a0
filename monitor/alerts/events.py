"""Events as every notifier receives them: one plain, JSON-serialisable dict, and the text shown to people.

``kind`` is ``firing``, ``resolved``, ``annotation`` (a judge model, prompt or rubric version changed: a new
baseline starts) or ``test`` (``rubric-monitor notify test``). The generic webhook posts this dict as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from monitor.alerts.detector import Annotation, Verdict
from monitor.alerts.store import Example

ALERT_NAME = "RubricRegression"
ANNOTATION_NAME = "RubricBaselineReset"
TEST_NAME = "RubricMonitorTest"

_KIND_TEXT = {"pass_rate": "pass rate", "dimension_mean": "mean score"}


def labels_of(rubric: str, agent: str, kind: str, dimension: str, baseline: str) -> dict[str, str]:
    return {"alertname": ALERT_NAME, "rubric": rubric, "agent": agent, "kind": kind, "dimension": dimension,
            "baseline": baseline, "severity": "warning"}


def _value(kind: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1%}" if kind == "pass_rate" else f"{value:.2f}"


def _effect(kind: str, value: float) -> str:
    return f"{value * 100:+.1f} points" if kind == "pass_rate" else f"{value:+.2f}"


def verdict_details(verdict: Verdict) -> dict[str, Any]:
    """Everything a person needs to judge the verdict, without opening a dashboard."""
    test = verdict.test
    config = verdict.config
    return {
        "window": verdict.window,
        "baseline": verdict.baseline,
        "current_value": verdict.current_value,
        "baseline_value": verdict.baseline_value,
        "current_samples": verdict.current_n,
        "baseline_samples": verdict.baseline_n,
        "effect": None if test is None else test.effect,
        "interval": None if test is None else [test.low, test.high],
        "p_value": None if test is None else test.p_value,
        "q_value": verdict.q_value,
        "status": verdict.status,
        "judge_model": None if config is None else config.judge_model,
        "rubric_version": None if config is None else config.rubric_version,
        "prompt_version": None if config is None else config.prompt_version,
        "agent_version": verdict.agent_version,
        "baseline_agent_version": verdict.baseline_agent_version,
        "dimensions_moved": [
            {"dimension": a.dimension, "effect": a.effect, "current_mean": a.current_mean,
             "baseline_mean": a.baseline_mean}
            for a in verdict.attribution
        ],
    }


def example_dicts(examples: list[Example], link_template: str | None) -> list[dict[str, Any]]:
    out = []
    for example in examples:
        trace_id = example.trace_ids[0] if example.trace_ids else ""
        link = None
        if link_template:
            try:
                # Ids come from traces: encoded, one cannot add a query parameter, a fragment or a path.
                conversation_id = quote(example.conversation_id, safe="")
                link = link_template.format(trace_id=quote(trace_id, safe=""),
                                            operation_id=quote(example.operation_id, safe=""),
                                            conversation_id=conversation_id, conversation_id_url=conversation_id)
            except (KeyError, IndexError, ValueError):
                link = None  # a template with an unknown placeholder: the example is still named
        out.append({"conversation_id": example.conversation_id, "trace_id": trace_id,
                    "operation_id": example.operation_id, "evaluated_at": example.evaluated_at.isoformat(),
                    "score": example.score, "reason": example.reason[:300], "link": link})
    return out


def summary(labels: dict[str, str], details: dict[str, Any], kind: str) -> str:
    what = _KIND_TEXT.get(labels.get("kind", ""), labels.get("kind", ""))
    if labels.get("dimension"):
        what = f"{labels['dimension']} {what}"
    head = "Resolved: " if kind == "resolved" else ""
    quality = f"{what} of {labels.get('rubric')} for agent {labels.get('agent')}"
    if kind == "resolved":
        return f"{head}{quality} is back to its baseline"
    effect = details.get("effect")
    shown = "" if effect is None else f" ({_effect(labels.get('kind', ''), effect)})"
    return (f"{quality} dropped to {_value(labels.get('kind', ''), details.get('current_value'))} from "
            f"{_value(labels.get('kind', ''), details.get('baseline_value'))}{shown}")


def description_lines(labels: dict[str, str], details: dict[str, Any]) -> list[str]:
    kind = labels.get("kind", "")
    lines = []
    baseline = details.get("baseline")
    if baseline == "previous_version":
        against = f"previous agent version {details.get('baseline_agent_version')}"
    else:
        against = "trailing baseline"
    lines.append(f"Window {details.get('window')} (n={details.get('current_samples')}) against the {against} "
                 f"(n={details.get('baseline_samples')}).")
    interval = details.get("interval")
    if details.get("effect") is not None and interval:
        lines.append(f"Effect {_effect(kind, details['effect'])}, 95% interval {_effect(kind, interval[0])} to "
                     f"{_effect(kind, interval[1])}; p={details.get('p_value'):.2g}, "
                     f"q={(details.get('q_value') or 0.0):.2g} (Benjamini-Hochberg).")
    lines.append(f"Judge {details.get('judge_model')}, rubric version {details.get('rubric_version')}, prompt "
                 f"version {details.get('prompt_version')}"
                 + (f", agent version {details['agent_version']}." if details.get("agent_version") else "."))
    moved = details.get("dimensions_moved") or []
    if moved:
        lines.append("Dimensions that moved most: " + ", ".join(
            f"{m['dimension']} {m['effect']:+.2f} ({m['baseline_mean']:.2f} → {m['current_mean']:.2f})"
            for m in moved) + ".")
    return lines


def alert_event(kind: str, verdict: Verdict, labels: dict[str, str], starts_at: datetime, ends_at: datetime | None,
                examples: list[dict[str, Any]], generator_url: str) -> dict[str, Any]:
    details = verdict_details(verdict)
    return {
        "kind": kind,
        "labels": labels,
        "summary": summary(labels, details, kind),
        "description": " ".join(description_lines(labels, details)),
        "details": details,
        "examples": examples,
        "starts_at": starts_at.isoformat(),
        "ends_at": None if ends_at is None else ends_at.isoformat(),
        "generator_url": generator_url,
    }


def annotation_event(annotation: Annotation, at: datetime, generator_url: str) -> dict[str, Any]:
    labels = {"alertname": ANNOTATION_NAME, "rubric": annotation.rubric, "agent": annotation.agent,
              "severity": "info"}
    changes = "; ".join(annotation.changes)
    return {
        "kind": "annotation",
        "labels": labels,
        "summary": f"New baseline for {annotation.rubric} / {annotation.agent}: {changes}",
        "description": (f"Results of {annotation.rubric} for agent {annotation.agent} are now judged with "
                        f"{annotation.current.describe()} (before: {annotation.previous.describe()}). They are "
                        "compared only with each other from now on: a new baseline starts, no regression is "
                        "inferred from the change."),
        "details": {"previous": annotation.previous.__dict__, "current": annotation.current.__dict__,
                    "changes": annotation.changes},
        "examples": [],
        "starts_at": at.isoformat(),
        "ends_at": None,
        "generator_url": generator_url,
    }


def probe_event(at: datetime, generator_url: str) -> dict[str, Any]:
    return {
        "kind": "test",
        "labels": {"alertname": TEST_NAME, "severity": "info"},
        "summary": "Test notification from rubric-monitor",
        "description": "If you can read this, rubric-monitor can reach this receiver.",
        "details": {},
        "examples": [],
        "starts_at": at.isoformat(),
        "ends_at": None,
        "generator_url": generator_url,
    }


def example_lines(event: dict[str, Any], text: Callable[[str], str] = str,
                  link: Callable[[str], str] = str) -> list[str]:
    """One line per example; ``text`` and ``link`` show the names and the link in a notifier's markup."""
    lines = []
    for example in event.get("examples") or []:
        name = text(f"{example['conversation_id']} (operation_Id {example['operation_id']})")
        score = "" if example.get("score") is None else f" score {example['score']:.2f}"
        lines.append(f"{name}{score}" + (f" {link(example['link'])}" if example.get("link") else ""))
    return lines
