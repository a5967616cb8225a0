"""End to end on the real binaries: the daemon (a subprocess, scripted judge over HTTP) scores a stream whose
quality drops; its alert reaches a webhook receiver through a real Alertmanager, the shipped Prometheus rule fires
on the metrics a real Prometheus scrapes, and recovery resolves both. Then the judge model changes (a restart with
another model) in the middle of the stream: an annotation, and no alert."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.alerts.events import ALERT_NAME, ANNOTATION_NAME
from tests.conftest import REPO, require_binary
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.fakes.receiver import Receiver
from tests.helpers import SEED_FAIL_SCORES, SEED_PASS_SCORES, verdict, write_config
from tests.test_daemon import Daemon, daemon_config, free_port, get, samples, wait_for
from tools.chat_to_otlp import chat_record_to_spans

pytestmark = pytest.mark.slow

RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
BAD = "[quality=bad]"


def judge(request: Recorded) -> Reply:
    return verdict(request, SEED_FAIL_SCORES if BAD in request.prompt_text else SEED_PASS_SCORES)


def write_stream(directory: Path, name: str, count: int, bad: int, first: int) -> None:
    """``count`` conversations of the reservation assistant, ``bad`` of every 10 marked for the judge to fail."""
    from monitor.formats.otlp import spans_to_otlp_document

    lines = []
    for i in range(count):
        number = first + i
        marker = f" {BAD}" if i % 10 < bad else ""
        record = {"id": f"conv-{name}-{i}", "agent": "reservation-assistant", "messages": [
            {"role": "user", "content": f"Book a table for {2 + i % 5} on Friday at 19:00, name Kim.{marker}"},
            {"role": "assistant", "content": "Booked: Friday 19:00, confirmation R-{number}."}]}
        lines.append(json.dumps(spans_to_otlp_document(chat_record_to_spans(record, number))))
    # Written then renamed: the source never reads half a file.
    partial = directory / f".{name}.tmp"
    partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    partial.rename(directory / f"{name}.jsonl")


class Binary:
    def __init__(self, args: list[str], log: Path, ready_url: str) -> None:
        self._log = log.open("w")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        self.log = log
        wait_for(lambda: _ok(ready_url), 30, f"{args[0]} to be ready")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        self._log.close()


def _ok(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except OSError:
        return False


def start_alertmanager(binary: str, route: dict[str, Any], receivers: list[dict[str, Any]], tmp_path: Path,
                       port: int) -> Binary:
    """A real Alertmanager on 127.0.0.1:``port`` with this route and these receivers, ready."""
    (tmp_path / "am").mkdir()
    config = tmp_path / "am" / "alertmanager.yml"
    config.write_text(json.dumps({"route": route, "receivers": receivers}))
    return Binary([binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am'}",
                   f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                  tmp_path / "alertmanager.log", f"http://127.0.0.1:{port}/-/ready")


def start_prometheus(binary: str, rules: Path, tmp_path: Path, port: int, alertmanager_port: int,
                     daemon_port: int) -> Binary:
    """A real Prometheus on 127.0.0.1:``port`` scraping the daemon and evaluating ``rules`` every second, its
    alerts sent to the Alertmanager, ready."""
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "scrape_configs": [{"job_name": "rubric-monitor",
                            "static_configs": [{"targets": [f"127.0.0.1:{daemon_port}"]}]}],
    }))
    return Binary([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'prometheus'}",
                   f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prometheus.log",
                  f"http://127.0.0.1:{port}/-/ready")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    alertmanager_bin = require_binary("prometheus-alertmanager")
    prometheus_bin = require_binary("prometheus")
    daemon_port, am_port, prom_port = free_port(), free_port(), free_port()
    with Receiver() as receiver, ScriptedOpenAIServer(judge) as judge_server:
        alertmanager = start_alertmanager(
            alertmanager_bin,
            {"receiver": "hook", "group_by": ["alertname", "rubric", "agent", "kind", "dimension"],
             "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
            [{"name": "hook", "webhook_configs": [{"url": receiver.url + "/am-hook", "send_resolved": True}]}],
            tmp_path, am_port)
        prometheus = start_prometheus(prometheus_bin, RULES, tmp_path, prom_port, am_port, daemon_port)
        try:
            yield {"receiver": receiver, "judge": judge_server, "daemon_port": daemon_port,
                   "am": f"http://127.0.0.1:{am_port}", "prometheus": f"http://127.0.0.1:{prom_port}"}
        finally:
            prometheus.stop()
            alertmanager.stop()


def _config(tmp_path: Path, stack: dict[str, Any], model: str) -> Path:
    path = tmp_path / "config.yaml"
    if not path.exists():
        daemon_config(tmp_path, stack["judge"].base_url, stack["daemon_port"])
    config = json.loads(path.read_text())
    config.update(interval_seconds=1)
    config["judge"]["model"] = model
    config["conversation"] = {"idle_timeout_seconds": 0}
    config["alerts"] = {
        "windows": ["15s"], "baseline_period": "10m", "min_samples": 20, "for_duration": "0s",
        "min_effect_pass_rate": 0.1, "min_effect_dimension": 4,  # one alert: the pass rate
        "example_link_template": "https://grafana.example/explore?traceId={trace_id}",
        "notifiers": [{"name": "alertmanager", "kind": "alertmanager", "url": stack["am"]},
                      {"name": "events", "kind": "webhook", "url": stack["receiver"].url + "/events",
                       "secret": "shared"}]}
    return write_config(path, config)


def evaluations(daemon: Daemon) -> float:
    return sum(v for _, v in samples(daemon.metrics(), "rubric_monitor_evaluations_total"))


def in_window(daemon: Daemon, window: str) -> float:
    """Scored evaluations the daemon counts in ``window`` (its rolling-window gauge)."""
    return sum(v for labels, v in samples(daemon.metrics(), "rubric_monitor_scored_evaluations")
               if labels.get("window") == window)


def cycles_done(daemon: Daemon) -> float:
    return sum(v for _, v in samples(daemon.metrics(), "rubric_monitor_cycles_total"))


def hook_alerts(receiver: Receiver, alertname: str, status: str) -> list[dict[str, Any]]:
    return [alert for r in receiver.on("/am-hook") for alert in r.json["alerts"]
            if alert["labels"]["alertname"] == alertname and alert["status"] == status]


def prometheus_alerts(url: str) -> list[dict[str, Any]]:
    status, body = get(url + "/api/v1/alerts")
    assert status == 200
    return [a for a in json.loads(body)["data"]["alerts"] if a["labels"]["alertname"] == "RubricQualityRegression"]


def events(receiver: Receiver, kind: str) -> list[dict[str, Any]]:
    """The regression detector's events of this kind the daemon sent (the sample rubric's SLO has its own)."""
    return [r.json for r in receiver.on("/events") if r.json["kind"] == kind
            and r.json["labels"].get("alertname") in (ALERT_NAME, ANNOTATION_NAME)]


def test_a_quality_drop_alerts_through_alertmanager_and_prometheus_and_recovers(
        tmp_path: Path, stack: dict[str, Any]) -> None:
    receiver: Receiver = stack["receiver"]
    traces = tmp_path / "traces"
    daemon = Daemon(_config(tmp_path, stack, "judge-model"), tmp_path, stack["daemon_port"])
    try:
        # Baseline: 60 conversations at 90 %, then out of the 15 s window.
        write_stream(traces, "a-baseline", 60, 1, 100)
        wait_for(lambda: evaluations(daemon) >= 63, 90, "the baseline to be scored")
        wait_for(lambda: in_window(daemon, "15s") == 0, 90, "the baseline to leave the 15 s window")
        after = cycles_done(daemon)
        wait_for(lambda: cycles_done(daemon) >= after + 2, 90, "the detector to run on the empty window")
        assert events(receiver, "firing") == []  # the daemon sent nothing ...
        assert hook_alerts(receiver, "RubricRegression", "firing") == []  # ... and Alertmanager passed nothing on

        # The drop: 40 conversations at 30 %.
        write_stream(traces, "b-drop", 40, 7, 200)
        wait_for(lambda: hook_alerts(receiver, "RubricRegression", "firing"), 90,
                 "the daemon's alert to reach the webhook through Alertmanager")
        alert = hook_alerts(receiver, "RubricRegression", "firing")[0]
        assert {k: alert["labels"][k] for k in ("rubric", "agent", "kind", "baseline", "severity")} == {
            "rubric": "restaurant-reservation", "agent": "reservation-assistant", "kind": "pass_rate",
            "baseline": "trailing", "severity": "warning"}
        annotations = alert["annotations"]
        assert annotations["summary"].startswith("pass rate of restaurant-reservation for agent "
                                                 "reservation-assistant dropped to")
        assert "95% interval" in annotations["description"] and annotations["window"] == "15s"
        assert annotations["examples"].count("operation_Id") == 5
        assert "https://grafana.example/explore?traceId=" in annotations["examples"]
        assert alert["generatorURL"].endswith("/metrics")
        wait_for(lambda: any(a["state"] == "firing" for a in prometheus_alerts(stack["prometheus"])), 60,
                 "the shipped RubricQualityRegression rule to fire in Prometheus")
        fired = prometheus_alerts(stack["prometheus"])[0]["labels"]
        assert (fired["rubric"], fired["kind"], fired["baseline"]) == ("restaurant-reservation", "pass_rate",
                                                                       "trailing")
        wait_for(lambda: hook_alerts(receiver, "RubricQualityRegression", "firing"), 60,
                 "Prometheus' alert to reach the webhook through Alertmanager")

        # Recovery: 40 good conversations; once the window holds only them, both resolve.
        write_stream(traces, "c-recovery", 40, 0, 300)
        wait_for(lambda: hook_alerts(receiver, "RubricRegression", "resolved"), 90,
                 "the daemon's alert to resolve in Alertmanager")
        wait_for(lambda: not prometheus_alerts(stack["prometheus"]), 60, "the Prometheus alert to resolve")
        wait_for(lambda: hook_alerts(receiver, "RubricQualityRegression", "resolved"), 60,
                 "Prometheus' alert to be resolved in Alertmanager")
        assert len(events(receiver, "firing")) == 1 and len(events(receiver, "resolved")) == 1
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()[-3000:]

    # The judge model changes mid-stream (a restart with another model): an annotation, no alert, nothing resent.
    firing_before = len(hook_alerts(receiver, "RubricRegression", "firing"))
    restarted = Daemon(_config(tmp_path, stack, "judge-model-2"), tmp_path, stack["daemon_port"])
    try:
        scored = evaluations(restarted)
        write_stream(traces, "d-new-judge", 40, 7, 400)
        wait_for(lambda: evaluations(restarted) >= scored + 40, 90, "the stream to be scored by the new judge")
        wait_for(lambda: events(receiver, "annotation"), 30, "the annotation")
        annotation = events(receiver, "annotation")[0]
        assert annotation["summary"] == ("New baseline for restaurant-reservation / reservation-assistant: "
                                         "judge model judge-model → judge-model-2")
        cycles = restarted.cycles()
        wait_for(lambda: restarted.cycles() >= cycles + 3, 30, "three more cycles")
        assert len(hook_alerts(receiver, "RubricRegression", "firing")) == firing_before
        assert len(events(receiver, "firing")) == 1 and len(events(receiver, "resolved")) == 1
        assert len(events(receiver, "annotation")) == 1
        assert all(v == 0 for _, v in samples(restarted.metrics(), "rubric_monitor_regression"))
        assert not prometheus_alerts(stack["prometheus"])
        assert "annotation: New baseline" in restarted.log.read_text()
    finally:
        assert restarted.stop() == 0, restarted.log.read_text()[-3000:]
