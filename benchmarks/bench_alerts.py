"""Regression alerts: detection delay and false alerts against a fixed-threshold rule, and detector time per cycle.

    python benchmarks/bench_alerts.py                    # prints the Markdown tables of BENCHMARKS.md
    python benchmarks/bench_alerts.py --quick            # fewer runs
    python benchmarks/bench_alerts.py --cycle --before main   # only the cycle, this code and main's side by side

Streams are simulated minute by minute: a constant traffic (evaluations per hour), a pass rate of 0.90 for 8 days,
then a drop of 5, 10 or 20 points. Every minute (the daemon's default cycle) the detector runs at its default
settings (windows 1h and 24h, trailing 7-day baseline, min 30 samples, min effect 5 points, FDR 0.05, for 10m) and
the fixed-threshold rule "pass rate over 1h < 0.8, for 10m" runs on the same counts. Delay: evaluations scored
after the drop began until the alert fires. False alerts: independent 1-hour windows of pure noise (no drop), each
evaluated once, with no persistence (the worst case for both).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # BENCH_ALERTS_CODE: another checkout of the package (the "before" of a side-by-side run).
    sys.path.insert(0, os.environ.get("BENCH_ALERTS_CODE", str(Path(__file__).resolve().parents[1])))

from prometheus_client import CollectorRegistry, generate_latest

from monitor.alerts.detector import Counts, DetectorSettings, JudgeConfig, SeriesCounts, detect
from monitor.alerts.lifecycle import AlertState, step
from monitor.alerts.metrics import AlertMetrics

REPO = Path(__file__).resolve().parents[1]
STORE_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
"""The cycle's time in the store it reads (fixed, so that a filled --store-url serves every run)."""
CONFIG = JudgeConfig("v1", "gpt-4.1", "1")
DEFAULTS = DetectorSettings()
BEFORE = 0.90
THRESHOLD = 0.80
FOR_MINUTES = 10
WINDOWS = (("1h", 60), ("24h", 1440))
BASELINE_MINUTES = 7 * 1440
HISTORY_MINUTES = BASELINE_MINUTES + 1440


def _minute(rng: random.Random, per_minute: int, rate: float) -> int:
    return sum(rng.random() < rate for _ in range(per_minute))


def _counts(prefix_n: list[int], prefix_p: list[int], start: int, end: int) -> Counts:
    start = max(0, start)
    n = prefix_n[end] - prefix_n[start]
    passed = prefix_p[end] - prefix_p[start]
    return Counts(passed=passed, failed=n - passed, first_ts=float(start), last_ts=float(end))


def _detector_fires(prefix_n: list[int], prefix_p: list[int], now: int) -> bool:
    windows = []
    for name, minutes in WINDOWS:
        current = _counts(prefix_n, prefix_p, now - minutes, now)
        baseline = _counts(prefix_n, prefix_p, now - minutes - BASELINE_MINUTES, now - minutes)
        windows.append((name, [SeriesCounts("rubric", "agent", CONFIG, None, current, baseline)]))
    return any(v.status == "regression" for v in detect(windows, DEFAULTS).verdicts)


def _threshold_fires(prefix_n: list[int], prefix_p: list[int], now: int) -> bool:
    current = _counts(prefix_n, prefix_p, now - 60, now)
    # As a fixed-threshold rule over a ratio does, no data reads as nothing, and any sample size is trusted.
    return current.scored > 0 and current.passed / current.scored < THRESHOLD


