"""Drift canaries through the composition root, with the real openai client against a scripted judge: a canary
run agrees with an honest judge, detects a judge whose verdicts were shifted, exports it, warns on /healthz,
tells the regression detector (``drifting_rubrics``), survives a restart and stays within the rubric's budget.
Also the embedded judge's production warning."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.app import EMBEDDED_JUDGE_WARNING, Monitor, build_monitor, embedded_judge_warning
from monitor.daemon.http import MonitorHTTPServer
from monitor.models import utc_now
from monitor.settings import Settings
from monitor.trust.canary import drifting_rubrics
from tests.conftest import TAU_BENCH
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.helpers import judge_config, requested_dimensions
from tools.tau_calibration_set import calibration_records, write_jsonl

CANARIES = 20
WRITE = re.compile(r'<tool_call id="[^"]*" name="(?:book_reservation|cancel_reservation|update_reservation_\w+)"')
RUBRIC = "task-completion"


def honest_scores(prompt: str) -> dict[str, int]:
    """The verdicts people agreed on: the task is complete when a reservation was changed."""
    return {"task_completion": 5 if WRITE.search(prompt) else 1, "general_quality": 4}


def shifted_scores(prompt: str) -> dict[str, int]:
    """The same judge two points harsher on every dimension (a model update, say)."""
    return {d: max(1, s - 2) for d, s in honest_scores(prompt).items()}


def overall(scores: dict[str, int]) -> float:
    return (10 * scores["task_completion"] + 5 * scores["general_quality"]) / 75


def passes(scores: dict[str, int]) -> bool:
    return overall(scores) >= 0.5 and 1 not in scores.values()


def reply(scoring: Callable[[str], dict[str, int]]) -> Callable[[Recorded], Reply]:
    def handler(request: Recorded) -> Reply:
        scores = scoring(str(request.body["messages"][-1]["content"]))
        return completion(json.dumps({"dimensions": {
            d: {"reason": "scripted", "applicable": True, "score": scores[d]} for d in requested_dimensions(request)}}))
    return handler


def tau_records() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(TAU_BENCH.read_text(encoding="utf-8"))[:CANARIES]
    return records


def writes(record: dict[str, Any]) -> bool:
    return any(re.fullmatch(r"book_reservation|cancel_reservation|update_reservation_\w+", c["function"]["name"])
               for m in record["traj"] for c in (m.get("tool_calls") or []))


@dataclass
class Setup:
    tmp: Path
    server: ScriptedOpenAIServer
    handler: list[Callable[[Recorded], Reply]]

    def monitor(self, **rubric: Any) -> Monitor:
        data = {"name": RUBRIC, "pass_threshold": 0.5, "dimensions": [
            {"id": "task_completion", "description": "The user's task is completed.", "weight": 10,
             "always_applicable": True}],
            "canary": {"conversations": "canary/conversations.jsonl", "labels": "canary/labels.jsonl"}, **rubric}
        (self.tmp / "rubrics" / f"{RUBRIC}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        config = judge_config(
            self.server.base_url,
            source={"kind": "otlp_file", "path": str(self.tmp / "traces")},
            rubrics={"directory": str(self.tmp / "rubrics")},
            store={"url": f"sqlite:///{self.tmp / 'results.db'}"},
        )
        return build_monitor(Settings(**config))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    (tmp_path / "traces").mkdir()
    canary = tmp_path / "rubrics" / "canary"
    canary.mkdir(parents=True)
    conversations, _ = calibration_records(tau_records())
    write_jsonl(canary / "conversations.jsonl", conversations)
    # The agreed verdicts: what the honest judge says, as people confirmed.
    labels = [{"id": c["id"], "passed": writes(r), "score": overall({"task_completion": 5 if writes(r) else 1,
                                                                     "general_quality": 4})}
              for c, r in zip(conversations, tau_records(), strict=True)]
    (canary / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels), encoding="utf-8")
    handler = [reply(honest_scores)]
    with ScriptedOpenAIServer(lambda r: handler[0](r)) as server:
        yield Setup(tmp_path, server, handler)


def gauge(monitor: Monitor, name: str, **labels: str) -> float | None:
    return monitor.registry.get_sample_value(name, labels)


def healthz(monitor: Monitor) -> tuple[int, dict[str, Any]]:
    server = MonitorHTTPServer("127.0.0.1", 0, monitor.registry, monitor.health, lambda: None)
    server.start()
    try:
        host, port = server.address
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=10) as response:
            return response.status, json.loads(response.read())
    finally:
        server.close()


def test_a_canary_run_detects_a_judge_whose_verdicts_shifted(setup: Setup) -> None:
    monitor = setup.monitor()
    try:
        monitor.run_cycle()  # no traces: the cycle only runs the canary set, which is due
        assert setup.server.count == CANARIES
        assert gauge(monitor, "rubric_monitor_canary_agreement", rubric=RUBRIC, judge_model="judge-model") == 1.0
        assert gauge(monitor, "rubric_monitor_canary_score_shift", rubric=RUBRIC, judge_model="judge-model") == 0.0
        assert gauge(monitor, "rubric_monitor_judge_drift", rubric=RUBRIC) == 0.0
        assert drifting_rubrics(monitor.store) == set()
        assert healthz(monitor) == (200, {"status": "ok", "problems": [], "warnings": []})
        assert monitor.store.results() == []  # canary verdicts never become quality results

        monitor.run_cycle()  # not due again before canary.interval_seconds (a day)
        assert setup.server.count == CANARIES

        setup.handler[0] = reply(shifted_scores)
        assert monitor.canaries is not None
        [run] = monitor.canaries.run_due(utc_now() + timedelta(days=1, seconds=1))
        assert setup.server.count == 2 * CANARIES
    finally:
        monitor.close()
    agreed = [(writes(r), overall({"task_completion": 5 if writes(r) else 1, "general_quality": 4}))
              for r in tau_records()]
    judged = [shifted_scores('<tool_call id="x" name="book_reservation">' if w else "") for w, _ in agreed]
    expected_agreement = sum(passes(j) == w for j, (w, _) in zip(judged, agreed, strict=True)) / CANARIES
    expected_shift = sum(overall(j) - s for j, (_, s) in zip(judged, agreed, strict=True)) / CANARIES
    assert run.drift and run.judged == CANARIES
    assert run.agreement == pytest.approx(expected_agreement, abs=1e-6)
    assert run.score_shift == pytest.approx(expected_shift, abs=1e-6) and run.score_shift < -0.15
    assert gauge(monitor, "rubric_monitor_judge_drift", rubric=RUBRIC) == 1.0
    assert gauge(monitor, "rubric_monitor_canary_score_shift", rubric=RUBRIC,
                 judge_model="judge-model") == pytest.approx(expected_shift, abs=1e-6)
    assert drifting_rubrics(monitor.store) == {RUBRIC}

    # A restart neither forgets the drift nor re-runs the canaries early.
    again = setup.monitor()
    try:
        assert gauge(again, "rubric_monitor_judge_drift", rubric=RUBRIC) == 1.0
        status, body = healthz(again)
        assert status == 200 and body["status"] == "ok"  # a warning, not a failed probe
        assert body["warnings"] == [f"judge_drift: judge drift on rubric {RUBRIC} (JudgeDrift)"]
        again.run_cycle()
        assert setup.server.count == 2 * CANARIES
    finally:
        again.close()


def test_canary_runs_stay_within_the_rubrics_daily_budget(setup: Setup) -> None:
    monitor = setup.monitor(daily_budget_tokens=1)
    try:
        assert monitor.canaries is not None
        [run] = monitor.canaries.run_due(utc_now())
        # Evaluations already in flight finish; no new one starts once the budget is spent.
        assert run.judged == setup.server.count <= monitor.settings.judge.concurrency
        assert monitor.canaries.run_due(utc_now() + timedelta(days=1, seconds=1)) == []
        assert setup.server.count == run.judged
    finally:
        monitor.close()


def test_a_missing_canary_file_is_a_named_warning_not_a_crash(setup: Setup) -> None:
    (setup.tmp / "rubrics" / "canary" / "labels.jsonl").unlink()
    monitor = setup.monitor()
    try:
        assert monitor.run_cycle().ok
        _, body = healthz(monitor)
        [warning] = body["warnings"]
        assert warning.startswith(f"judge_drift: canary set of rubric {RUBRIC}: ") and "labels.jsonl" in warning
        assert setup.server.count == 0
    finally:
        monitor.close()


def test_the_embedded_judge_on_app_insights_is_a_warning() -> None:
    production = Settings(source={"kind": "app_insights", "workspace_id": "00000000-0000-0000-0000-000000000000"})
    assert embedded_judge_warning(production) == EMBEDDED_JUDGE_WARNING
    assert embedded_judge_warning(Settings()) is None  # the quick start: local judge, local files
    assert embedded_judge_warning(production.model_copy(update={"judge": production.judge.model_copy(
        update={"kind": "openai"})})) is None


def test_the_embedded_judge_on_app_insights_warns_at_start_and_on_healthz(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.conftest import REPO

    settings = Settings(
        source={"kind": "app_insights", "workspace_id": "00000000-0000-0000-0000-000000000000",
                "credential": {"kind": "token_env"}},
        rubrics={"directory": str(REPO / "examples" / "rubrics")},
        store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
    )
    with caplog.at_level("WARNING", logger="monitor.app"):
        monitor = build_monitor(settings)  # starts the embedded model; no cycle is run
    try:
        assert EMBEDDED_JUDGE_WARNING in caplog.text
        status, body = healthz(monitor)
        assert (status, body["status"], body["warnings"]) == (200, "ok", [f"judge: {EMBEDDED_JUDGE_WARNING}"])
    finally:
        monitor.close()
