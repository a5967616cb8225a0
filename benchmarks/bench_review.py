"""The review page's server CPU: one 200-turn conversation, and the queue and results lists at a million results.

    python -m benchmarks.bench_review                        # 1,000,000 results, SQLite (~2 min to generate)
    python -m benchmarks.bench_review --results 100000 --repeat 20
    python -m benchmarks.bench_review --store-url postgresql+psycopg://...   # an empty PostgreSQL database

What is timed is what the request handler does for a page (``monitor.review.web.review_html`` / ``list_html``:
the store's queries, the conversation assembled again from its spans, the HTML), in this thread's CPU time
(``time.thread_time``), which is the server's CPU per request: the handler runs on one thread, SQLite runs in it.
(PostgreSQL's own CPU is in its processes: its wall time is shown too.) Medians and maxima over ``--repeat`` runs,
after one warm-up. The conversation is assembled from its spans once, when its verdict is queued (the review step,
off the request path) or first shown; that one-off cost is printed apart.

The conversation: 200 turns (user, an assistant tool call, the tool's result, the assistant's answer: 800
messages), assembled from the spans the OTLP conversion of a chat makes. The million results are generated here
only (bulk inserts: 100 rubrics × 20 agents over 30 days, one in three failing), with a review queue of 20
uniform and 15 other picks per rubric and day, and 5,000 labels.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert

from monitor.review.store import ReviewStore
from monitor.review.web import Auth, ReviewApp, list_html, review_html
from monitor.settings import ReviewSettings
from monitor.store.sql import SqlStore
from monitor.store.tables import results_table, review_labels_table, review_queue_table
from tests.review_helpers import add_conversation, verdict

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 30
RUBRICS, AGENTS = 100, 20


def long_chat(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are the airline's reservation agent. " * 20}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"Turn {n}: please change my reservation to the flight after "
                                                    f"HAT{n:03d}, and tell me the fare difference."})
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{n}", "type": "function",
            "function": {"name": "get_reservation_details", "arguments": json.dumps({"reservation_id": f"R{n}"})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "name": "get_reservation_details",
                         "content": json.dumps({"reservation_id": f"R{n}", "flights": [
                             {"flight_number": f"HAT{n:03d}", "date": "2024-05-16", "price": 120 + n}]})})
        messages.append({"role": "assistant", "content": f"Done: you are on the flight after HAT{n:03d}; the fare "
                                                         f"difference is ${n}."})
    return messages


def measure(what: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(median CPU ms, max CPU ms, median wall ms) of ``what``, after one warm-up run."""
    what()
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.thread_time(), time.perf_counter()
        what()
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    return statistics.median(cpu), max(cpu), statistics.median(wall)