def delay(per_hour: int, drop: float, seed: int, max_minutes: int = 3 * 1440) -> tuple[int | None, int | None]:
    """Evaluations after the drop until each rule fires (None: not within ``max_minutes``)."""
    rng = random.Random(seed)
    per_minute = per_hour // 60
    prefix_n, prefix_p = [0], [0]
    for _ in range(HISTORY_MINUTES):
        prefix_n.append(prefix_n[-1] + per_minute)
        prefix_p.append(prefix_p[-1] + _minute(rng, per_minute, BEFORE))
    drop_at = HISTORY_MINUTES
    detector_streak = threshold_streak = 0
    detector_at = threshold_at = None
    for minute in range(1, max_minutes + 1):
        prefix_n.append(prefix_n[-1] + per_minute)
        prefix_p.append(prefix_p[-1] + _minute(rng, per_minute, BEFORE - drop))
        now = drop_at + minute
        if detector_at is None:
            detector_streak = detector_streak + 1 if _detector_fires(prefix_n, prefix_p, now) else 0
            if detector_streak > FOR_MINUTES:
                detector_at = minute
        if threshold_at is None:
            threshold_streak = threshold_streak + 1 if _threshold_fires(prefix_n, prefix_p, now) else 0
            if threshold_streak > FOR_MINUTES:
                threshold_at = minute
        if detector_at is not None and threshold_at is not None:
            break
    return (None if detector_at is None else detector_at * per_minute,
            None if threshold_at is None else threshold_at * per_minute)


def false_alerts(per_hour: int, windows: int, seed: int) -> tuple[int, int]:
    """Alerts over ``windows`` independent noise windows (1h current, 7 days of baseline before it)."""
    rng = random.Random(seed)
    detector = threshold = 0
    for _ in range(windows):
        current_n = per_hour
        baseline_n = per_hour * 24 * 7
        current_p = sum(rng.random() < BEFORE for _ in range(current_n))
        # The baseline's pass count, drawn by its normal approximation (a week of draws per window is slow).
        mean, sd = baseline_n * BEFORE, (baseline_n * BEFORE * (1 - BEFORE)) ** 0.5
        baseline_p = min(baseline_n, max(0, round(rng.gauss(mean, sd))))
        current = Counts(passed=current_p, failed=current_n - current_p, first_ts=1, last_ts=2)
        baseline = Counts(passed=baseline_p, failed=baseline_n - baseline_p, first_ts=0, last_ts=1)
        verdicts = detect([("1h", [SeriesCounts("rubric", "agent", CONFIG, None, current, baseline)])],
                          DEFAULTS).verdicts
        detector += any(v.status == "regression" for v in verdicts)
        threshold += current_n > 0 and current_p / current_n < THRESHOLD
    return detector, threshold


def calibration() -> float:
    """CPU seconds of 10 million integer additions in a Python loop: how fast this machine's core is, to compare
    runs on different machines."""
    started = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - started


FILLED = 20
"""Results per series that ``fill_store`` writes (ids 1 to FILLED x series); ids above are ``add_traffic``'s."""


def fill_store(url: str, rubrics: int, agents: int, dimensions: int, now: float) -> Any:
    """A store where every (rubric, agent) has results on both sides of both windows (1h, 24h, 7-day baselines):
    five results in each of the four periods the windows cut (scores 1 to 5 on every dimension), 20 results and
    200 dimension scores per series. A store filled by an earlier run (``--store-url``) is first put back as it was
    filled (the traffic of that run removed)."""
    from sqlalchemy import delete, func, insert, select, update

    from monitor.alerts.store import AlertStore
    from monitor.store.sql import SqlStore, dimensions_table, results_table

    store = SqlStore(url)
    filled = rubrics * agents * FILLED
    with store.transaction() as conn:
        conn.execute(delete(dimensions_table).where(dimensions_table.c.result_id > filled))
        conn.execute(delete(results_table).where(results_table.c.id > filled))
        conn.execute(update(results_table).values(current=True))
        conn.execute(update(dimensions_table).values(current=True))
        held = conn.execute(select(func.count()).select_from(results_table)).scalar_one()
    if held == filled:
        return AlertStore(store)
    if held:
        raise SystemExit(f"{url}: holds {held} results that this benchmark did not write; give it an empty database")
    hour = 3600.0
    periods = (now - 1800, now - 12 * hour, now - 4 * 24 * hour, now - 7 * 24 * hour - 12 * hour)
    results, scores = [], []
    number = 0
    for r in range(rubrics):
        for a in range(agents):
            for at in periods:
                for k in range(5):
                    number += 1
                    results.append(_result_row(number, r, a, at + k, "pass" if k else "fail"))
                    scores += _score_rows(number, r, a, at + k, dimensions, k)
    with store.transaction() as conn:
        for start in range(0, len(results), 5000):
            conn.execute(insert(results_table), results[start:start + 5000])
        for start in range(0, len(scores), 50000):
            conn.execute(insert(dimensions_table), scores[start:start + 50000])
    return AlertStore(store)


