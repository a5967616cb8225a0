"""SLO definitions, the daemon's own figures and notifications (real SqlStore, real notifier over HTTP to a
receiver), the CLI, and the Sloth/OpenSLO exports against their published schemas."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry
from referencing import Registry, Resource

from monitor.errors import ConfigError
from monitor.slo.export import openslo, sloth
from monitor.slo.spec import SloSettings, resolve
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "slo"


def definition(**fields: Any) -> SloSettings:
    return SloSettings.model_validate({"name": "reservations", "rubric": "restaurant-reservation",
                                       "agents": ["reservation-*"], "objective": 0.95, **fields})


def test_definitions_defaults_and_errors() -> None:
    slo = resolve([definition()])[0]
    assert (slo.window, slo.alerting.min_evaluations) == ("28d", 30)
    assert [(w.burn_rate, w.long, w.short) for w in slo.alerting.page.windows] == [(14.4, "1h", "5m"), (6, "6h", "30m")]
    assert [(w.burn_rate, w.long, w.short) for w in slo.alerting.ticket.windows] == [(3, "1d", "2h"), (1, "3d", "6h")]
    assert slo.windows() == ["5m", "30m", "1h", "2h", "6h", "1d", "3d", "28d"]
    with pytest.raises(ConfigError, match="already defined"):
        resolve([definition(), definition()])
    with pytest.raises(ConfigError, match="no active rubric"):
        resolve([definition()], known_rubrics=["other"])
    for bad in ({"window": "28x"}, {"objective": 1}, {"dimension": "accuracy"}, {"name": "Not A Label"},
                {"alerting": {"page": {"labels": {"slo": "x"}}}},
                {"alerting": {"page": {"windows": [{"burn_rate": 2, "long": "5m", "short": "1h"}]}}}):
        with pytest.raises(ValueError):
            definition(**bad)


def test_a_rubric_slo_block_does_not_change_the_rubric_version() -> None:
    from monitor.evaluators.versions import builtin_version
    from monitor.rubrics.loader import parse_rubric

    data = yaml.safe_load((REPO / "deploy" / "base" / "rubrics" / "restaurant-reservation.yaml").read_text())
    with_slo = parse_rubric(data, "r.yaml", builtin_version)
    without = parse_rubric({k: v for k, v in data.items() if k != "slo"}, "r.yaml", builtin_version)
    assert with_slo.version == without.version and with_slo.slo is not None
    slo = resolve([], [with_slo])[0]
    assert (slo.name, slo.agents, slo.objective) == ("restaurant-reservation", ("reservation-*",), 0.95)


def _openslo_validator() -> jsonschema.Draft7Validator:
    resources = []
    for path in (DATA / "openslo-v1").rglob("*.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    registry: Registry = Registry().with_resources(resources)
    root = json.loads((DATA / "openslo-v1" / "openslo.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(root, registry=registry)


def test_exports_validate_against_the_published_schemas() -> None:
    slos = resolve([definition(), definition(name="accuracy", dimension="policy_enforcement", min_score=4,
                                             alerting={"ticket": {"windows": []}})])
    validator = _openslo_validator()
    documents = openslo(slos)
    assert [d["kind"] for d in documents] == ["Service", "SLO", "SLO"]
    for document in documents:
        validator.validate(json.loads(json.dumps(document)))
    broken = json.loads(json.dumps(documents[1]))
    broken["spec"]["objectives"][0]["target"] = 95
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)

    from tests.test_deploy import strict

    schema = strict(json.loads((DATA / "sloth-prometheusservicelevel-v1.schema.json").read_text(encoding="utf-8")))
    manifest = sloth(slos)
    jsonschema.Draft7Validator(schema).validate(manifest)
    assert manifest["spec"]["slos"][1]["alerting"]["ticketAlert"] == {"disable": True}
    assert manifest["spec"]["slos"][0]["objective"] == 95.0
    manifest["spec"]["slos"][0]["sli"]["events"]["error_query"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(manifest)


def _result(i: int, outcome: str, at: datetime, model: str = "judge-a") -> Any:
    from monitor.models import EvaluationResult

    return EvaluationResult.model_validate({
        "conversation_id": f"c{i}", "trace_ids": [f"{i:032x}"], "rubric": "restaurant-reservation",
        "rubric_version": "v1", "agent": "reservation-assistant", "evaluated_at": at.isoformat(),
        "outcome": outcome, "score": None if outcome == "unscored" else (0.9 if outcome == "pass" else 0.2),
        "rubric_kind": "weighted", "judge_model": model,
        "prompt_version": "p1", "reason": "r", "dimension_scores": []})


def test_the_daemon_computes_the_budget_and_notifies_through_the_alerts_outbox(tmp_path: Path) -> None:
    from monitor.app import build_alerts, build_slos
    from monitor.settings import Settings
    from monitor.store.sql import SqlStore
    from tests.fakes.receiver import Receiver

    with Receiver() as receiver:
        settings = Settings.model_validate({
            "store": {"url": f"sqlite:///{tmp_path / 'r.db'}"},
            "slos": [definition().model_dump(exclude_defaults=True)],
            "alerts": {"notifiers": [{"name": "hook", "kind": "webhook", "url": receiver.url + "/events"}],
                       "example_link_template": "https://grafana.example/explore?traceId={trace_id}"}})
        store = SqlStore(settings.store.url if isinstance(settings.store.url, str) else str(settings.store.url))
        registry = CollectorRegistry()
        alerts = build_alerts(settings, store, registry)
        slos = build_slos(settings, store, registry, lambda: resolve(settings.slos), alerts)
        now = datetime(2026, 3, 1, 12, tzinfo=UTC)
        # A day at 2 % failures (within budget), then an hour in which every evaluation fails.
        results = [_result(i, "fail" if i % 50 == 0 else "pass", now - timedelta(hours=25) + timedelta(minutes=i))
                   for i in range(24 * 60)]
        results += [_result(10_000 + i, "fail", now - timedelta(minutes=59) + timedelta(minutes=i)) for i in range(59)]
        results += [_result(20_000 + i, "unscored", now - timedelta(minutes=30)) for i in range(3)]
        # An older judge configuration of the same agent: not the newest, not counted.
        results += [_result(30_000 + i, "fail", now - timedelta(hours=26), model="judge-old") for i in range(100)]
        for result in results:
            store.record(result)
        try:
            transitions = slos.run_cycle(now)
            assert [(t.kind, t.state.dimension) for t in transitions] == [("firing", "page"), ("firing", "ticket")]
            status = slos.last[0]
            hour = status.windows["1h"]
            assert (hour.good, hour.scored, hour.unscored) == (0, 59, 3)
            assert status.burn_rate("1h") == pytest.approx(20.0)
            assert status.exhaustion_seconds is not None and status.budget_remaining < 1
            labels = {"slo": "reservations", "rubric": "restaurant-reservation"}
            assert registry.get_sample_value("rubric_monitor_slo_objective", labels) == 0.95
            assert registry.get_sample_value("rubric_monitor_slo_alert_firing", {
                "slo": "reservations", "rubric": "restaurant-reservation", "alerting": "page"}) == 1
            alerts.dispatcher.wait_idle(10)
            events = [r.json for r in receiver.on("/events")]
            assert {e["labels"]["alerting"] for e in events} == {"page", "ticket"}
            page = next(e for e in events if e["labels"]["alerting"] == "page")
            assert page["labels"]["alertname"] == "RubricSLOBurn" and page["labels"]["severity"] == "critical"
            assert page["summary"].startswith("SLO reservations burns its error budget 20.0x too fast (page)")
            # The failing conversations behind it, newest first, as a regression alert names them: of the newest
            # judge configuration, in the condition's long window (1h).
            assert [e["conversation_id"] for e in page["examples"]] == [f"c{10_058 - i}" for i in range(5)]
            assert page["examples"][0]["operation_id"] == f"{10_058:032x}"
            assert page["examples"][0]["link"] == f"https://grafana.example/explore?traceId={10_058:032x}"
            assert all(e["kind"] != "firing" or e["examples"] for e in events)
            # The regression alerts do not see the SLO's states.
            assert all(s.kind != "slo_burn" for s in alerts.states().values())
            # Recovery: an hour of passes; the page resolves (its 5m and 30m windows clear), once; the ticket stays
            # (the 6h window still burns faster than the 3-day pace).
            for i in range(70):
                store.record(_result(40_000 + i, "pass", now + timedelta(minutes=i)))
            later = now + timedelta(minutes=70)
            resolved = slos.run_cycle(later)
            assert [(t.kind, t.state.dimension) for t in resolved] == [("resolved", "page")]
            assert slos.run_cycle(later + timedelta(minutes=1)) == []
            alerts.dispatcher.wait_idle(10)
            assert len([r for r in receiver.on("/events") if r.json["kind"] == "resolved"]) == 1
        finally:
            alerts.close()
            store.close()


def test_a_tier_given_its_labels_only_keeps_the_workbook_conditions() -> None:
    slo = resolve([definition(alerting={"page": {"labels": {"team": "reservations"}}, "ticket": {"windows": []}})])[0]
    assert slo.alerting.page.labels == {"severity": "critical", "team": "reservations"}
    assert [(w.burn_rate, w.long, w.short) for w in slo.alerting.page.windows] == [(14.4, "1h", "5m"), (6, "6h", "30m")]
    assert [name for name, _ in slo.tiers()] == ["page"]
    overridden = definition(alerting={"ticket": {"labels": {"severity": "info"}}}).alerting.ticket
    assert overridden.labels == {"severity": "info"} and len(overridden.windows) == 2
