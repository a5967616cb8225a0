"""Judge throughput with 1, 2 and 3 replicas on one PostgreSQL, against a simulated judge with a fixed latency.

Each replica is a real ``rubric-monitor run`` subprocess with its own scripted OpenAI-compatible judge on
127.0.0.1 answering valid verdicts after ``--latency`` seconds; ``judge.concurrency`` calls in flight per replica.
The store starts empty; the clock runs from the first judge request to the moment every conversation is scored
(start-up and the first poll are left out). Each run also checks that every conversation got exactly one result
and one judge call.

    createdb -h 127.0.0.1 -p 55432 -U postgres rm_bench_replicas
    .venv/bin/python benchmarks/bench_replicas.py \\
        --url postgresql+psycopg://postgres@127.0.0.1:55432/rm_bench_replicas
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fleet import (
    Replica,
    case_of,
    fresh_postgres,
    replica_config,
    results_count,
    scored,
    slow_verdict,
    wait_until,
    write_conversations,
)
from tests.test_daemon import free_port


def run(url: str, replicas: int, conversations: int, latency: float, concurrency: int, batch: int) -> float:
    fresh_postgres(url)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_conversations(root / "traces", conversations)
        servers = [ScriptedOpenAIServer(slow_verdict(latency)) for _ in range(replicas)]
        fleet: list[Replica] = []
        for server in servers:
            server.__enter__()
        try:
            for number, server in enumerate(servers):
                fleet.append(Replica(replica_config(
                    root / f"replica-{number}", root / "traces", REPO / "examples" / "rubrics", url,
                    server.base_url, free_port(), replicas={"claim_batch": batch},
                    judge={"concurrency": concurrency, "max_retries": 0})))
            wait_until(lambda: any(s.count for s in servers), 120, "the first judge call", poll=0.02)
            started = min(r.received_at for s in servers for r in s.requests)
            wait_until(lambda: len(scored(url)) == conversations, 600, "every conversation scored", poll=0.05)
            elapsed = time.monotonic() - started
            calls = Counter(case_of(r) for s in servers for r in s.requests)
            per_replica = [s.count for s in servers]
        finally:
            for replica in fleet:
                replica.stop()
            for server in servers:
                server.__exit__()
    assert results_count(url) == conversations, "every conversation has exactly one result"
    assert set(calls.values()) == {1} and len(calls) == conversations, "one judge call per conversation"
    print(f"| {replicas} | {conversations} | {elapsed:.1f} | {conversations / elapsed:.2f} | "
          f"{replicas * concurrency / latency:.2f} | {' / '.join(map(str, per_replica))} |", flush=True)
    return conversations / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="an empty PostgreSQL database (its schema is dropped)")
    parser.add_argument("--conversations", type=int, default=120)
    parser.add_argument("--latency", type=float, default=0.5, help="judge latency, seconds")
    parser.add_argument("--concurrency", type=int, default=4, help="judge.concurrency of each replica")
    parser.add_argument("--batch", type=int, default=4, help="replicas.claim_batch")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    print(f"{args.conversations} conversations, judge latency {args.latency}s, judge.concurrency "
          f"{args.concurrency}, replicas.claim_batch {args.batch}\n")
    print("| replicas | evaluations | seconds | evaluations/s | ceiling (replicas × concurrency / latency) | "
          "judge calls per replica |")
    print("|---|---|---|---|---|---|")
    for count in args.replicas:
        run(args.url, count, args.conversations, args.latency, args.concurrency, args.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
