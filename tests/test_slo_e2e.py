"""SLO burn-rate alerts end to end on the real binaries: the daemon (a subprocess, scripted judge over HTTP) scores
a stream whose quality drops; a real Prometheus scrapes it and evaluates the SLO rules ``rubric-monitor slo rules``
prints; the page reaches a webhook receiver through a real Alertmanager (routed on ``alerting="page"``), and
passing conversations resolve it.

To be fast, the test SLO is scaled down through its configurable windows: window 1h, page at 14.4x over 10s and 3s
(the workbook's 1h and 5m), ticket at 3x over 20s and 5s, rules evaluated every second. The workbook's short
window asks for a burn that is still going on, so the stream is fed continuously (a batch of conversations every
half second) as real traffic would be.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fakes.receiver import Receiver
from tests.helpers import run_cli, write_config
from tests.test_alerts_e2e import judge, start_alertmanager, start_prometheus, write_stream
from tests.test_daemon import Daemon, daemon_config, free_port, get, wait_for

pytestmark = pytest.mark.slow

SLO = "reservations-fast"
PAGE_LABELS = {"severity": "critical", "team": "reservations"}


class Feeder:
    """Writes a batch of conversations every half second (all failing or all passing) until stopped."""

    numbers = itertools.count(1000, 10)

    def __init__(self, directory: Path, name: str, bad: bool, per_batch: int = 3) -> None:
        self._stop = threading.Event()
        self.batches = 0

        def feed() -> None:
            while True:
                write_stream(directory, f"{name}-{self.batches}", per_batch, 10 if bad else 0, next(self.numbers))
                self.batches += 1
                if self._stop.wait(0.5):
                    return

        self._thread = threading.Thread(target=feed, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    import urllib.parse

    status, body = get(f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    assert status == 200, body
    return list(json.loads(body)["data"]["result"])


def value(prometheus: str, expr: str) -> float | None:
    found = query(prometheus, expr)
    return float(found[0]["value"][1]) if found else None


def hook(receiver: Receiver, path: str, status: str) -> list[dict[str, Any]]:
    return [alert for r in receiver.on(path) for alert in r.json["alerts"]
            if alert["labels"]["alertname"] == "RubricSLOBurn" and alert["status"] == status]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    alertmanager_bin = require_binary("prometheus-alertmanager")
    prometheus_bin = require_binary("prometheus")
    daemon_port, am_port, prom_port = free_port(), free_port(), free_port()
    with Receiver() as receiver, ScriptedOpenAIServer(judge) as judge_server:
        config = daemon_config(tmp_path, judge_server.base_url, daemon_port)
        # Only this test's stream: the bundled traces are not part of it.
        for path in (tmp_path / "traces").iterdir():
            path.unlink()
        settings = json.loads(config.read_text())
        settings.update(interval_seconds=1, conversation={"idle_timeout_seconds": 0}, slos=[{
            "name": SLO, "rubric": "restaurant-reservation", "agents": ["reservation-*"], "objective": 0.95,
            "window": "1h", "alerting": {
                "min_evaluations": 10,
                "page": {"labels": PAGE_LABELS, "windows": [{"burn_rate": 14.4, "long": "10s", "short": "3s"}]},
                "ticket": {"labels": {"severity": "warning"},
                           "windows": [{"burn_rate": 3, "long": "20s", "short": "5s"}]}}}])
        write_config(config, settings)
        # The rules as a user makes them: the real CLI, this SLO only, evaluated every second.
        rules = tmp_path / "slo-rules.yaml"
        made = run_cli(["slo", "rules", "--config", str(config), "--slo", SLO, "--interval", "1s",
                        "--output", str(rules)], tmp_path)
        assert made.returncode == 0, made.stderr
        alertmanager = start_alertmanager(
            alertmanager_bin,
            {"receiver": "tickets", "group_by": ["alertname", "slo", "alerting"],
             "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h",
             "routes": [{"receiver": "pager", "matchers": ['alerting="page"']}]},
            [{"name": "pager", "webhook_configs": [{"url": receiver.url + "/page", "send_resolved": True}]},
             {"name": "tickets", "webhook_configs": [{"url": receiver.url + "/ticket", "send_resolved": True}]}],
            tmp_path, am_port)
        prometheus = start_prometheus(prometheus_bin, rules, tmp_path, prom_port, am_port, daemon_port)
        daemon = Daemon(config, tmp_path, daemon_port)
        try:
            yield {"receiver": receiver, "daemon": daemon, "prometheus": f"http://127.0.0.1:{prom_port}",
                   "traces": tmp_path / "traces", "rules": rules}
        finally:
            code = daemon.stop()
            prometheus.stop()
            alertmanager.stop()
            assert code == 0, daemon.log.read_text()[-3000:]


def test_a_quality_drop_burns_the_budget_pages_through_alertmanager_and_recovery_resolves(
        stack: dict[str, Any]) -> None:
    receiver: Receiver = stack["receiver"]
    prometheus: str = stack["prometheus"]
    selector = f'{{slo="{SLO}"}}'
    assert f"rubric-monitor-slo-{SLO}" in stack["rules"].read_text()

    # Good traffic: the SLI is recorded, the budget untouched, nobody paged.
    good = Feeder(stack["traces"], "good", bad=False)
    try:
        wait_for(lambda: (value(prometheus, f"slo:rubric_monitor_slo_scored:increase10s{selector}") or 0) >= 10, 90,
                 f"Prometheus to record the SLI of the good traffic ({stack['daemon'].log})")
        assert value(prometheus, f"slo:rubric_monitor_slo_error_budget_remaining:ratio{selector}") == 1
        assert value(prometheus, f"slo:rubric_monitor_slo_sli:ratio5m{selector}") == 1
    finally:
        good.stop()
    assert receiver.on("/page") == []

    # The drop: every conversation fails. The budget burns and the page reaches the pager's webhook.
    bad = Feeder(stack["traces"], "bad", bad=True)
    try:
        wait_for(lambda: hook(receiver, "/page", "firing"), 120,
                 "the SLO page to reach the webhook through Alertmanager")
        budget = value(prometheus, f"slo:rubric_monitor_slo_error_budget_remaining:ratio{selector}")
        assert budget is not None and budget < 1
        assert (value(prometheus, f"slo:rubric_monitor_slo_burn_rate:ratio3s{selector}") or 0) > 14.4
    finally:
        bad.stop()
    page = hook(receiver, "/page", "firing")[0]
    assert {k: page["labels"].get(k) for k in ("slo", "rubric", "alerting", "severity", "team")} == {
        "slo": SLO, "rubric": "restaurant-reservation", "alerting": "page", **PAGE_LABELS}
    assert page["annotations"]["summary"] == f"SLO {SLO} burns its error budget too fast (page)"
    assert "14.4x over 10s and 3s" in page["annotations"]["description"]
    assert all(a["labels"]["alerting"] == "page" for r in receiver.on("/page") for a in r.json["alerts"])

    # Recovery: passing conversations; the short window clears and the page resolves.
    good = Feeder(stack["traces"], "recovery", bad=False)
    try:
        wait_for(lambda: hook(receiver, "/page", "resolved"), 120, "the SLO page to resolve in Alertmanager")
    finally:
        good.stop()
    resolved = hook(receiver, "/page", "resolved")[0]
    assert resolved["labels"]["slo"] == SLO and resolved["endsAt"] > page["startsAt"]
