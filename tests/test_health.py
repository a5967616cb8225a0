"""Probes as Kubernetes sees them: ``/healthz`` degraded when the last cycle failed or is stale, ``/readyz`` not
ready when the store or the source is unreachable (SQLite and PostgreSQL)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy
from prometheus_client import CollectorRegistry

from monitor.app import build_monitor
from monitor.daemon.http import HealthState, MonitorHTTPServer
from monitor.daemon.loop import readiness_problem
from monitor.metrics import MonitorMetrics
from monitor.metrics.exposition import Exposition
from monitor.models import utc_now
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, require_postgres, verdict
from tests.test_daemon import get


def serve(health: HealthState, ready: Callable[[], str | None] = lambda: None) -> MonitorHTTPServer:
    registry = CollectorRegistry()
    server = MonitorHTTPServer("127.0.0.1", 0, Exposition(registry, MonitorMetrics(registry).quality), health,
                               ready)
    server.start()
    return server


def test_healthz_fails_when_no_cycle_finished_for_a_few_intervals() -> None:
    health = HealthState(interval=timedelta(seconds=60))
    now = utc_now()
    assert health.problems(now) == []
    assert health.problems(now + timedelta(minutes=3, seconds=59)) == []
    [stale] = health.problems(now + timedelta(minutes=4, seconds=1))
    assert stale.startswith("stale: no cycle finished 241s ago (interval 60s)")
    health.cycle_finished([])
    assert health.problems() == []

    # Staleness is shown by moving the last cycle back in time, not by waiting for it: no clock race.
    quick = HealthState(interval=timedelta(seconds=1), stale_after=timedelta(minutes=10))
    server = serve(quick)
    try:
        host, port = server.address
        quick.cycle_finished([])
        assert get(f"http://{host}:{port}/healthz")[0] == 200
        quick.cycle_finished(["source: SourceError: boom"])
        status, body = get(f"http://{host}:{port}/healthz")
        assert status == 503 and "last cycle: source: SourceError: boom" in body
        quick.cycle_finished([])
        with quick._lock:
            quick.last_finished_at = utc_now() - timedelta(minutes=11)
        status, body = get(f"http://{host}:{port}/healthz")
        assert status == 503 and "stale: the last cycle finished 660s ago" in body
    finally:
        server.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    shutil.copytree(REPO / "examples" / "traces", tmp_path / "traces")
    yield tmp_path


def test_readyz_fails_while_the_source_cannot_be_read(workdir: Path) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        monitor = build_monitor(Settings(**judge_config(
            judge.base_url, source={"kind": "otlp_file", "path": str(workdir / "traces")},
            rubrics={"directory": str(REPO / "examples" / "rubrics")},
            store={"url": f"sqlite:///{workdir / 'results.db'}"})))
        server = serve(monitor.health, lambda: readiness_problem(monitor))
        url = "http://{}:{}/readyz".format(*server.address)
        try:
            assert monitor.run_cycle().ok
            assert get(url)[0] == 200
            (workdir / "traces").rename(workdir / "gone")
            assert not monitor.run_cycle().ok
            status, body = get(url)
            assert status == 503 and "source otlp_file" in body and "neither a file nor a directory" in body
            (workdir / "gone").rename(workdir / "traces")
            assert monitor.run_cycle().ok
            assert get(url)[0] == 200
        finally:
            server.close()
            monitor.close()


def test_readyz_fails_while_the_store_is_unreachable(workdir: Path) -> None:
    postgres = require_postgres()
    admin = sqlalchemy.create_engine(postgres, isolation_level="AUTOCOMMIT")
    url = sqlalchemy.make_url(postgres).set(database="rm_health_probe")
    with admin.connect() as conn:
        conn.exec_driver_sql("DROP DATABASE IF EXISTS rm_health_probe WITH (FORCE)")
        conn.exec_driver_sql("CREATE DATABASE rm_health_probe")
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        monitor = build_monitor(Settings(**judge_config(
            judge.base_url, source={"kind": "otlp_file", "path": str(workdir / "traces")},
            rubrics={"directory": str(REPO / "examples" / "rubrics")},
            store={"url": url.render_as_string(hide_password=False)})))
        server = serve(monitor.health, lambda: readiness_problem(monitor))
        base = "http://{}:{}".format(*server.address)
        try:
            assert monitor.run_cycle().ok
            assert get(base + "/readyz")[0] == 200
            with admin.connect() as conn:
                conn.exec_driver_sql("DROP DATABASE rm_health_probe WITH (FORCE)")
            status, body = get(base + "/readyz")
            assert status == 503 and '"store: ' in body and "rm_health_probe" in body
            assert not monitor.run_cycle().ok
            status, body = get(base + "/healthz")
            assert status == 503 and "last cycle: store" in body
        finally:
            server.close()
            monitor.close()
            admin.dispose()