def generate(store: SqlStore, count: int) -> None:
    """``count`` current conversation-level results, the queue of each rubric and day, and labels, in bulk."""
    draw = random.Random(1)
    payload = verdict("x").model_dump_json()
    step = DAYS * 86400 / count
    queue: list[dict[str, Any]] = []
    per_day: dict[tuple[str, str], int] = {}
    with store.transaction() as conn:
        batch: list[dict[str, Any]] = []
        for n in range(count):
            rubric, agent = f"rubric-{n % RUBRICS:03d}", f"agent-{(n // RUBRICS) % AGENTS:02d}"
            ts = START.timestamp() + n * step
            outcome = "fail" if draw.random() < 1 / 3 else "pass"
            batch.append({"id": n + 1, "conversation_id": f"c{n:07d}", "rubric": rubric, "rubric_version": "v1",
                          "turn_key": -1, "revision": 0, "current": True, "agent": agent, "outcome": outcome,
                          "score": 0.3 if outcome == "fail" else 0.8, "evaluated_ts": ts, "payload": payload,
                          "judge_model": "m", "prompt_version": "p", "agent_version": None, "unscored_reason": None})
            day = datetime.fromtimestamp(ts, UTC).date().isoformat()
            picked = per_day.get((rubric, day), 0)
            if picked < 35:
                per_day[(rubric, day)] = picked + 1
                queue.append({"result_id": n + 1, "rubric": rubric, "agent": agent, "day": day,
                              "reason": "uniform" if picked < 20 else "failing", "evaluated_ts": ts})
            if len(batch) == 20_000:
                conn.execute(insert(results_table), batch)
                batch = []
        if batch:
            conn.execute(insert(results_table), batch)
        if conn.dialect.name == "postgresql":  # ids were given: move the sequence past them
            conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('results', 'id'), "
                                 "(SELECT max(id) FROM results))")
        conn.execute(insert(review_queue_table), queue)
        labelled = draw.sample(queue, min(5000, len(queue)))
        conn.execute(insert(review_labels_table), [
            {"conversation_id": f"c{q['result_id'] - 1:07d}", "rubric": q["rubric"], "reviewer": "bench",
             "result_id": q["result_id"], "passed": draw.random() < 0.7, "score": None,
             "dimensions": '{"helpfulness":4}', "note": "", "labelled_ts": q["evaluated_ts"] + 60}
            for q in labelled])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=1_000_000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--store-url", help="an empty database (default: a SQLite file in a temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        url = args.store_url or f"sqlite:///{Path(directory) / 'bench.db'}"
        store = SqlStore(url)
        t0 = time.perf_counter()
        generate(store, args.results)
        print(f"generated {args.results:,} results in {time.perf_counter() - t0:.0f} s ({url.split(':')[0]})")
        add_conversation(store, "long", long_chat(args.turns))
        store.record(verdict("long", rubric="rubric-long", at=START + timedelta(days=DAYS + 1)))
        review = ReviewStore(store)
        app = ReviewApp(review, ReviewSettings(enabled=True), Auth("x" * 32, None, ()))
        [(long_id, long_result)] = review.current_results("long")
        c0 = time.thread_time()
        conversation = review.conversation("long")  # the first view assembles it from its spans and keeps it
        first_view = (time.thread_time() - c0) * 1000
        assert conversation is not None
        print(f"conversation: {args.turns} turns, {len(conversation.messages)} messages, "
              f"{len(store.spans_of('long'))} spans; assembled from them once (queued or first view): "
              f"{first_view:.0f} ms CPU")
        pages: list[tuple[str, Callable[[], object]]] = [
            ("conversation page (200 turns)", lambda: review_html(app, long_id, long_result, None, {}, "bench", "t")),
            ("queue, no filter", lambda: list_html(app, "/queue", {}, "bench", "t")),
            ("queue, rubric + label filter", lambda: list_html(
                app, "/queue", {"rubric": ["rubric-042"], "label": ["unlabelled"]}, "bench", "t")),
            ("queue, page 20 (keyset)", lambda: list_html(
                app, "/queue", {"after": [f"{START.timestamp() + 10 * 86400!r}:500000"]}, "bench", "t")),
            ("results, no filter", lambda: list_html(app, "/results", {}, "bench", "t")),
            ("results, rubric + time filter", lambda: list_html(
                app, "/results", {"rubric": ["rubric-042"], "since": ["2026-11-10"], "until": ["2026-11-11"]},
                "bench", "t")),
            ("results, agent + failing", lambda: list_html(
                app, "/results", {"agent": ["agent-07"], "outcome": ["fail"]}, "bench", "t")),
            ("results, labelled", lambda: list_html(app, "/results", {"label": ["labelled"]}, "bench", "t")),
        ]
        print(f"{'page':<34}{'CPU median ms':>15}{'CPU max ms':>12}{'wall median ms':>16}")
        for name, render in pages:
            median, worst, wall = measure(render, args.repeat)
            print(f"{name:<34}{median:>15.1f}{worst:>12.1f}{wall:>16.1f}")
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
