"""The daemon killed with SIGKILL at random points while it scores turn by turn: after restarts every expected
(conversation, rubric, version, turn) result is recorded exactly once, on SQLite and on PostgreSQL.

A subprocess test, bounded: a fixed number of kills (each after a random number of judge calls), then one
clean run until every expected row is there.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy
import yaml

from monitor.evaluators.views import reply_indices
from monitor.formats.input_files import read_conversations
from monitor.formats.otlp import spans_to_otlp_document
from monitor.store import SqlStore
from monitor.store.base import bucket_of
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, store_test_url, verdict, write_config
from tests.test_daemon import Daemon, free_port, wait_for
from tools.chat_to_otlp import chat_record_to_spans

KILLS = 5
CONVERSATIONS = 4
TURNS = 12


def chat(index: int) -> dict[str, object]:
    messages: list[dict[str, object]] = [{"role": "system", "content": "You book tables at Trattoria Nova."}]
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"conversation {index} question {turn}"})
        messages.append({"role": "assistant", "content": f"conversation {index} answer {turn}"})
    return {"id": f"conv-{index}", "agent": "reservation-assistant", "messages": messages}


def write_traces(path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for index in range(CONVERSATIONS):
            document = spans_to_otlp_document(chat_record_to_spans(chat(index), index))
            out.write(json.dumps(document, separators=(",", ":")) + "\n")


class Rows:
    """Reads the results table, through one engine (the test polls it every few milliseconds)."""

    def __init__(self, url: str) -> None:
        self.engine = sqlalchemy.create_engine(url)

    def all(self) -> list[tuple[str, str, int]]:
        """(conversation, rubric, turn) of every result; the rubric version is checked apart (the daemon adds
        the judge prompt's fingerprint to the file's ``version``)."""
        try:
            with self.engine.connect() as conn:
                rows = conn.exec_driver_sql("select conversation_id, rubric, turn_key from results").all()
        except sqlalchemy.exc.DBAPIError:
            return []  # no table yet (the first run was killed before creating it), or a write lock
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    def versions(self) -> set[str]:
        with self.engine.connect() as conn:
            return {str(v) for v in conn.exec_driver_sql("select distinct rubric_version from results").scalars()}

    def partly_recorded(self) -> bool:
        """Some but not all of a conversation's turns are recorded: the moment a crash used to lose the rest."""
        per_conversation = Counter(row[0] for row in set(self.all()))
        return any(0 < count < TURNS for count in per_conversation.values())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_kill_9_during_turn_level_scoring_loses_and_doubles_nothing(tmp_path: Path, backend: str) -> None:
    url = store_test_url(backend, tmp_path)
    (tmp_path / "traces").mkdir()
    write_traces(tmp_path / "traces" / "chats.jsonl")
    (tmp_path / "rubrics").mkdir()
    rubric = yaml.safe_load((REPO / "examples" / "rubrics" / "restaurant-reservation.yaml").read_text())
    rubric.update(evaluation_level="turn", version="v1")
    (tmp_path / "rubrics" / "turns.yaml").write_text(yaml.safe_dump(rubric))
    rows = Rows(url)
    expected = {(c.id, "restaurant-reservation", turn)
                for c in read_conversations(tmp_path / "traces" / "chats.jsonl") for turn in reply_indices(c)}
    assert len(expected) == CONVERSATIONS * TURNS

    def slow_verdict(request: Recorded) -> Reply:
        reply = verdict(request, SEED_PASS_SCORES)
        reply.delay = 0.02
        return reply

    chooser = random.Random(8)
    port = free_port()
    with ScriptedOpenAIServer(slow_verdict) as judge:
        config = write_config(tmp_path / "config.yaml", judge_config(
            judge.base_url,
            source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
            rubrics={"directory": str(tmp_path / "rubrics")},
            store={"url": url},
            metrics={"host": "127.0.0.1", "port": port},
            judge={"concurrency": 2},
            interval_seconds=1,
            # On PostgreSQL other replicas may be alive, so a killed daemon's claims wait out their lease (SQLite is
            # locked to one daemon, which frees them at start): a short lease keeps the test short.
            replicas={"lease_seconds": 3},
        ))
        kills = 0
        while kills < KILLS and len(set(rows.all())) < len(expected):
            daemon = Daemon(config, tmp_path, port)
            target = judge.count + chooser.randint(TURNS, 3 * TURNS)
            try:
                # Killed after a random number of judge calls, or sooner: the moment some but not all of a
                # conversation's turns are recorded (the window a crash used to lose for good).
                deadline = time.monotonic() + 60
                while judge.count < target and not rows.partly_recorded() and daemon.process.poll() is None:
                    assert time.monotonic() < deadline, "the daemon made no judge call in 60s"
                    time.sleep(0.002)
            finally:
                daemon.process.send_signal(signal.SIGKILL)
                daemon.process.wait(timeout=30)
            kills += 1
        assert kills >= 3, "the rows were all recorded before the daemon could be killed a few times"

        daemon = Daemon(config, tmp_path, port)
        try:
            wait_for(lambda: set(rows.all()) >= expected, 90, "every expected turn result")
            after = daemon.cycles()  # two more cycles, counted: nothing more, nothing doubled
            wait_for(lambda: daemon.cycles() >= after + 2, 60, "two more cycles")
        finally:
            assert daemon.stop() == 0, daemon.log.read_text()[-3000:]
    final = rows.all()
    versions = rows.versions()
    rows.engine.dispose()
    assert len(versions) == 1 and next(iter(versions)).startswith("v1")
    doubled = [row for row, count in Counter(final).items() if count > 1]
    assert doubled == []
    assert set(final) == expected, f"missing: {sorted(expected - set(final))}"
    # The hourly rollups, written in the transaction of each result, count every result once: they equal the
    # rollups rebuilt from the results.
    store = SqlStore(url)
    try:
        everything = (0, bucket_of(time.time()) + 3600)
        kept = {key: sums for key, sums in store.rollup_sums(*everything).items() if sums[0] or sums[2]}
        assert sum(sums[0] + sums[2] for key, sums in kept.items() if key[3] == "") == len(expected)
        store.rebuild_rollups()
        rebuilt = store.rollup_sums(*everything)
        assert rebuilt.keys() == kept.keys()
        for key, sums in rebuilt.items():
            assert sums[:3] == kept[key][:3] and sums[3] == pytest.approx(kept[key][3]), key
    finally:
        store.close()
