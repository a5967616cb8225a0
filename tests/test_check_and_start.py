"""``check`` refuses what ``run`` refuses, naming every problem (issue 9 item 5); start-up problems are one clear
line and exit 2 (issue 8 item 8); configured secrets never reach the logs or ``/healthz`` (issue 8 item 10)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer, error
from tests.helpers import run_cli, write_config
from tests.test_daemon import Daemon, daemon_config, free_port, get, wait_for

RUBRICS = str(REPO / "examples" / "rubrics")
APP_INSIGHTS = {"kind": "app_insights", "workspace_id": "00000000-0000-0000-0000-000000000000",
                "credential": {"kind": "token_env"}}


def cli(tmp_path: Path, command: str, config: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    config = {"rubrics": {"directory": RUBRICS}, "store": {"url": f"sqlite:///{tmp_path / 'r.db'}"}, **config}
    args = [command, "--once"] if command == "run" else [command]
    return run_cli([*args, "--config", str(write_config(tmp_path / "c.yaml", config))], tmp_path, env=env)


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("app insights without a workspace", {"source": {"kind": "app_insights"}},
     "source.workspace_id: set exactly one of source.workspace_id and source.resource_id"),
    ("plain http for bearer tokens", {"source": {**APP_INSIGHTS, "endpoint": "http://127.0.0.1:1"}},
     "source.endpoint: 'http://127.0.0.1:1' is not https"),
    ("a missing api_key_file", {"judge": {"kind": "openai", "api_key_file": "/nonexistent/key"}},
     "judge.api_key_file: cannot read secret file"),
    ("openai without a key", {"judge": {"kind": "openai"}}, "judge.api_key: no API key"),
    ("an unparsable store url", {"store": {"url": "not a url"}}, "store.url: is not a database URL"),
    ("a driver not installed", {"store": {"url": "postgresql+asyncpg://u@h/db"}},
     "store.url: the driver of 'postgresql+asyncpg' is not installed"),
    ("an unknown database", {"store": {"url": "nosuchdb://u@h/db"}}, "store.url: unknown database or driver"),
    ("a missing store directory", {"store": {"url": "sqlite:////nonexistent/dir/r.db"}},
     "store.url: the directory /nonexistent/dir of the SQLite file does not exist"),
    ("a bad metrics host", {"metrics": {"host": "no such host!"}}, "metrics.host: cannot listen on"),
]


@pytest.mark.parametrize(("label", "config", "message"), REFUSED, ids=[r[0] for r in REFUSED])
@pytest.mark.parametrize("command", ["check", "run"])
def test_check_refuses_what_run_refuses(tmp_path: Path, command: str, label: str, config: dict[str, Any],
                                        message: str) -> None:
    done = cli(tmp_path, command, config)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r.db").exists() or command == "run"


def test_check_reports_every_problem_and_never_explains_workspace_none(tmp_path: Path) -> None:
    done = run_cli(["check", "--explain", "--config", str(write_config(tmp_path / "c.yaml", {
        "rubrics": {"directory": RUBRICS}, "source": {"kind": "app_insights"},
        "judge": {"kind": "openai", "api_key_file": "/nonexistent/key"},
        "store": {"url": "sqlite:////nonexistent/dir/r.db"}}))], tmp_path)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("rubric-monitor: error:")]
    assert len(errors) == 3, done.stderr
    assert any("source.workspace_id" in e for e in errors) and any("judge.api_key_file" in e for e in errors)
    assert any("store.url" in e for e in errors)
    assert "workspace None" not in done.stdout + done.stderr


def test_the_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli(tmp_path, "run", {"metrics": {"host": "127.0.0.1", "port": port},
                                     "source": {"kind": "otlp_file", "path": str(tmp_path)}})
    assert done.returncode == 2, done.stderr
    assert f"metrics.port: 127.0.0.1:{port} is already in use" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_secrets_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "secrets").write_text("x")
    done = cli(tmp_path, "check", {}, env={"RUBRIC_MONITOR_SECRETS_DIR": str(tmp_path / "secrets")})
    assert done.returncode == 2 and "is a file, not a directory" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_key_echoed_back_by_the_endpoint_is_redacted_from_logs_and_healthz(tmp_path: Path) -> None:
    key = "sk-test-very-secret-0123456789"
    port = free_port()
    echo = error(401, f"Incorrect API key provided: {key}. You can find your API key at ...", "invalid_api_key")
    with ScriptedOpenAIServer(lambda r: echo) as judge:
        config = daemon_config(tmp_path, judge.base_url, port, interval_seconds=1, log_level="DEBUG")
        secrets = tmp_path / "secrets"
        secrets.mkdir()
        (secrets / "RUBRIC_MONITOR_JUDGE__API_KEY").write_text(key + "\n")
        text = config.read_text().replace('"api_key": "test", ', "")
        config.write_text(text)
        daemon = Daemon(config, tmp_path, port, env={"RUBRIC_MONITOR_SECRETS_DIR": str(secrets)})
        try:
            wait_for(lambda: judge.count >= 1 and daemon.cycles() >= 1, 60, "a cycle with a refused key")
            status, body = get(daemon.base + "/healthz")
        finally:
            assert daemon.stop() == 0, daemon.log.read_text()[-3000:]
        headers = {k.lower(): v for k, v in judge.requests[0].headers.items()}
        assert headers["authorization"] == f"Bearer {key}"  # the key from the mounted file
    assert status == 503 and "Incorrect API key provided: [REDACTED]" in body, body
    log = daemon.log.read_text()
    assert key not in body and key not in log
    assert "[REDACTED]" in log
