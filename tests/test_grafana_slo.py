"""The SLO dashboard: every panel query, annotation and variable answered by a real Prometheus that evaluates the
generated SLO rules (``rubric-monitor slo rules``, evaluated every second) over synthetic series.

The synthetic exporter serves the quality counters the rules read (``rubric_monitor_evaluations_total`` by
outcome, ``rubric_monitor_dimension_scores_total`` by score, ``rubric_monitor_rubric_info``) growing at fixed
rates, and the daemon's SLO gauges as the daemon's own collector (``SloMetrics``) renders them. One SLO fails
three evaluations out of four (a burn rate of 15: its page and ticket fire), one is healthy (a dimension SLO).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from monitor.metrics.slo import SloFigures, SloMetrics
from monitor.slo.rules import rule_groups
from monitor.slo.spec import SloSettings, resolve
from tests.conftest import require_binary
from tests.test_daemon import free_port, get, wait_for
from tests.test_grafana import dashboards, panels, query, resolve_variables, run, substitute

pytestmark = pytest.mark.slow

NAME = "quality-slos.json"
SLOS = [
    {"name": "reservations", "rubric": "restaurant-reservation", "agents": ["reservation-*"], "objective": 0.95,
     "alerting": {"min_evaluations": 5}},
    {"name": "booking-accuracy", "rubric": "booking", "agents": ["booking-*"], "objective": 0.9, "window": "7d",
     "dimension": "accuracy", "min_score": 4, "alerting": {"min_evaluations": 5}},
]
RATES = {  # per second, by series
    ("restaurant-reservation", "reservation-web", "pass"): 1, ("restaurant-reservation", "reservation-web", "fail"): 3,
    ("restaurant-reservation", "reservation-web", "unscored"): 0.2,
    ("booking", "booking-bot", "pass"): 2, ("booking", "booking-bot", "fail"): 0,
}
SCORE_RATES = {5: 2, 4: 1, 3: 0.1}
"""The booking agent's accuracy scores per second: 97 % at least 4, an SLI above its 0.9 objective."""


class Exporter:
    """Counters that grow at ``RATES`` since start, and the daemon's SLO gauges."""

    def __init__(self) -> None:
        self.started = time.time()
        self.gauges = SloMetrics()
        registry = CollectorRegistry()
        registry.register(self.gauges)
        windows = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
        self.gauges.publish([
            SloFigures("reservations", "restaurant-reservation", 0.95, -14.0, dict.fromkeys(windows, 15.0),
                       dict.fromkeys(windows, (25, 100, 5)), False, {"page": True, "ticket": True}),
            SloFigures("booking-accuracy", "booking", 0.9, 0.7, dict.fromkeys(windows, 0.3),
                       dict.fromkeys(windows, (97, 100, 0)), False, {"page": False, "ticket": False}),
        ])
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                body = outer.text().encode() + generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def text(self) -> str:
        elapsed = time.time() - self.started
        lines = ["# TYPE rubric_monitor_evaluations_total counter"]
        for (rubric, agent, outcome), rate in RATES.items():
            lines.append(f'rubric_monitor_evaluations_total{{rubric="{rubric}",rubric_version="v1",agent="{agent}",'
                         f'outcome="{outcome}"}} {int(rate * elapsed)}')
        lines.append("# TYPE rubric_monitor_dimension_scores_total counter")
        for score, rate in SCORE_RATES.items():
            lines.append(f'rubric_monitor_dimension_scores_total{{rubric="booking",rubric_version="v1",'
                         f'agent="booking-bot",dimension="accuracy",score="{score}"}} {int(rate * elapsed)}')
        lines.append("# TYPE rubric_monitor_rubric_info gauge")
        for rubric in ("restaurant-reservation", "booking"):
            lines.append(f'rubric_monitor_rubric_info{{rubric="{rubric}",rubric_version="v1",kind="weighted"}} 1')
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Loaded:
    prometheus: str
    start: float
    end: float


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("grafana-slo")
    rules = rule_groups(resolve([SloSettings.model_validate(s) for s in SLOS]), 0.2, interval="1s")
    (tmp / "slo-rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    exporter = Exporter()
    port = free_port()
    (tmp / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "slo-rules.yaml")],
        "scrape_configs": [{"job_name": "rubric-monitor", "static_configs": [{"targets": [exporter.target]}]}],
    }), encoding="utf-8")
    start = time.time()
    prometheus = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(tmp / "prometheus.log").open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            try:
                return get(f"{base}/-/ready")[0] == 200
            except OSError:
                return False

        def paged() -> bool:
            return bool(query(base, 'ALERTS{alertname="RubricSLOBurn", alerting="page", alertstate="firing"}'))

        wait_for(ready, 60, "Prometheus to start")
        wait_for(paged, 60, f"the page of the failing SLO to fire ({tmp / 'prometheus.log'})")
        # A few evaluations of both SLOs' budgets and of the page: every range query (a point every 2 s) meets
        # them.
        wait_for(lambda: len(query(base, "count_over_time(slo:rubric_monitor_slo_error_budget_remaining:ratio[1m]) "
                                         ">= 5")) == 2, 30, "five evaluations of both SLOs' budgets")
        wait_for(lambda: bool(query(base, 'count_over_time(ALERTS{alertname="RubricSLOBurn", alerting="page", '
                                          'alertstate="firing"}[1m]) >= 5')), 30, "five evaluations of the page")
        yield Loaded(base, start, time.time())
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=60)
        exporter.close()


