"""Metrics that scale: a scrape serves state prepared at the end of a cycle and never reads the store; the series
count is the documented formula; the text is valid for promtool; OpenMetrics carries exemplars; the rolling
windows kept incrementally equal a fresh read of the rollups."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event

from monitor.app import build_monitor
from monitor.daemon.http import HealthState, MonitorHTTPServer
from monitor.evaluators.prompts import PROMPT_VERSION
from monitor.metrics import SKIP_REASONS, MonitorMetrics
from monitor.metrics.exposition import Exposition
from monitor.metrics.quality import QUALITY_FAMILIES
from monitor.metrics.rollups import WindowTotals, parse_window
from monitor.models import DimensionScore, EvaluationResult
from monitor.settings import Settings
from monitor.store.base import bucket_of
from monitor.store.sql import SqlStore
from tests.conftest import REPO, require_binary
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def get(url: str, **headers: str) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(response.headers), response.read()


def result(rubric: str, agent: str, outcome: str, dims: int, at: datetime, trace: str = "",
           conversation: str = "c", revision: int = 0) -> EvaluationResult:
    scored = outcome != "unscored"
    return EvaluationResult(
        conversation_id=conversation, trace_ids=(trace,) if trace else (), agent=agent, rubric=rubric,
        rubric_version="1", rubric_kind="weighted", judge_model="m", outcome=outcome,
        score=(0.8 if outcome == "pass" else 0.3) if scored else None, revision=revision, evaluated_at=at,
        dimension_scores=tuple(DimensionScore(id=f"dim{d}", score=1 + (d + len(agent)) % 5, applicable=True,
                                              weight=1) for d in range(dims)) if scored else (),
    )


class Served:
    """Store, metrics and the real HTTP endpoint, as the daemon wires them."""

    def __init__(self, tmp: Path, windows: tuple[str, ...] = ("1h", "24h"), max_agents: int = 50) -> None:
        self.store = SqlStore(f"sqlite:///{tmp / 'results.db'}")
        self.registry = CollectorRegistry()
        self.metrics = MonitorMetrics(self.registry, [parse_window(w) for w in windows], max_agents)
        self.server = MonitorHTTPServer("127.0.0.1", 0, Exposition(self.registry, self.metrics.quality),
                                        HealthState(interval=timedelta(seconds=60)), lambda: None)
        self.server.start()
        host, port = self.server.address
        self.url = f"http://{host}:{port}/metrics"

    def fill(self, rubrics: int, agents: int, dims: int, now: datetime) -> None:
        number = 0
        for r in range(rubrics):
            self.metrics.rubric_active(f"rubric-{r}")
            for a in range(agents):
                for outcome, hours in (("pass", 0), ("fail", 3), ("unscored", 0)):
                    number += 1
                    done = result(f"rubric-{r}", f"agent-{a}", outcome, dims, now - timedelta(hours=hours),
                                  trace=f"{number:032x}", conversation=f"c{number}")
                    assert self.store.record(done)
                    self.metrics.record_result(done)
        self.metrics.quality.refresh(self.store, now)

    def close(self) -> None:
        self.server.close()
        self.store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    served = Served(tmp_path, max_agents=3)
    yield served
    served.close()


def test_scraping_the_daemon_never_queries_the_store(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    shutil.copy(REPO / "examples" / "traces" / "sample.jsonl", tmp_path / "traces")
    shutil.copytree(REPO / "examples" / "rubrics", tmp_path / "rubrics")
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        monitor = build_monitor(Settings(**judge_config(
            judge.base_url, source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
            rubrics={"directory": str(tmp_path / "rubrics")}, store={"url": f"sqlite:///{tmp_path / 'r.db'}"})))
        assert monitor.run_cycle().ok
    statements: list[str] = []
    engine: Any = monitor.store._engine
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(str(args[2])))
    server = MonitorHTTPServer("127.0.0.1", 0, Exposition(monitor.registry, monitor.metrics.quality),
                               monitor.health, lambda: None)
    server.start()
    try:
        url = "http://{}:{}/metrics".format(*server.address)
        _, text = get(url)
        _, openmetrics = get(url, Accept=OPENMETRICS)
        headers, zipped = get(url, **{"Accept-Encoding": "gzip"})
        assert statements == []  # not one query for three scrapes
        monitor.store.close()  # and with the store gone, the same state is served
        _, after = get(url)
    finally:
        server.close()
        monitor.close()
    pass_rates = [s for f in text_string_to_metric_families(text.decode()) for s in f.samples
                  if s.name == "rubric_monitor_pass_rate"]
    assert {s.labels["agent"] for s in pass_rates} == {"reservation-assistant"} and len(pass_rates) == 2
    assert b"rubric_monitor_dimension_scores_total{" in text and text == after
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(zipped) == text
    assert openmetrics.endswith(b"# EOF\n") and openmetrics.count(b"# EOF") == 1
    info = f'rubric_monitor_judge_info{{kind="openai",model="judge-model",prompt_version="{PROMPT_VERSION}"}} 1.0'
    assert info.encode() in text
    assert b'rubric_monitor_judge_requests_total{model="judge-model",outcome="timeout"} 0.0' in text
    # Each active rubric's skip reasons exist from the start, at zero until counted.
    assert b'rubric_monitor_evaluations_skipped_total{reason="cycle_cap",rubric="restaurant-reservation"} 0.0' in text
    assert b"_created" not in text + openmetrics


def quality_series(text: str) -> dict[str, int]:
    names = {spec.name for spec in QUALITY_FAMILIES}
    counts = dict.fromkeys(names, 0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                counts[sample.name] += 1
    return counts


def documented_series(rubrics: int, agents: int, dimensions: int, windows: int) -> int:
    """docs/metrics.md: per (rubric, version, agent label), 4 + 6·D counters and W·(2 + D) windowed gauges."""
    return rubrics * agents * (4 + 6 * dimensions + windows * (2 + dimensions))


def test_series_count_matches_the_documented_formula(served: Served) -> None:
    # 5 agents per rubric with a limit of 3: agents 3 and 4 share agent="other", so 4 agent labels per rubric.
    served.fill(rubrics=3, agents=5, dims=4, now=datetime.now(UTC))
    _, body = get(served.url)
    text = body.decode()
    counts = quality_series(text)
    assert sum(counts.values()) == documented_series(rubrics=3, agents=4, dimensions=4, windows=2), counts
    agents = {s.labels["agent"] for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "rubric_monitor_evaluations_total"}
    assert agents == {"agent-0", "agent-1", "agent-2", "other"}
    skipped = [s for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "rubric_monitor_evaluations_skipped_total"]
    assert len(skipped) == 3 * len(SKIP_REASONS) and all(s.value == 0 for s in skipped)
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert "R·A·(4 + 6·D + W·(2 + D))" in doc


def test_promtool_accepts_a_realistic_scrape(served: Served) -> None:
    promtool = require_binary("promtool")
    served.fill(rubrics=2, agents=4, dims=3, now=datetime.now(UTC))
    _, body = get(served.url)  # promtool reads the text format; OpenMetrics is checked by its parser below
    checked = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30,
                             check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert b"rubric_monitor_dimension_scores_total{" in body and b"rubric_monitor_judge_requests_total" in body
    assert b'rubric_monitor_build_info{version="' in body and b"_created" not in body


def test_openmetrics_carries_exemplars_with_the_trace_id(served: Served) -> None:
    served.fill(rubrics=1, agents=2, dims=2, now=datetime.now(UTC))
    headers, body = get(served.url, Accept=OPENMETRICS)
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in parse_openmetrics(body.decode())}
    evaluations = families["rubric_monitor_evaluations"]
    passed = [s for s in evaluations.samples if s.labels["outcome"] == "pass" and s.labels["agent"] == "agent-1"]
    assert [s.exemplar.labels for s in passed if s.exemplar] == [{"trace_id": f"{4:032x}"}]
    score_sum = [s for s in families["rubric_monitor_score_sum"].samples if s.exemplar]
    assert score_sum and all(len(s.exemplar.labels["trace_id"]) == 32 for s in score_sum if s.exemplar)
    assert any(s.exemplar for s in families["rubric_monitor_dimension_scores"].samples)
    # The text format has no exemplars, and the same values.
    _, text = get(served.url)
    assert b" # {" not in text


def test_windows_kept_across_hours_equal_a_fresh_read(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'w.db'}")
    windows = [parse_window(w) for w in ("1h", "3h", "24h")]
    kept = WindowTotals(windows)
    base = datetime.fromtimestamp(bucket_of(datetime.now(UTC).timestamp()), UTC) - timedelta(hours=30)
    number = 0

    def record(at: datetime, **kwargs: Any) -> None:
        nonlocal number
        number += 1
        kwargs.setdefault("conversation", f"c{number}")
        store.record(result("r", f"a{number % 3}", ("pass", "fail", "unscored")[number % 3], 2, at, **kwargs))

    for step, hours in enumerate((0.5, 1.5, 2.2, 2.9, 6.5, 7.5, 29.9)):
        now = base + timedelta(hours=hours)
        for minutes in (-200, -61, -5, 0):
            record(now + timedelta(minutes=minutes))
        record(now - timedelta(hours=2), conversation="c2", revision=step + 1)  # supersedes, in a past hour
        kept.refresh(store, now.timestamp())
        fresh = WindowTotals(windows)
        fresh.refresh(store, now.timestamp())
        for window in windows:
            rounded = [{key: (*sums[:3], round(sums[3], 6)) for key, sums in totals.sums(window)}
                       for totals in (kept, fresh)]
            assert rounded[0] == rounded[1] and rounded[0], (hours, window.name)
    store.close()


def test_db_rebuild_rollups_restores_them_from_the_results(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    now = datetime.now(UTC)
    for number, outcome in enumerate(("pass", "fail", "unscored", "pass")):
        store.record(result("r", "a", outcome, 3, now - timedelta(hours=number), conversation=f"c{number}"))
    hours = (bucket_of(now.timestamp()) - 5 * 3600, bucket_of(now.timestamp()))
    before = store.rollup_sums(*hours)
    with store._engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM quality_rollups")
    assert store.rollup_sums(*hours) == {}
    store.close()
    config = write_config(tmp_path / "config.yaml", {"store": {"url": f"sqlite:///{tmp_path / 'results.db'}"}})
    done = run_cli(["db", "rebuild-rollups", "--config", str(config)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rebuilt 13 hourly rollup rows" in done.stdout  # 4 hours × 1 overall row + 3 scored × 3 dimensions
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    assert store.rollup_sums(*hours) == before
    store.close()


def test_after_a_restart_the_windows_come_back_and_every_label_set_exists_at_zero(served: Served) -> None:
    served.fill(rubrics=2, agents=2, dims=2, now=datetime.now(UTC))
    _, before = get(served.url)
    restarted = MonitorMetrics(CollectorRegistry(), [parse_window(w) for w in ("1h", "24h")], 3)
    restarted.quality.refresh(served.store, datetime.now(UTC))
    after = restarted.quality.rendered.text.decode()
    old = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(before.decode()) for s in f.samples}
    new = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(after)
           for s in f.samples}
    quality = {spec.name for spec in QUALITY_FAMILIES}
    assert {k for k in old if k[0] in quality} == set(new)  # the same series
    for key, value in new.items():
        if key[0].endswith("_total"):
            assert value == 0, key  # counters start again at zero
        else:
            assert value == old[key], key  # the windows are read back from the rollups
