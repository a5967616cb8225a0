"""Stopping the daemon as Kubernetes does (SIGTERM): exit 0 at any moment, start-up included, and within
``shutdown_grace_seconds`` even while a judge call hangs, with the evaluations in flight left pending (the next
start judges them). The daemon runs as a subprocess; the judge is the scripted server."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, hang
from tests.helpers import SEED_PASS_SCORES, verdict
from tests.test_daemon import Daemon, daemon_config, free_port, wait_for


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler (``SigCgt`` in /proc): the interpreter reached our code."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize(("moment", "after"), [("code", 0.0), ("store", 0.0), ("store", 0.4)])
def test_sigterm_during_start_up_exits_0(tmp_path: Path, moment: str, after: float) -> None:
    """``code``: as soon as the interpreter runs our code (before that, tens of milliseconds after exec, nothing
    can catch a signal); ``store``: once the store's file exists, while the judge and the HTTP endpoint are
    still being set up."""
    port = free_port()
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        config = daemon_config(tmp_path, judge.base_url, port)
        daemon = Daemon(config, tmp_path, port)
        deadline = time.monotonic() + 30
        while not (catches_sigterm(daemon.process.pid) if moment == "code" else (tmp_path / "results.db").exists()):
            assert time.monotonic() < deadline and daemon.process.poll() is None, "the daemon never started"
            time.sleep(0.002)
        time.sleep(after)
        daemon.process.send_signal(signal.SIGTERM)
        code = daemon.process.wait(timeout=60)
        log = daemon.log.read_text()
    assert code == 0, f"exit {code} (a negative code is the signal that killed it): {log[-2000:]}"
    assert "Traceback" not in log


def test_the_installed_command_takes_the_signal_before_it_imports_the_stages() -> None:
    """``rubric-monitor`` imports ``monitor.cli`` and calls ``main``, which installs the handlers first: importing
    ``monitor.cli`` must not import the stages and their SDKs (seconds on a busy node, during which a SIGTERM would
    kill the process instead of stopping it)."""
    heavy = ("pydantic", "sqlalchemy", "openai", "azure", "prometheus_client", "monitor.app", "monitor.settings")
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, monitor.cli; print(sorted(m for m in sys.modules if m.startswith("
                               f"{heavy!r})))"],
        capture_output=True, text=True, check=True, cwd=REPO).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("after", [0.3, 1.0])
def test_sigterm_soon_after_the_installed_command_starts_exits_0(tmp_path: Path, after: float) -> None:
    """The ``rubric-monitor`` script enters through ``monitor.cli:main``, which takes the signal before importing
    the commands and their stages: a pod stopped 0.3 s or 1 s after it started (importing the SDKs) exits 0.
    The signal is sent once the process can catch one at all (the interpreter itself starts first)."""
    script = Path(sys.executable).with_name("rubric-monitor")
    port = free_port()
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        config = daemon_config(tmp_path, judge.base_url, port)
        started = time.monotonic()
        daemon = Daemon(config, tmp_path, port, command=[str(script)])
        deadline = started + 30
        while not catches_sigterm(daemon.process.pid):
            assert time.monotonic() < deadline and daemon.process.poll() is None, "the daemon never started"
            time.sleep(0.002)
        time.sleep(max(0.0, started + after - time.monotonic()))
        daemon.process.send_signal(signal.SIGTERM)
        code = daemon.process.wait(timeout=60)
        log = daemon.log.read_text()
    assert code == 0, f"exit {code} (a negative code is the signal that killed it): {log[-2000:]}"
    assert "Traceback" not in log


def test_sigterm_while_a_judge_call_hangs_exits_within_the_grace_period_and_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    hanging = [True]

    def judge_reply(request: Recorded) -> Reply:
        return hang(120) if hanging[0] else verdict(request, SEED_PASS_SCORES)

    with ScriptedOpenAIServer(judge_reply) as judge:
        # A call may take 60 s and is tried 3 times: waiting it out would take minutes.
        config = daemon_config(tmp_path, judge.base_url, port, shutdown_grace_seconds=2,
                               judge={"timeout_seconds": 60, "max_retries": 2, "concurrency": 2})
        daemon = Daemon(config, tmp_path, port)
        wait_for(lambda: judge.count >= 2, 60, "two judge calls in flight")
        daemon.process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = daemon.process.wait(timeout=30)
        waited = time.monotonic() - stopped
        log = daemon.log.read_text()
        assert code == 0, log[-3000:]
        assert waited < 2 + 10, f"shutdown took {waited:.1f}s with shutdown_grace_seconds 2"
        assert "abandoned" in log
        database = sqlite3.connect(tmp_path / "results.db")
        assert database.execute("select count(*) from results").fetchone() == (0,)
        assert database.execute("select count(*) from conversations where status = 'pending'").fetchone() == (3,)
        database.close()

        hanging[0] = False
        restarted = Daemon(config, tmp_path, port)
        try:
            wait_for(lambda: sqlite3.connect(tmp_path / "results.db").execute(
                "select count(*) from results").fetchone() == (3,), 60, "the abandoned evaluations to be judged")
        finally:
            assert restarted.stop() == 0, restarted.log.read_text()[-3000:]
