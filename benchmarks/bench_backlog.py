"""A backlog of 10,000 conversations at 10 % sampling, drained by the daemon's cycle loop.

    python -m benchmarks.bench_backlog [--conversations 10000] [--rate 0.1] [--latency 0.2] [--concurrency 4]

The conversations are OTLP JSON lines read by the file source; the judge is the real openai client against the
scripted server (tests/fakes/openai_server.py) answering each call after ``--latency`` seconds. The daemon's
job (``Monitor.run_cycles``) runs cycles back to back while a cycle stops short of the backlog (its
``max_per_cycle`` evaluations are taken), so the backlog drains at the judge's pace. Reports the time to drain,
the cycles, the evaluations, and what the judge alone needs (evaluations × latency / concurrency); before this
change each cycle took ``max_per_cycle`` conversations (sampled-out ones included), one cycle per interval.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.app import build_monitor
from monitor.formats.otlp import spans_to_otlp_document
from monitor.settings import Settings
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, verdict
from tools.chat_to_otlp import chat_record_to_spans

REPO = Path(__file__).resolve().parents[1]


def write_traces(path: Path, count: int) -> int:
    spans = 0
    with path.open("w", encoding="utf-8") as out:
        for index in range(count):
            record = {"id": f"conv-{index:05d}", "agent": "reservation-assistant", "messages": [
                {"role": "user", "content": f"Can I book a table for {index % 8 + 1} on Friday at 19:00?"},
                {"role": "assistant", "content": f"Booked: a table for {index % 8 + 1}, Friday 19:00."}]}
            document = chat_record_to_spans(record, index)
            spans += len(document)
            out.write(json.dumps(spans_to_otlp_document(document), separators=(",", ":")) + "\n")
    return spans


def run(conversations: int, rate: float, latency: float, concurrency: int, cap: int) -> dict[str, object]:
    def slow_verdict(request: Recorded) -> Reply:
        reply = verdict(request, SEED_PASS_SCORES)
        reply.delay = latency
        return reply

    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAIServer(slow_verdict) as judge:
        work = Path(tmp)
        (work / "traces").mkdir()
        spans = write_traces(work / "traces" / "backlog.jsonl", conversations)
        (work / "rubrics").mkdir()
        rubric = (REPO / "examples" / "rubrics" / "restaurant-reservation.yaml").read_text()
        (work / "rubrics" / "r.yaml").write_text(rubric.replace("sampling_rate: 1.0", f"sampling_rate: {rate}"))
        config = judge_config(judge.base_url, source={"kind": "otlp_file", "path": str(work / "traces")},
                              rubrics={"directory": str(work / "rubrics")},
                              store={"url": f"sqlite:///{work / 'results.db'}"},
                              sampling={"max_per_cycle": cap})
        config["judge"].update({"concurrency": concurrency, "max_retries": 0})
        monitor = build_monitor(Settings(**config))
        cycles = 0
        original = monitor.run_cycle

        def counted() -> object:
            nonlocal cycles
            cycles += 1
            return original()

        monitor.run_cycle = counted  # type: ignore[method-assign]
        started = time.perf_counter()
        monitor.run_cycles()  # what the scheduler runs once per interval
        drained = time.perf_counter() - started
        evaluations = len(monitor.store.results())
        waiting = monitor.registry.get_sample_value("rubric_monitor_backlog_conversations",
                                                    {"source": "otlp_file"})
        monitor.close()
    judge_bound = evaluations * latency / concurrency
    return {
        "conversations": conversations, "spans": spans, "sampling_rate": rate, "max_per_cycle": cap,
        "judge_latency_seconds": latency, "judge_concurrency": concurrency,
        "evaluations": evaluations, "judge_calls": judge.count, "cycles": cycles,
        "drain_seconds": round(drained, 1), "judge_alone_seconds": round(judge_bound, 1),
        "backlog_left": waiting,
        "before_this_change_cycles": -(-conversations // cap),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-per-cycle", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(run(args.conversations, args.rate, args.latency, args.concurrency, args.max_per_cycle),
                     indent=1))


if __name__ == "__main__":
    main()
