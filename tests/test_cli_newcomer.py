"""What a newcomer sees: --version, the daemon's progress lines and where to look next, a second Ctrl-C that
exits at once without losing the evaluation in flight, and evaluate running judge.concurrency calls at once."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from monitor import __version__
from monitor.cli.progress import ProgressBar
from monitor.store.sql import SqlStore
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config


def test_version() -> None:
    shown = run_cli(["--version"], REPO)
    assert shown.returncode == 0 and shown.stdout == f"rubric-monitor {__version__}\n"


def test_help_shows_no_markup() -> None:
    for command in ([], ["run"], ["evaluate"], ["check"], ["results"], ["results", "show"], ["rubrics"]):
        shown = run_cli([*command, "--help"], REPO)
        assert shown.returncode == 0, shown.stderr
        assert "``" not in shown.stdout and ":class:" not in shown.stdout, command


def config_for(tmp_path: Path, base_url: str) -> Path:
    if not (tmp_path / "traces").exists():
        shutil.copytree(REPO / "examples" / "traces", tmp_path / "traces")
    return write_config(tmp_path / "config.yaml", judge_config(
        base_url,
        source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(REPO / "examples" / "rubrics")},
        store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
        metrics={"host": "127.0.0.1", "port": 0},
        judge={"concurrency": 1},
    ))


def test_a_cycle_says_what_it_judges_and_where_to_look_next(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = config_for(tmp_path, server.base_url)
        ran = run_cli(["run", "--once", "--config", str(config)], tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stderr.splitlines()
    judging = [line.split("monitor.pipeline: ", 1)[1] for line in lines if "judging " in line]
    assert [j.split(":")[0] for j in judging] == ["judging 1/3", "judging 2/3", "judging 3/3"]
    assert {j.split("conversation ")[1] for j in judging} == {
        f"{c}, rubric restaurant-reservation" for c in ("conv-booking-ok", "conv-party-too-big", "conv-cancel")}
    [summary] = [line for line in lines if "next: " in line]
    assert "the metrics are at http://127.0.0.1:" in summary and "/metrics" in summary
    listing = f"-m monitor results --config {config}"
    assert f"`{Path(sys.executable).name} {listing}`" in summary
    assert f"`{Path(sys.executable).name} {listing} show CONVERSATION`" in summary
    # The hint is a command that works as printed.
    listed = run_cli(["results", "--config", str(config)], tmp_path)
    assert len(listed.stdout.splitlines()) == 4
    assert not [line for line in lines if "HTTP Request" in line]  # no line per request buries the progress


def test_a_second_ctrl_c_exits_at_once_and_the_evaluation_in_flight_stays_pending(tmp_path: Path) -> None:
    release = threading.Event()

    def slow(request: Recorded) -> Reply:
        release.wait(30)  # the judge is busy for as long as the test wants
        return verdict(request, SEED_PASS_SCORES)

    with ScriptedOpenAIServer(slow) as server:
        config = config_for(tmp_path, server.base_url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRIC_MONITOR_")}
        env["PYTHONPATH"] = str(REPO)
        log = (tmp_path / "daemon.log").open("w")
        daemon = subprocess.Popen([sys.executable, "-m", "monitor", "run", "--config", str(config)], cwd=tmp_path,
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while server.count == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert server.count == 1, (tmp_path / "daemon.log").read_text()
            daemon.send_signal(signal.SIGINT)
            time.sleep(1.0)
            assert daemon.poll() is None  # the first Ctrl-C waits for the evaluation in flight
            started = time.monotonic()
            daemon.send_signal(signal.SIGINT)
            code = daemon.wait(timeout=10)
            exited_after = time.monotonic() - started
        finally:
            release.set()
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            log.close()
    output = (tmp_path / "daemon.log").read_text()
    assert code == 128 + signal.SIGINT, output
    assert exited_after < 5, output
    assert "again (Ctrl-C) to exit at once" in output
    assert "received again: exiting now; the evaluation in flight stays pending" in output
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        assert store.results() == []
    finally:
        store.close()

    # Nothing was lost: the next start judges all three, the interrupted one included.
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = config_for(tmp_path, server.base_url)
        ran = run_cli(["run", "--once", "--config", str(config)], tmp_path)
    assert ran.returncode == 0, ran.stderr
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        assert sorted(r.conversation_id for r in store.results()) == [
            "conv-booking-ok", "conv-cancel", "conv-party-too-big"]
    finally:
        store.close()


def test_evaluate_keeps_judge_concurrency_calls_in_flight_and_prints_in_input_order(tmp_path: Path) -> None:
    lock = threading.Lock()
    in_flight = [0, 0]  # now, peak

    def counting(request: Recorded) -> Reply:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            # Held until three calls are in flight (or a generous time on a busy machine), so the peak is the
            # concurrency the client allows, not whatever overlap the scheduler happened to produce.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with lock:
                    if in_flight[0] >= 3:
                        break
                time.sleep(0.01)
            time.sleep(0.05)
            return verdict(request, SEED_PASS_SCORES)
        finally:
            with lock:
                in_flight[0] -= 1

    records = [json.loads(line) for line in (REPO / "examples" / "conversations.jsonl").read_text().splitlines()]
    ids = [f"c{i:02d}" for i in range(9)]
    (tmp_path / "input.jsonl").write_text("".join(
        json.dumps({**records[i % len(records)], "id": cid}) + "\n" for i, cid in enumerate(ids)))
    with ScriptedOpenAIServer(counting) as server:
        config = write_config(tmp_path / "config.yaml", judge_config(server.base_url, judge={"concurrency": 3}))
        ran = run_cli(["evaluate", "--config", str(config), "--rubric",
                       str(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"),
                       "--input", str(tmp_path / "input.jsonl")], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert server.count == 9
    assert in_flight[1] == 3
    assert [json.loads(line)["conversation_id"] for line in ran.stdout.splitlines()] == ids
    assert "\r[" not in ran.stderr  # stderr is not a terminal here: no progress bar


def test_evaluate_exits_1_when_the_judge_fails(tmp_path: Path) -> None:
    from tests.fakes.openai_server import error

    with ScriptedOpenAIServer(lambda _: error(404, "The model `judge-model` does not exist")) as server:
        config = write_config(tmp_path / "config.yaml", judge_config(server.base_url, judge={"concurrency": 3}))
        ran = run_cli(["evaluate", "--config", str(config), "--rubric",
                       str(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"),
                       "--input", str(REPO / "examples" / "conversations.jsonl")], tmp_path)
    assert ran.returncode == 1
    assert ran.stderr.startswith("rubric-monitor: the judge failed: judge model judge-model")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_only() -> None:
    terminal = _Terminal()
    bar = ProgressBar(4, "conversations", terminal)
    bar.advance()
    bar.close()
    assert terminal.getvalue().split("\r")[1:] == [
        "[" + "." * 30 + "] 0/4 conversations", "[" + "#" * 7 + "." * 23 + "] 1/4 conversations", "\x1b[K"]
    pipe = io.StringIO()
    quiet = ProgressBar(4, "conversations", pipe)
    quiet.advance()
    quiet.close()
    assert pipe.getvalue() == ""