def _result_row(number: int, rubric: int, agent: int, at: float, outcome: str) -> dict[str, Any]:
    return {"id": number, "conversation_id": f"c{number}", "rubric": f"rubric-{rubric}", "rubric_version": "1",
            "turn_key": -1, "revision": 0, "current": True, "agent": f"agent-{agent}", "outcome": outcome,
            "score": 0.9 if outcome == "pass" else 0.2, "evaluated_ts": at, "payload": "{}", "judge_model": "gpt-4.1",
            "prompt_version": "1", "agent_version": None, "unscored_reason": None}


def _score_rows(number: int, rubric: int, agent: int, at: float, dimensions: int, k: int) -> list[dict[str, Any]]:
    return [{"result_id": number, "dimension": f"d{d}", "rubric": f"rubric-{rubric}", "rubric_version": "1",
             "agent": f"agent-{agent}", "score": 1 + (k + d) % 5, "current": True, "evaluated_ts": at}
            for d in range(dimensions)]


TRAFFIC = (200, 20)
"""New results and superseded ones between two cycles (a minute at 12,000 evaluations an hour)."""


def add_traffic(store: Any, rubrics: int, agents: int, dimensions: int, now: float, rng: random.Random) -> None:
    """A minute of traffic before the cycle at ``now``: new results dated in that minute, and some filled results
    superseded (marked not current, as a new revision does)."""
    from sqlalchemy import func, insert, select, update

    from monitor.store.tables import dimensions_table, results_table

    with store._store.transaction() as conn:
        number = int(conn.execute(select(func.max(results_table.c.id))).scalar_one())
        results, scores = [], []
        for _ in range(TRAFFIC[0]):
            number += 1
            r, a, at = rng.randrange(rubrics), rng.randrange(agents), now - rng.uniform(0, 60)
            results.append(_result_row(number, r, a, at, "pass" if rng.random() < 0.9 else "fail"))
            scores += _score_rows(number, r, a, at, dimensions, rng.randrange(5))
        conn.execute(insert(results_table), results)
        conn.execute(insert(dimensions_table), scores)
        old = rng.sample(range(1, rubrics * agents * FILLED + 1), TRAFFIC[1])
        conn.execute(update(results_table).where(results_table.c.id.in_(old)).values(current=False))
        conn.execute(update(dimensions_table).where(dimensions_table.c.result_id.in_(old)).values(current=False))


def read_windows(store: Any, now: float) -> list[tuple[str, list[SeriesCounts]]]:
    """The windows as the service reads them."""
    at = datetime.fromtimestamp(now, UTC)
    plan = (("1h", 3600.0), ("24h", 86400.0))
    if hasattr(store, "window_counts"):
        found: list[tuple[str, list[SeriesCounts]]] = store.window_counts(plan, 7 * 86400.0, at)
        return found
    return [(name, store.counts(seconds, 7 * 86400.0, at)) for name, seconds in plan]


