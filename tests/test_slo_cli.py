"""``rubric-monitor slo rules | export | status`` through the real CLI (a subprocess, as a user runs it) on a
configuration with SLOs (one in the settings, one in the rubric file) and a store with results."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.models import EvaluationResult
from tests.conftest import REPO, require_binary
from tests.helpers import run_cli, write_config


def _result(i: int, outcome: str, at: datetime, policy: int) -> EvaluationResult:
    return EvaluationResult.model_validate({
        "conversation_id": f"c{i}", "trace_ids": [f"{i:032x}"], "rubric": "restaurant-reservation",
        "rubric_version": "v1", "agent": "reservation-assistant", "evaluated_at": at.isoformat(),
        "outcome": outcome, "score": 0.9 if outcome == "pass" else 0.2, "rubric_kind": "weighted",
        "judge_model": "judge-a", "prompt_version": "p1", "reason": "r",
        "dimension_scores": [{"id": "policy_enforcement", "score": policy, "applicable": True, "weight": 5}]})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A configuration with two SLOs (the rubric file's ``restaurant-reservation``, objective 0.95, and the
    settings' ``reservation-policy``: policy_enforcement at least 4, objective 0.9), and a store holding 160 passes
    two days ago and, in the last half hour, 36 passes and 4 failures (policy scores 5, the failures' 2)."""
    from monitor.store.sql import SqlStore

    tmp = tmp_path_factory.mktemp("slo-cli")
    shutil.copytree(REPO / "examples" / "rubrics", tmp / "rubrics")
    url = f"sqlite:///{tmp / 'results.db'}"
    write_config(tmp / "config.yaml", {
        "judge": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "test", "model": "judge-a"},
        "rubrics": {"directory": str(tmp / "rubrics")}, "store": {"url": url},
        "slos": [{"name": "reservation-policy", "rubric": "restaurant-reservation", "agents": ["reservation-*"],
                  "objective": 0.9, "window": "7d", "dimension": "policy_enforcement", "min_score": 4,
                  "alerting": {"page": {"labels": {"severity": "critical", "team": "reservations"}}}}]})
    now = datetime.now(UTC)
    store = SqlStore(url)
    try:
        for i in range(160):
            store.record(_result(i, "pass", now - timedelta(days=2) + timedelta(minutes=i), 5))
        for i in range(40):
            failed = i % 10 == 0
            store.record(_result(10_000 + i, "fail" if failed else "pass",
                                 now - timedelta(minutes=30) + timedelta(seconds=30 * i), 2 if failed else 5))
    finally:
        store.close()
    return tmp


