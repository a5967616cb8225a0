"""Regression alerts: detection delay and false alerts against a fixed-threshold rule, and detector time per cycle.

    python benchmarks/bench_alerts.py            # prints the Markdown tables of BENCHMARKS.md
    python benchmarks/bench_alerts.py --quick    # fewer runs

Streams are simulated minute by minute: a constant traffic (evaluations per hour), a pass rate of 0.90 for 8 days,
then a drop of 5, 10 or 20 points. Every minute (the daemon's default cycle) the detector runs at its default
settings (windows 1h and 24h, trailing 7-day baseline, min 30 samples, min effect 5 points, FDR 0.05, for 10m) and
the fixed-threshold rule "pass rate over 1h < 0.8, for 10m" runs on the same counts. Delay: evaluations scored
after the drop began until the alert fires. False alerts: independent 1-hour windows of pure noise (no drop), each
evaluated once, with no persistence (the worst case for both).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry

from monitor.alerts.detector import Counts, DetectorSettings, JudgeConfig, SeriesCounts, detect
from monitor.alerts.lifecycle import AlertState, step
from monitor.alerts.metrics import AlertMetrics

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


def cycle_time(rubrics: int = 100, agents: int = 20, dimensions: int = 10, repeat: int = 3
               ) -> tuple[dict[str, float], int]:
    """CPU seconds (process time: other load on a shared machine does not count) of one cycle's detection (2
    windows), lifecycle step and metrics publication; and the number of tests run."""
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
    metrics = AlertMetrics(CollectorRegistry())
    states: dict[str, AlertState] = {}
    best = {"detect": float("inf"), "lifecycle": float("inf"), "metrics": float("inf")}
    tests = 0
    for _ in range(repeat):
        started = time.process_time()
        detection = detect(windows, DEFAULTS)
        detected = time.process_time()
        changed, _ = step(states, detection.by_key(), 0.0, 600.0, 14400.0)
        stepped = time.process_time()
        metrics.publish(detection, {**states, **changed})
        published = time.process_time()
        for name, seconds in (("detect", detected - started), ("lifecycle", stepped - detected),
                              ("metrics", published - stepped)):
            best[name] = min(best[name], seconds)
        tests = sum(v.test is not None for v in detection.verdicts)
    return best, tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 5 if args.quick else 20
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
    print()
    speed = calibration()
    seconds, tests = cycle_time()
    total = sum(seconds.values())
    print(f"Cycle at 100 rubrics x 20 agents x 10 dimensions, 2 windows, {tests} tests, CPU time: detection "
          f"{seconds['detect'] * 1000:.0f} ms, lifecycle {seconds['lifecycle'] * 1000:.0f} ms, metrics "
          f"{seconds['metrics'] * 1000:.0f} ms, total {total * 1000:.0f} ms (a loop of 10M additions takes "
          f"{speed:.2f} s of CPU on this machine).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