def cycle_time(rubrics: int = 100, agents: int = 20, dimensions: int = 10, repeat: int = 3,
               store_url: str | None = None) -> tuple[dict[str, float], int, int, int]:
    """CPU seconds (process time: other load on a shared machine does not count) of one cycle: reading the
    windows from a store, detection (2 windows), lifecycle step and metrics publication, and of one scrape of
    the regression families; the number of tests run, of detector series exported and of series read.

    The store is read first as at start-up (``first read``), then once per cycle after a minute of traffic
    (``add_traffic``), the cycle's time moving on a minute each time. Reads are also timed on the wall clock
    (``*_wall``): on PostgreSQL the database's work is in its own process."""
    rng = random.Random(1)
    names = [f"d{i}" for i in range(dimensions)]

    def counts(n: int, rate: float) -> Counts:
        passed = int(n * rate)
        dims = {d: [int(n * w) for w in (0.02, 0.03, 0.1, 0.35, 0.5)] for d in names}
        return Counts(passed=passed, failed=n - passed, first_ts=0, last_ts=1, dimensions=dims)

    windows = []
    for name, scale in (("1h", 1), ("24h", 24)):
        series = [SeriesCounts(f"rubric-{r}", f"agent-{a}", CONFIG, None,
                               counts(40 * scale, 0.9 - 0.2 * (rng.random() < 0.01)), counts(40 * 24 * 7, 0.9))
                  for r in range(rubrics) for a in range(agents)]
        windows.append((name, series))
    now = STORE_NOW
    with tempfile.TemporaryDirectory() as folder:
        store = fill_store(store_url or f"sqlite:///{folder}/results.db", rubrics, agents, dimensions, now)
        registry = CollectorRegistry()
        metrics = AlertMetrics(registry)
        exposition = None
        try:
            from monitor.metrics.exposition import Exposition
            from monitor.metrics.quality import QualityMetrics

            if hasattr(metrics, "rendered"):  # prepared once per cycle: a scrape serves the bytes
                exposition = Exposition(CollectorRegistry(), QualityMetrics([], 1), metrics)
        except ImportError:
            pass
        states: dict[str, AlertState] = {}
        best = dict.fromkeys(("read", "read_wall", "detect", "lifecycle", "metrics", "scrape"), float("inf"))
        started, wall = time.process_time(), time.perf_counter()
        found = read_windows(store, now)
        best["first_read"], best["first_read_wall"] = time.process_time() - started, time.perf_counter() - wall
        tests = exported = read = 0
        for _ in range(repeat):
            now += 60
            add_traffic(store, rubrics, agents, dimensions, now, rng)
            started, wall = time.process_time(), time.perf_counter()
            found = read_windows(store, now)
            was_read, read_wall = time.process_time(), time.perf_counter() - wall
            detection = detect(windows, DEFAULTS)
            detected = time.process_time()
            changed, _ = step(states, detection.by_key(), 0.0, 600.0, 14400.0)
            stepped = time.process_time()
            metrics.publish(detection, {**states, **changed})
            published = time.process_time()
            body = exposition.scrape().body if exposition is not None else generate_latest(registry)
            scraped = time.process_time()
            for phase, seconds in (("read", was_read - started), ("read_wall", read_wall),
                                   ("detect", detected - was_read), ("lifecycle", stepped - detected),
                                   ("metrics", published - stepped), ("scrape", scraped - published)):
                best[phase] = min(best[phase], seconds)
            tests = sum(v.test is not None for v in detection.verdicts)
            exported = sum(1 for line in body.splitlines() if line and not line.startswith(b"#")
                           and line.startswith(b"rubric_monitor_") and not line.startswith(b"rubric_monitor_notif"))
            read = sum(len(series) for _, series in found)
    return best, tests, exported, read


def side_by_side(before: str, rounds: int, store_url: str | None, before_store_url: str | None
                 ) -> list[tuple[str, dict[str, Any]]]:
    """The cycle of ``before`` (a git revision: its ``monitor`` package) and of this checkout, in alternating
    subprocesses, ``rounds`` each (best of each phase kept); ``before_store_url``: the store of ``before`` when it
    cannot open this checkout's (an older schema revision)."""
    runs: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", before, "monitor"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        best: dict[str, dict[str, Any]] = {}
        for _ in range(rounds):
            for label, code, url in ((before, folder, before_store_url or store_url),
                                     ("this checkout", str(REPO), store_url)):
                command = [sys.executable, str(Path(__file__).resolve()), "--cycle-json"]
                if url:
                    command += ["--store-url", url]
                out = subprocess.run(command, env={**os.environ, "BENCH_ALERTS_CODE": code}, check=True,
                                     capture_output=True, text=True).stdout
                result = json.loads(out)
                held = best.setdefault(label, result)
                for phase, seconds in result["seconds"].items():
                    held["seconds"][phase] = min(held["seconds"][phase], seconds)
        runs = list(best.items())
    return runs


