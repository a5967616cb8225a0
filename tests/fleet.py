"""Several daemons as subprocesses on one store, each with its own scripted judge: for the replica tests and
``benchmarks/bench_replicas.py``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy

from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply
from tests.helpers import SEED_PASS_SCORES, judge_config, verdict, write_config
from tools.chat_to_otlp import chat_record_to_spans

_TEMPLATE = json.loads((REPO / "examples" / "conversations.jsonl").read_text().splitlines()[0])
_CASE = re.compile(r"\(case (\d{4})\)")


def write_conversations(directory: Path, count: int) -> int:
    """``count`` reservation conversations ``conv-0000``... in one OTLP JSON lines file, each user turn tagged
    ``(case NNNN)`` so a judge request tells which conversation it is for; returns the number of spans."""
    from monitor.formats.otlp import spans_to_otlp_document

    directory.mkdir(parents=True, exist_ok=True)
    spans = 0
    with (directory / "fleet.jsonl").open("w", encoding="utf-8") as out:
        for number in range(count):
            record = json.loads(json.dumps(_TEMPLATE))
            record["id"] = f"conv-{number:04d}"
            for message in record["messages"]:
                if message["role"] == "user":
                    message["content"] = f"{message['content']} (case {number:04d})"
            converted = chat_record_to_spans(record, number)
            spans += len(converted)
            out.write(json.dumps(spans_to_otlp_document(converted)) + "\n")
    return spans


def case_of(request: Recorded) -> str:
    found = _CASE.search(request.prompt_text)
    return f"conv-{found.group(1)}" if found else "?"


def slow_verdict(latency: float) -> Any:
    def handler(request: Recorded) -> Reply:
        reply = verdict(request, SEED_PASS_SCORES)
        reply.delay = latency
        return reply
    return handler


def replica_config(directory: Path, traces: Path, rubrics: Path, store_url: str, judge_url: str, port: int,
                   **sections: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = judge_config(judge_url, source={"kind": "otlp_file", "path": str(traces)},
                          rubrics={"directory": str(rubrics)}, store={"url": store_url},
                          metrics={"host": "127.0.0.1", "port": port}, interval_seconds=1)
    for key, value in sections.items():
        config.setdefault(key, {}).update(value) if isinstance(value, dict) else config.__setitem__(key, value)
    return write_config(directory / "config.yaml", config)


class Replica:
    """One ``rubric-monitor run`` subprocess; its log goes to ``<directory>/daemon.log``."""

    def __init__(self, config: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRIC_MONITOR_")}
        env.pop("OPENAI_API_KEY", None)
        env["PYTHONPATH"] = str(REPO)
        self.log = config.parent / "daemon.log"
        self._handle = self.log.open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "monitor", "run", "--config", str(config)],
                                        cwd=config.parent, env=env, stdout=self._handle, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._handle.close()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=30)
        finally:
            self._handle.close()


def scored(store_url: str) -> dict[str, str | None]:
    """Conversation → the replica (``host:pid:random``) that claimed it last, for scored conversations."""
    engine = sqlalchemy.create_engine(store_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text(
                "SELECT key, claimed_by FROM conversations WHERE status = 'scored'")).all()
    except sqlalchemy.exc.ProgrammingError:
        return {}  # no tables yet
    finally:
        engine.dispose()
    return {str(r[0]): r[1] for r in rows}


def results_count(store_url: str) -> int:
    engine = sqlalchemy.create_engine(store_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sqlalchemy.text("SELECT count(*) FROM results")).scalar_one())
    except sqlalchemy.exc.SQLAlchemyError:
        return 0
    finally:
        engine.dispose()


def wait_until(condition: Any, timeout: float, what: str, poll: float = 0.2) -> float:
    """Seconds it took; AssertionError past ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
