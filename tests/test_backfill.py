"""``rubric-monitor backfill`` on SQLite and PostgreSQL: the window from the source, within a budget, live tables
untouched, progress exported, and resumed after a SIGKILL with every conversation scored exactly once."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from prometheus_client import CollectorRegistry

from monitor.app import run_backfill
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fleet import case_of, results_count, slow_verdict, wait_until, write_conversations
from tests.helpers import judge_config, store_test_url, write_config
from tools.tau_to_otlp import DEFAULT_START, RECORD_SPACING

PRICES = {"judge-model": {"input_per_million": 1000.0, "output_per_million": 0.0}}
"""100 prompt tokens per scripted reply: $0.10 per evaluation."""


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_test_url(request.param, tmp_path)


def config(tmp_path: Path, judge_url: str, store_url: str) -> dict[str, Any]:
    settings = judge_config(judge_url, source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
                            rubrics={"directory": str(REPO / "examples" / "rubrics")}, store={"url": store_url})
    settings["judge"].update({"prices": PRICES, "concurrency": 1})
    return settings


def table_counts(url: str) -> dict[str, int]:
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        found = {t: int(conn.execute(sqlalchemy.text(f"SELECT count(*) FROM {t}")).scalar_one())
                 for t in ("spans", "conversations", "checkpoints", "results")}
    engine.dispose()
    return found


def test_a_window_is_scored_within_its_budget_without_touching_live_tables(tmp_path: Path, store_url: str) -> None:
    write_conversations(tmp_path / "traces", 8)
    since = DEFAULT_START + RECORD_SPACING * 2  # conv-0002 ... conv-0006 start in [since, until)
    until = DEFAULT_START + RECORD_SPACING * 7
    registry = CollectorRegistry()
    with ScriptedOpenAIServer(slow_verdict(0.0)) as judge:
        settings = Settings(**config(tmp_path, judge.base_url, store_url))
        first = run_backfill(settings, "restaurant-reservation", since, until, 0.35, registry, io.StringIO())
        assert (first.status, first.total, first.done) == ("budget_spent", 5, 3)
        assert first.spent_usd == pytest.approx(0.3)
        assert judge.count == 3
        before = table_counts(store_url)
        assert before == {"spans": 0, "conversations": 0, "checkpoints": 0, "results": 3}  # live tables untouched
        assert registry.get_sample_value("rubric_monitor_backfill_progress_ratio",
                                         {"rubric": "restaurant-reservation"}) == pytest.approx(3 / 5)
        assert registry.get_sample_value("rubric_monitor_backfill_evaluations_total",
                                         {"rubric": "restaurant-reservation", "outcome": "pass"}) == 3

        # The same job again: its spend carries over, so the budget is still spent.
        again = run_backfill(settings, "restaurant-reservation", since, until, 0.35, out=io.StringIO())
        assert (again.status, again.done, judge.count) == ("budget_spent", 3, 3)
        # A larger budget finishes it; what was scored is not judged again.
        rest = run_backfill(settings, "restaurant-reservation", since, until, 1.0, out=io.StringIO())
        assert (rest.status, rest.done, rest.total) == ("done", 5, 5)
        assert judge.count == 5 and sorted(Counter(case_of(r) for r in judge.requests).values()) == [1] * 5
    assert {case_of(r) for r in judge.requests} == {f"conv-{n:04d}" for n in range(2, 7)}
    assert table_counts(store_url)["results"] == 5


def test_a_killed_backfill_resumes_and_scores_each_conversation_once(tmp_path: Path, store_url: str) -> None:
    write_conversations(tmp_path / "traces", 6)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRIC_MONITOR_")}
    env["PYTHONPATH"] = str(REPO)
    since = (DEFAULT_START - timedelta(minutes=1)).isoformat()
    until = (DEFAULT_START + timedelta(days=1)).isoformat()
    with ScriptedOpenAIServer(slow_verdict(0.5)) as judge:
        path = write_config(tmp_path / "config.yaml", config(tmp_path, judge.base_url, store_url))
        command = [sys.executable, "-m", "monitor", "backfill", "--config", str(path), "--rubric",
                   "restaurant-reservation", "--since", since, "--until", until]
        victim = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: results_count(store_url) >= 2, 90, "two results of the first run")
        finally:
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=30)
        calls_before = judge.count
        resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                                 check=False)
        assert resumed.returncode == 0, resumed.stderr
        assert "6 conversations in the window" in resumed.stderr and "done, 6/6" in resumed.stderr
    engine = sqlalchemy.create_engine(store_url)
    with engine.connect() as conn:
        ids = sorted(r[0] for r in conn.execute(sqlalchemy.text("SELECT conversation_id FROM results")))
        [job] = conn.execute(sqlalchemy.text("SELECT status, done, total FROM backfill_jobs")).all()
    engine.dispose()
    assert ids == [f"conv-{n:04d}" for n in range(6)]  # each exactly once
    assert tuple(job) == ("done", 6, 6)
    calls = Counter(case_of(r) for r in judge.requests)
    assert sum(calls.values()) <= 6 + 1 and calls_before >= 2  # at most the one in flight at the kill is repeated
