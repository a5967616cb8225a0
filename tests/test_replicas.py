"""More than one replica on one PostgreSQL, each conversation scored once; SQLite refuses a second daemon.

The fleet test starts three daemons at once on an empty database (each with its own scripted judge, slow enough
that evaluations are in flight), kills one with SIGKILL mid-evaluation and checks that every conversation ends
with exactly one result, that no survivor re-judged a verdict already recorded, and that the dead replica's
conversations were taken over once its lease expired.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy

from monitor.models import SpanRecord
from monitor.store import SqlStore
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fleet import (
    Replica,
    case_of,
    replica_config,
    results_count,
    scored,
    slow_verdict,
    wait_until,
    write_conversations,
)
from tests.helpers import fresh_postgres, require_postgres, run_cli
from tests.test_daemon import free_port

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def postgres_url() -> str:
    return fresh_postgres(require_postgres())


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}" if request.param == "sqlite" else postgres_url()


def _ready(store: SqlStore, owner: str, lease: float = 60.0, limit: int | None = None) -> list[str]:
    return [p.key for p in store.claim_ready(owner, lease, T0 + timedelta(days=1), T0, limit)]


def test_claims_are_exclusive_until_released_scored_or_expired(url: str) -> None:
    one, two = SqlStore(url), SqlStore(url)
    try:
        one.add_spans("src", [SpanRecord(trace_id=f"t{i}", span_id="s", start_time=T0 + timedelta(seconds=i))
                              for i in range(5)], "cp", "ignore")
        assert _ready(one, "a", limit=2) == ["t0", "t1"]
        assert _ready(two, "b", limit=2) == ["t2", "t3"]
        assert _ready(one, "a") == ["t4"]  # never its own claims again within a cycle, nor b's
        assert _ready(two, "b") == []
        one.mark_scored("t0", 0)
        assert one.release_claims("a") == 2  # t1 and t4: pending, now free at once
        assert _ready(two, "b", lease=0.3) == ["t1", "t4"]
        assert _ready(one, "a") == []
        # b's claims expire unless renewed: renew t2 and t3, let t1 and t4 run out.
        assert two.renew_claims("b", ["t2", "t3"], 60.0) == 2
        time.sleep(0.5)
        assert _ready(one, "a") == ["t1", "t4"]
        assert _ready(two, "b") == []
        assert one.claims() == {"t0": ("scored", "a"), "t1": ("pending", "a"), "t2": ("pending", "b"),
                                "t3": ("pending", "b"), "t4": ("pending", "a")}
    finally:
        one.close()
        two.close()


def test_two_stores_inserting_the_same_spans_do_not_fail(url: str) -> None:
    one, two = SqlStore(url), SqlStore(url)
    spans = [SpanRecord(trace_id="t", span_id=f"s{i}", start_time=T0, attributes={
        "gen_ai.conversation.id": "conv"}) for i in range(3)]
    try:
        first = one.add_spans("src", spans, "1", "ignore")
        second = two.add_spans("src", spans, "1", "ignore")
        assert (first.new, second.new, second.duplicates) == (3, 0, 3)
        with one.poller_lock("src") as mine:
            assert mine
            if url.startswith("postgresql"):
                with two.poller_lock("src") as theirs:
                    assert not theirs  # one poller per source
        with two.poller_lock("src") as theirs:
            assert theirs  # released at the end of the block
    finally:
        one.close()
        two.close()


def test_sqlite_refuses_a_second_daemon_on_the_same_file(tmp_path: Path) -> None:
    traces, rubrics = tmp_path / "traces", REPO / "examples" / "rubrics"
    write_conversations(traces, 2)
    store = f"sqlite:///{tmp_path / 'results.db'}"
    with ScriptedOpenAIServer(slow_verdict(0.0)) as judge:
        first = Replica(replica_config(tmp_path / "a", traces, rubrics, store, judge.base_url, free_port()))
        try:
            wait_until(lambda: results_count(store) == 2, 60, "the first daemon to score")
            config = replica_config(tmp_path / "b", traces, rubrics, store, judge.base_url, free_port())
            second = run_cli(["run", "--once", "--config", str(config)], cwd=tmp_path)
            assert second.returncode == 2
            assert "is in use by another rubric-monitor" in second.stderr
            assert f":{first.pid}:" in second.stderr  # names the holder
            assert "use PostgreSQL" in second.stderr
        finally:
            assert first.stop() == 0
        again = run_cli(["run", "--once", "--config", str(config)], cwd=tmp_path)
        assert again.returncode == 0, again.stderr  # the lock went with the first daemon


def test_three_replicas_one_killed_mid_evaluation_score_everything_exactly_once(tmp_path: Path) -> None:
    url = postgres_url()
    conversations, lease, latency = 30, 4.0, 1.0
    spans = write_conversations(tmp_path / "traces", conversations)
    rubrics = REPO / "examples" / "rubrics"
    servers = [ScriptedOpenAIServer(slow_verdict(latency)) for _ in range(3)]
    replicas: list[Replica] = []
    for server in servers:
        server.__enter__()
    try:
        # Started together on an empty database: one creates the schema, the others wait for it.
        for number, server in enumerate(servers):
            config = replica_config(tmp_path / f"replica-{number}", tmp_path / "traces", rubrics, url,
                                    server.base_url, free_port(),
                                    replicas={"lease_seconds": lease, "claim_batch": 2},
                                    judge={"concurrency": 2, "max_retries": 0})
            replicas.append(Replica(config))
        victim, victim_server = replicas[0], servers[0]
        wait_until(lambda: victim_server.count >= 3, 60, "replica 0 to be judging")
        killed_at = time.monotonic()
        victim.kill()
        in_flight_at_kill = {case_of(r) for r in victim_server.requests}
        wait_until(lambda: len(scored(url)) == conversations, 120, "every conversation to be scored")
        for replica in replicas[1:]:
            assert replica.stop() == 0, replica.log.read_text()[-3000:]
        for replica in replicas:
            log = replica.log.read_text()
            assert "Traceback" not in log and "IntegrityError" not in log and "UniqueViolation" not in log, log[-3000:]
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
        for server in servers:
            server.__exit__()

    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        result_ids = [r[0] for r in conn.execute(sqlalchemy.text("SELECT conversation_id FROM results"))]
        stored_spans = conn.execute(sqlalchemy.text("SELECT count(*) FROM spans")).scalar_one()
    engine.dispose()
    assert sorted(result_ids) == [f"conv-{n:04d}" for n in range(conversations)]  # each exactly once
    assert stored_spans == spans  # one poller at a time: every span stored once

    final = scored(url)
    victim_id = f":{victim.pid}:"
    calls = [Counter(case_of(r) for r in server.requests) for server in servers]
    survivors = calls[1] + calls[2]
    for conversation, scorer in final.items():
        assert scorer is not None
        if victim_id in scorer:
            assert survivors[conversation] == 0, f"{conversation} was recorded by the dead replica, then re-judged"
        else:
            assert survivors[conversation] == 1, f"{conversation} judged {survivors[conversation]} times"
    taken_over = {c for c in in_flight_at_kill if victim_id not in (final.get(c) or "")}
    assert taken_over, "the dead replica had evaluations in flight that someone else finished"
    assert all(calls[0][c] == 1 for c in taken_over)  # the dead replica's call, then one survivor's
    # ...and only once its lease ran out (it was renewed at most lease/3 before the kill).
    first_takeover = min(r.received_at for server in servers[1:] for r in server.requests
                         if case_of(r) in taken_over)
    assert first_takeover - killed_at >= lease * 2 / 3 - 0.5
    assert sum(calls[1].values()) > 0 and sum(calls[2].values()) > 0  # every replica judges


def test_two_replicas_receiving_the_same_batches_at_once_store_each_span_once(url: str) -> None:
    """Two receivers behind one Service, a Collector retrying to the other: the same batches committed at the same
    moment. The loser of each race runs its transaction again and finds everything stored."""
    one, two = SqlStore(url), SqlStore(url)
    rounds, traces, per_trace = 25, 20, 4
    batches = [[SpanRecord(trace_id=f"r{r}t{t}", span_id=f"s{s}", start_time=T0 + timedelta(seconds=r),
                           attributes={"gen_ai.conversation.id": f"r{r}c{t % 5}"} if s == 0 else {})
                for t in range(traces) for s in range(per_trace)] for r in range(rounds)]
    start = threading.Barrier(2)

    def send(store: SqlStore) -> int:
        new = 0
        for batch in batches:
            start.wait()
            new += store.add_spans("otlp_receiver", batch, "{}", "ignore").new
        return new

    try:
        with ThreadPoolExecutor(2) as pool:
            stored = sum(f.result() for f in [pool.submit(send, one), pool.submit(send, two)])
        assert stored == rounds * traces * per_trace
        far = T0 + timedelta(days=1)
        ready = one.ready_conversations(far, far)
        assert len(ready) == rounds * 5
        for pending in ready:
            spans = one.spans_of(pending.key)
            assert len(spans) == len({(s.trace_id, s.span_id) for s in spans}) == traces // 5 * per_trace
    finally:
        one.close()
        two.close()