def cli(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(["slo", *args, "--config", str(workspace / "config.yaml")], workspace)
    assert done.returncode == 0, done.stderr
    return done


def test_slo_rules_prints_a_rule_file_promtool_accepts(workspace: Path) -> None:
    done = cli(workspace, "rules")
    assert done.stdout.startswith("# rubric-monitor SLO rules (rubric-monitor slo rules); docs/slo.md\n")
    rules = yaml.safe_load(done.stdout)
    assert [g["name"] for g in rules["groups"]] == ["rubric-monitor-slo-reservation-policy",
                                                    "rubric-monitor-slo-restaurant-reservation"]
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert {(r["alert"], r["labels"]["alerting"], r["labels"]["severity"]) for r in alerts} == {
        ("RubricSLOBurn", "page", "critical"), ("RubricSLOBurn", "ticket", "warning")}
    assert next(r for r in alerts if r["labels"].get("team"))["labels"]["alerting"] == "page"
    (workspace / "printed.yaml").write_text(done.stdout, encoding="utf-8")
    checked = subprocess.run([require_binary("promtool"), "check", "rules", "printed.yaml"], cwd=workspace,
                             capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # One SLO, to a file, evaluated every 30 s.
    cli(workspace, "rules", "--slo", "reservation-policy", "--interval", "30s", "--output", "one.yaml")
    one = yaml.safe_load((workspace / "one.yaml").read_text(encoding="utf-8"))
    assert [(g["name"], g["interval"]) for g in one["groups"]] == [("rubric-monitor-slo-reservation-policy", "30s")]
    # The 7-day window sums the 5-minute records: ten of them overlap each evaluation at 30 s.
    window = next(r for r in one["groups"][0]["rules"] if r["record"] == "slo:rubric_monitor_slo_good:increase7d")
    assert "[7d])) / 10)" in window["expr"]


def test_slo_rules_as_a_prometheus_rule(workspace: Path) -> None:
    document = yaml.safe_load(cli(workspace, "rules", "--prometheus-rule").stdout)
    assert (document["apiVersion"], document["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert document["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert [g["name"] for g in document["spec"]["groups"]] == ["rubric-monitor-slo-reservation-policy",
                                                              "rubric-monitor-slo-restaurant-reservation"]


def test_slo_rules_refuses_what_it_cannot_make(workspace: Path) -> None:
    unknown = run_cli(["slo", "rules", "--config", str(workspace / "config.yaml"), "--slo", "nope"], workspace)
    assert unknown.returncode != 0 and "no SLO named 'nope'" in unknown.stderr
    interval = run_cli(["slo", "rules", "--config", str(workspace / "config.yaml"), "--interval", "7m"], workspace)
    assert interval.returncode != 0 and "--interval" in interval.stderr and "must divide 5m" in interval.stderr


def test_slo_export_sloth_and_openslo(workspace: Path) -> None:
    sloth = yaml.safe_load(cli(workspace, "export", "--format", "sloth").stdout)
    assert sloth["kind"] == "PrometheusServiceLevel"
    specs = {s["name"]: s for s in sloth["spec"]["slos"]}
    assert set(specs) == {"reservation-policy", "restaurant-reservation"}
    assert specs["reservation-policy"]["objective"] == 90.0
    assert 'score=~"1|2|3"' in specs["reservation-policy"]["sli"]["events"]["errorQuery"]
    assert specs["restaurant-reservation"]["alerting"]["pageAlert"]["labels"]["alerting"] == "page"
    documents = list(yaml.safe_load_all(cli(workspace, "export", "--format", "openslo", "--slo",
                                            "restaurant-reservation").stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("Service", "rubric-monitor"), ("SLO", "restaurant-reservation")]
    assert documents[1]["spec"]["objectives"] == [{"displayName": "restaurant-reservation", "target": 0.95}]
    assert documents[1]["spec"]["timeWindow"] == [{"duration": "28d", "isRolling": True}]


def test_slo_status_shows_budget_burn_rates_and_the_evaluations_behind_them(workspace: Path) -> None:
    text = cli(workspace, "status").stdout
    block = text[text.index("SLO restaurant-reservation"):]
    # 28 days: 196 good of 200 (burn 0.4, 60 % of the budget left); the last hour: 36 of 40 (burn 2), which
    # spends the 60 % in 0.6 x 28 d / 2 = 8.4 days.
    assert "error budget left: 60.0% of 28d (exhausted in 8.4d at the burn rate of the last hour)" in block
    assert "alerts: page ok, ticket ok" in block
    rows = {line.split()[0]: line.split()[1:] for line in block.splitlines()[4:12]}
    assert rows["1h"] == ["0.900", "2.00", "36", "40", "0"]
    assert rows["28d"] == ["0.980", "0.40", "196", "200", "0"]
    assert rows["5m"] == ["-", "-", "0", "0", "0"]  # the last evaluation was ten minutes ago
    policy = text[text.index("SLO reservation-policy"):text.index("SLO restaurant-reservation")]
    assert "restaurant-reservation policy_enforcement >= 4 for reservation-*: 0.9 over 7d" in policy
    assert "1h         0.900    1.00       36       40         0" in policy


def test_slo_status_json(workspace: Path) -> None:
    found: list[dict[str, Any]] = json.loads(cli(workspace, "status", "--json", "--slo", "restaurant-reservation")
                                             .stdout)
    (status,) = found
    assert (status["slo"], status["objective"], status["window"]) == ("restaurant-reservation", 0.95, "28d")
    assert status["budget_remaining"] == pytest.approx(0.6)
    assert status["exhaustion_seconds"] == pytest.approx(0.6 * 28 * 86400 / 2.0)
    assert status["alerts"] == {"page": "ok", "ticket": "ok"} and status["cannot_judge"] == []
    assert status["windows"]["1h"] == {"good": 36, "scored": 40, "unscored": 0, "sli": 0.9,
                                       "burn_rate": pytest.approx(2.0)}


def test_slo_status_without_slos(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples" / "rubrics", tmp_path / "rubrics")
    rubric = tmp_path / "rubrics" / "restaurant-reservation.yaml"
    data = yaml.safe_load(rubric.read_text(encoding="utf-8"))
    data.pop("slo")
    rubric.write_text(yaml.safe_dump(data), encoding="utf-8")
    write_config(tmp_path / "config.yaml", {"rubrics": {"directory": str(tmp_path / "rubrics")},
                                            "store": {"url": f"sqlite:///{tmp_path / 'r.db'}"}})
    done = run_cli(["slo", "status", "--config", str(tmp_path / "config.yaml")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "no SLO defined (settings slos:, or a rubric's slo: block; docs/slo.md)\n"


def test_check_lists_the_slos(workspace: Path) -> None:
    done = run_cli(["check", "--config", str(workspace / "config.yaml")], workspace)
    assert done.returncode == 0, done.stderr
    rubric_file = workspace / "rubrics" / "restaurant-reservation.yaml"
    assert "slo reservation-policy: restaurant-reservation policy_enforcement >= 4 for reservation-*: 0.9 over 7d " \
           "(from settings)" in done.stdout
    assert f"slo restaurant-reservation: restaurant-reservation passes for reservation-*: 0.95 over 28d (from " \
           f"{rubric_file})" in done.stdout


def test_check_refuses_bad_slo_definitions_naming_the_setting_or_the_file(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples" / "rubrics", tmp_path / "rubrics")
    rubric_file = tmp_path / "rubrics" / "restaurant-reservation.yaml"
    base = {"rubrics": {"directory": str(tmp_path / "rubrics")}, "store": {"url": f"sqlite:///{tmp_path / 'r.db'}"}}

    def check(slos: list[dict[str, Any]]) -> str:
        done = run_cli(["check", "--config", str(write_config(tmp_path / "c.yaml", {**base, "slos": slos}))],
                       tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        return done.stderr

    # An unknown rubric, and a name the rubric file's SLO already has: both named, at once.
    errors = check([{"name": "restaurant-reservation", "rubric": "restaurant-reservation", "objective": 0.9},
                    {"name": "other", "rubric": "nope", "objective": 0.9},
                    {"name": "accuracy", "rubric": "restaurant-reservation", "objective": 0.9, "dimension": "nope",
                     "min_score": 4}])
    assert "settings: slos.1.rubric: no active rubric named 'nope'" in errors
    assert "settings: slos.2.dimension: rubric restaurant-reservation has no dimension 'nope'" in errors
    assert (f"{rubric_file}: slo.name: SLO name 'restaurant-reservation' is already defined in settings"
            in errors)
    errors = check([{"name": "a", "rubric": "restaurant-reservation", "objective": 1.5, "window": "2x"},
                    {"name": "b", "rubric": "restaurant-reservation", "objective": 0.9,
                     "alerting": {"page": {"windows": [{"burn_rate": 2, "long": "5m", "short": "1h"}]}}}])
    assert "c.yaml: slos.0.objective: Input should be less than 1" in errors
    assert "c.yaml: slos.0.window: '2x' is not a duration like 5m, 1h, 28d or 4w" in errors
    assert "c.yaml: slos.1.alerting.page.windows.0: " in errors and "must be shorter than the long window" in errors
    # In a rubric file: the file and the field.
    text = rubric_file.read_text(encoding="utf-8")
    rubric_file.write_text(text.replace("  window: 28d", "  window: 30m"), encoding="utf-8")
    assert f"{rubric_file}: slo.window: an SLO window is at least 1h" in check([])