def cycle_table(runs: list[tuple[str, dict[str, Any]]]) -> None:
    print("| code | first read, CPU (wall) | read a cycle, CPU (wall) | detection | lifecycle | metrics | "
          "**cycle total** (the read on the wall clock) | one scrape of the detector's families | series exported "
          "| tests |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, result in runs:
        ms = {k: v * 1000 for k, v in result["seconds"].items()}
        # The read's wall time: on PostgreSQL most of it is the server's CPU, which the daemon waits for.
        total = ms["read_wall"] + ms["detect"] + ms["lifecycle"] + ms["metrics"]
        print(f"| {label} | {ms['first_read']:,.0f} ms ({ms['first_read_wall']:,.0f} ms) | {ms['read']:,.0f} ms "
              f"({ms['read_wall']:,.0f} ms) | {ms['detect']:,.0f} ms | {ms['lifecycle']:,.0f} ms | "
              f"{ms['metrics']:,.0f} ms | **{total:,.0f} ms** | {ms['scrape']:,.0f} ms | {result['exported']:,} | "
              f"{result['tests']:,} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--cycle", action="store_true", help="only the detector's time per cycle")
    parser.add_argument("--before", metavar="REV", help="with --cycle: also the cycle of this git revision, "
                        "alternating with this checkout's")
    parser.add_argument("--rounds", type=int, default=3, help="with --before: runs of each (best kept)")
    parser.add_argument("--store-url", help="the store to read the windows from (default: a new SQLite file)")
    parser.add_argument("--before-store-url", help="with --before: the store of that revision (default: --store-url)")
    parser.add_argument("--cycle-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cycle_json:
        seconds, tests, exported, read = cycle_time(store_url=args.store_url)
        print(json.dumps({"seconds": seconds, "tests": tests, "exported": exported, "read": read}))
        return 0
    if not args.cycle:
        delays_and_false_alerts(5 if args.quick else 20)
        print()
    speed = calibration()
    if args.before:
        runs = side_by_side(args.before, args.rounds, args.store_url, args.before_store_url)
    else:
        seconds, tests, exported, read = cycle_time(store_url=args.store_url)
        runs = [("this checkout", {"seconds": seconds, "tests": tests, "exported": exported, "read": read})]
    runs_of_each = f"{args.rounds} rounds of 3 cycles" if args.before else "3 cycles"
    print(f"Cycle at 100 rubrics x 20 agents x 10 dimensions, 2 windows, CPU time (best of {runs_of_each}; a loop "
          f"of 10M additions takes {speed:.2f} s of CPU on this machine):")
    print()
    cycle_table(runs)
    return 0


def delays_and_false_alerts(runs: int) -> None:
    noise_windows = 1000
    print("| traffic | drop | detector: median delay (evaluations) | detected | threshold < 0.8: median delay | "
          "detected |")
    print("|---|---|---|---|---|---|")
    for per_hour in (60, 600):
        for drop in (0.05, 0.10, 0.20):
            results = [delay(per_hour, drop, seed) for seed in range(runs)]
            cells = []
            for index in (0, 1):
                found = [r[index] for r in results if r[index] is not None]
                median = f"{statistics.median(found):.0f}" if found else "never"
                cells += [median, f"{len(found)}/{runs}"]
            print(f"| {per_hour}/h | {drop * 100:.0f} points | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    print()
    print("| traffic | noise windows | detector false alerts | threshold < 0.8 false alerts |")
    print("|---|---|---|---|")
    for per_hour in (20, 60, 600):
        detector, threshold = false_alerts(per_hour, noise_windows, seed=per_hour)
        print(f"| {per_hour}/h | {noise_windows} | {detector} | {threshold} |")


if __name__ == "__main__":
    sys.exit(main())
