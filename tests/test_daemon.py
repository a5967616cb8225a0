"""The daemon as a subprocess, as it runs in production: scrape it, check the exposition with promtool, stop it
with SIGTERM, restart it over the same traces."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, require_binary
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, verdict, write_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Daemon:
    def __init__(self, config: Path, cwd: Path, port: int, env: dict[str, str] | None = None,
                 command: list[str] | None = None) -> None:
        """``command``: how the daemon is started (default ``python -m monitor``; the installed ``rubric-monitor``
        script enters through ``monitor.cli:main`` instead)."""
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRIC_MONITOR_")}
        env.pop("OPENAI_API_KEY", None)
        env["PYTHONPATH"] = str(REPO)
        env.update(extra)
        self.log = cwd / f"daemon-{time.monotonic_ns()}.log"
        self._log_handle = self.log.open("w")
        start = command or [sys.executable, "-m", "monitor"]
        self.process = subprocess.Popen([*start, "run", "--config", str(config)],
                                        cwd=cwd, env=env, stdout=self._log_handle, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"

    def metrics(self) -> str:
        try:
            return get(self.base + "/metrics")[1]
        except OSError:
            return ""

    def cycles(self) -> float:
        return sum(v for labels, v in samples(self.metrics(), "rubric_monitor_cycles_total"))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            self._log_handle.close()


def daemon_config(tmp_path: Path, judge_url: str, port: int, **sections: object) -> Path:
    """The bundled traces and rubrics copied under ``tmp_path``, the judge at ``judge_url``, metrics on ``port``."""
    shutil.copytree(REPO / "examples" / "traces", tmp_path / "traces")
    shutil.copytree(REPO / "examples" / "rubrics", tmp_path / "rubrics")
    return write_config(tmp_path / "config.yaml", judge_config(
        judge_url,
        source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(tmp_path / "rubrics")},
        store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
        metrics={"host": "127.0.0.1", "port": port},
        **sections,
    ))


def test_daemon_scores_exports_stops_and_resumes_without_rejudging(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    port = free_port()
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        config = daemon_config(tmp_path, judge.base_url, port, interval_seconds=1)
        daemon = Daemon(config, tmp_path, port)
        try:
            wait_for(lambda: daemon.cycles() >= 1 and judge.count >= 3, 60, "the first cycle to judge 3 conversations")
            text = daemon.metrics()
            evaluations = samples(text, "rubric_monitor_evaluations_total")
            assert sum(v for _, v in evaluations) == 3
            # Every outcome of a seen (rubric, version, agent) exists, at zero until counted.
            assert {labels["outcome"]: v for labels, v in evaluations} == {"pass": 3, "fail": 0, "unscored": 0}
            assert {labels["agent"] for labels, _ in evaluations} == {"reservation-assistant"}
            pass_rates = samples(text, "rubric_monitor_pass_rate")
            assert {labels["window"] for labels, _ in pass_rates} == {"1h", "24h"}
            assert all(value == 1.0 for _, value in pass_rates)
            assert samples(text, "rubric_monitor_dimension_mean")
            funnel = {labels["stage"]: v for labels, v in samples(text, "rubric_monitor_conversations_total")}
            assert funnel["assembled"] == 3 and funnel["evaluated"] == 3
            checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                                     timeout=30, check=False)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            status, body = get(daemon.base + "/healthz")
            assert status == 200 and '"ok"' in body
            assert get(daemon.base + "/readyz")[0] == 200
        finally:
            assert daemon.stop() == 0, daemon.log.read_text()[-3000:]
        calls_after_first_run = judge.count
        assert calls_after_first_run == 3

        restarted = Daemon(config, tmp_path, port)
        try:
            wait_for(lambda: restarted.cycles() >= 2, 60, "two cycles of the restarted daemon")
            text = restarted.metrics()
            assert judge.count == calls_after_first_run  # nothing is judged twice across a restart
            assert all(value == 1.0 for _, value in samples(text, "rubric_monitor_pass_rate"))
        finally:
            assert restarted.stop() == 0, restarted.log.read_text()[-3000:]


def test_sigterm_lets_the_evaluations_in_flight_finish_and_be_recorded(tmp_path: Path) -> None:
    import sqlite3

    port = free_port()

    def slow_verdict(request: Recorded) -> Reply:
        reply = verdict(request, SEED_PASS_SCORES)
        reply.delay = 2.0
        return reply

    with ScriptedOpenAIServer(slow_verdict) as judge:
        config = daemon_config(tmp_path, judge.base_url, port, interval_seconds=60, judge={"concurrency": 1})
        daemon = Daemon(config, tmp_path, port)
        wait_for(lambda: judge.count >= 1, 60, "the first judge call to be in flight")
        assert daemon.stop() == 0, daemon.log.read_text()[-3000:]
        in_flight = judge.count
    rows = sqlite3.connect(tmp_path / "results.db").execute("select conversation_id from results").fetchall()
    assert in_flight == 1  # one at a time, and none started after the signal
    assert len(rows) == 1  # the evaluation in flight was recorded before exit