def test_every_slo_panel_query_runs_against_prometheus_and_returns_data(loaded: Loaded) -> None:
    dashboard = dashboards()[NAME]
    values = resolve_variables(loaded.prometheus, dashboard, loaded.start, loaded.end)
    targets = [(p["title"], t) for p in panels(dashboard) for t in p["targets"]]
    targets += [(f"annotation: {a['name']}", a["target"]) for a in dashboard["annotations"]["list"]
                if "expr" in a.get("target", {})]
    assert len(targets) >= 12
    empty = []
    for title, target in targets:
        expr = substitute(target["expr"], values, loaded.end - loaded.start)
        if not run(loaded.prometheus, expr, bool(target.get("instant")), loaded.start, loaded.end):
            empty.append(f"{title} [{target['refId']}]: {expr}")
    assert empty == [], "panels without data:\n" + "\n".join(empty)


def _instant(loaded: Loaded, title: str, ref: str = "A") -> list[dict[str, Any]]:
    dashboard = dashboards()[NAME]
    target = next(t for p in panels(dashboard) if p["title"] == title for t in p["targets"] if t["refId"] == ref)
    return query(loaded.prometheus, substitute(target["expr"], {"slo": ".*"}, loaded.end - loaded.start))


def test_slo_panels_show_the_burning_slo_and_the_healthy_one(loaded: Loaded) -> None:
    budget = {r["metric"]["slo"]: float(r["value"][1]) for r in _instant(loaded, "Error budget left")}
    # Three failures in four against a 5 % budget: burning 15 times too fast, the budget overspent; the dimension
    # SLO (97 % of scores at least 4 against 90 %) keeps most of its budget.
    assert budget["reservations"] < 0 < budget["booking-accuracy"] <= 1
    burn = {(r["metric"]["slo"], r["metric"]["window"]): float(r["value"][1])
            for r in _instant(loaded, "Burn rates now")}
    assert {w for s, w in burn if s == "reservations"} == {"5m", "30m", "1h", "2h", "6h", "1d", "3d"}
    assert burn[("reservations", "5m")] == pytest.approx(15, rel=0.25)
    assert burn[("booking-accuracy", "1h")] < 1
    sli = {r["metric"]["slo"]: float(r["value"][1]) for r in _instant(loaded, "SLI over the SLO window and objective")}
    assert sli["reservations"] == pytest.approx(0.25, abs=0.06) and sli["booking-accuracy"] > 0.9
    firing = {(r["metric"]["slo"], r["metric"]["alerting"]) for r in _instant(loaded, "Firing now")
              if r["metric"]["alertstate"] == "firing"}
    assert ("reservations", "page") in firing and not any(s == "booking-accuracy" for s, _ in firing)
    scored = {(r["metric"]["slo"], r["metric"]["window"]) for r in _instant(loaded, "Scored evaluations per window")}
    assert ("booking-accuracy", "5m") in scored

