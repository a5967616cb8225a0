"""One daemon cycle on the quick-start defaults: bundled sample traces, SQLite, the embedded SmolLM2 judge.

    python -m benchmarks.bench_quickstart [--cycles 1] [--burn 3] [--runs 3]

``--burn N`` runs N CPU-bound processes beside it for the whole run (a busy machine: with 3 on 2 cores the load
is 4 once the daemon runs too). They start ``--settle`` seconds (default 60 with burners) before the first run,
so that the 1-minute load average reported at the start of each run already counts them. ``--runs`` builds the
daemon afresh (new store, model loaded again) that many times, one after the other.

Reports seconds per cycle, judge calls per conversation, and prompt tokens read per call (llama.cpp reuses the
cached prefix: instructions and rubric come before the conversation, so only the first call reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from monitor.app import build_monitor
from monitor.settings import Settings

REPO = Path(__file__).resolve().parents[1]


def run(cycles: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "examples" / "traces", work / "traces")
        settings = Settings(
            source={"kind": "otlp_file", "path": str(work / "traces")},
            rubrics={"directory": str(REPO / "examples" / "rubrics")},
            store={"url": f"sqlite:///{work / 'results.db'}"},
        )
        started = time.perf_counter()
        monitor = build_monitor(settings)
        startup = time.perf_counter() - started
        durations, calls, conversations = [], 0, 0
        for _ in range(cycles):
            cycle_start = time.perf_counter()
            report = monitor.run_cycle()
            durations.append(time.perf_counter() - cycle_start)
            calls += report.judge_calls
            conversations += report.conversations_ready
        results = monitor.store.results()
        monitor.close()
    return {
        "startup_seconds": round(startup, 2),
        "first_cycle_seconds": round(durations[0], 1),
        "conversations": conversations,
        "judge_calls_per_conversation": round(calls / max(conversations, 1), 2),
        "prompt_tokens_per_call": [r.input_tokens for r in results],
        "output_tokens_per_call": [r.output_tokens for r in results],
        "outcomes": [r.outcome for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=1)
    parser.add_argument("--burn", type=int, default=0, help="CPU burner processes beside the run")
    parser.add_argument("--settle", type=float, default=None, help="seconds between starting burners and the run")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    # Bounded: each burner stops by itself after 15 minutes even if this script is killed.
    burner = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burner]) for _ in range(args.burn)]
    try:
        time.sleep(args.settle if args.settle is not None else 60.0 if args.burn else 0.0)
        for _ in range(args.runs):
            load_before = os.getloadavg()[0]
            result = run(args.cycles)
            result.update(burners=args.burn, load_average_1m_before=round(load_before, 1),
                          load_average_1m_after=round(os.getloadavg()[0], 1), cpus=os.cpu_count())
            print(json.dumps(result), flush=True)
    finally:
        for process in burners:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
