"""Retention soak: the store's size over a long run on a simulated clock.

Each step is ``--step-hours`` of simulated time in which ``--per-step`` conversations arrive (3 spans each), are
claimed, scored (a weighted result with 6 dimension scores, judge usage charged), marked scored, and some leave a
judge failure or cached adaptive items behind; then the store's own housekeeping runs as the daemon's cycle runs
it (``prune`` for spans after ``conversation.retention_days``, ``retain`` with the retention policy, and the hourly
rollups pruned past the longest window plus a week). Every
``--report-days`` the database size and the row count of each table are printed. With retention the size levels
off once the oldest rows start to go; ``--no-retention`` shows the growth without it.

    .venv/bin/python benchmarks/bench_soak.py                          # SQLite file, 180 simulated days
    .venv/bin/python benchmarks/bench_soak.py --url postgresql+psycopg://postgres@127.0.0.1:55432/rm_soak
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.metrics.rollups import KEEP_EXTRA_HOURS
from monitor.models import DimensionScore, EvaluationResult, SpanRecord
from monitor.store import SqlStore
from monitor.store.base import BUCKET_SECONDS, RetentionPolicy, bucket_of

TABLES = ("spans", "conversations", "trace_conversations", "results", "result_dimensions", "judge_failures",
          "judge_failure_log", "adaptive_items", "compacted_results", "compacted_dimensions", "quality_rollups",
          "judge_usage_daily")
START = datetime(2026, 1, 1, tzinfo=UTC)


def size_bytes(store: SqlStore, path: Path | None) -> int:
    if path is not None:
        return path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-*"))
    engine = sqlalchemy.create_engine(store.url)
    with engine.connect() as conn:
        size = int(conn.execute(sqlalchemy.text("SELECT pg_database_size(current_database())")).scalar_one())
    engine.dispose()
    return size


def counts(store: SqlStore) -> dict[str, int]:
    engine = sqlalchemy.create_engine(store.url)
    with engine.connect() as conn:
        found = {t: int(conn.execute(sqlalchemy.text(f"SELECT count(*) FROM {t}")).scalar_one()) for t in TABLES}
    engine.dispose()
    return found


def step(store: SqlStore, now: datetime, number: int, per_step: int) -> None:
    spans = []
    for index in range(per_step):
        conversation = f"conv-{number}-{index}"
        for part in range(3):
            spans.append(SpanRecord(
                trace_id=f"trace-{number}-{index}", span_id=f"span-{part}", start_time=now - timedelta(minutes=30),
                attributes={"gen_ai.conversation.id": conversation, "gen_ai.agent.name": f"agent-{index % 4}",
                            "gen_ai.input.messages": "x" * 400}))
    store.add_spans("soak", spans, str(number), "ignore")
    claimed = store.claim_ready("soak-replica", 60.0, now, now)
    for position, pending in enumerate(claimed):
        scores = tuple(1 + (position + d) % 5 for d in range(6))
        store.record(EvaluationResult(
            conversation_id=pending.key, agent=f"agent-{position % 4}", rubric=f"rubric-{position % 3}",
            rubric_version="v1", rubric_kind="weighted", judge_model="judge", evaluated_at=now,
            outcome="pass" if position % 3 else "fail", score=sum(scores) / 30,
            reason="r" * 300, dimension_scores=tuple(
                DimensionScore(id=f"dim_{d}", score=s, applicable=True, weight=1) for d, s in enumerate(scores))))
        if position % 10 == 0:
            store.record_failure(pending.key, f"rubric-{position % 3}", pending.revision)
        if position % 5 == 0:
            store.cache_items(f"items-{pending.key}", "[" + '"item",' * 20 + '"item"]')
        store.mark_scored(pending.key, pending.revision)
    store.add_usage("rubric-0", now.date(), 1000 * len(claimed), 0.01)
    store.release_claims("soak-replica")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="PostgreSQL URL (its schema is dropped); default a temporary SQLite file")
    parser.add_argument("--days", type=int, default=180)
    parser.add_argument("--step-hours", type=float, default=6.0)
    parser.add_argument("--per-step", type=int, default=40)
    parser.add_argument("--report-days", type=int, default=15)
    parser.add_argument("--span-days", type=float, default=7.0, help="conversation.retention_days")
    parser.add_argument("--results-days", type=float, default=30.0)
    parser.add_argument("--conversations-days", type=float, default=30.0)
    parser.add_argument("--items-days", type=float, default=14.0)
    parser.add_argument("--aggregates-days", type=float, default=90.0)
    parser.add_argument("--no-retention", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path: Path | None = None
        if args.url:
            from tests.fleet import fresh_postgres

            url = fresh_postgres(args.url)
        else:
            path = Path(tmp) / "soak.db"
            url = f"sqlite:///{path}"
        store = SqlStore(url)
        if path is not None:
            # Durability is not what this measures: without an fsync per commit the run takes minutes, not hours.
            sqlalchemy.event.listen(store._engine, "connect",
                                    lambda conn, _: conn.execute("PRAGMA synchronous=OFF"))
            store._engine.dispose()
        policy = RetentionPolicy(results_days=args.results_days, conversations_days=args.conversations_days,
                                 adaptive_items_days=args.items_days, aggregates_days=args.aggregates_days,
                                 batch=100_000)
        clock = [START]
        store.clock = lambda: clock[0]
        print(f"{'SQLite' if path else 'PostgreSQL'}; {args.per_step} conversations every {args.step_hours:g} "
              f"simulated hours; retention {'off' if args.no_retention else policy}\n")
        print("| day | conversations so far | DB size (MiB) | " + " | ".join(TABLES) + " |")
        print("|---|---|---|" + "---|" * len(TABLES))
        steps = int(args.days * 24 / args.step_hours)
        per_day = 24 / args.step_hours
        started = time.monotonic()
        for number in range(1, steps + 1):
            now = START + timedelta(hours=number * args.step_hours)
            clock[0] = now
            step(store, now, number, args.per_step)
            if not args.no_retention:
                store.prune(now - timedelta(days=args.span_days))
                store.retain(now, policy)
                # The daemon's rollup pruning (monitor/rollups.py): the longest default window (7d) plus a week.
                store.prune_rollups(bucket_of(now.timestamp()) - (7 * 24 + KEEP_EXTRA_HOURS) * BUCKET_SECONDS)
            if number % int(args.report_days * per_day) == 0:
                found = counts(store)
                size = size_bytes(store, path) / 2**20
                print(f"| {number / per_day:.0f} | {number * args.per_step} | {size:.1f} | "
                      + " | ".join(str(found[t]) for t in TABLES) + " |", flush=True)
        store.close()
        print(f"\n{steps} steps in {time.monotonic() - started:.0f} s wall-clock")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
