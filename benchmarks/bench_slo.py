"""Quality SLOs: detection time and budget spent before the alert, false pages over 30 days of noise, beside the
regression detector and a fixed threshold; and the SLO rules' evaluation cost in a real Prometheus.

    python benchmarks/bench_slo.py                  # the simulation tables of BENCHMARKS.md
    python benchmarks/bench_slo.py --quick          # fewer runs
    python benchmarks/bench_slo.py --prometheus     # only the rules' evaluation cost, 100 SLOs, real Prometheus

Streams are simulated minute by minute as in bench_alerts.py: a constant traffic (evaluations per hour), a pass
rate of 0.97 for 8 days, then a drop of 2, 5, 10, 20 (and, to show where pages start, 30 and 50) points. The SLO is
the default one of an objective of 0.95 over 28 days (an error budget of 5 %, which normal traffic spends at 0.6x):
page at 14.4x over 1h and 5m or 6x over 6h and 30m, ticket at 3x over 1d and 2h or 1x over 3d and 6h, at least 30
scored evaluations in the long window, evaluated every minute.

The SLO's conditions are computed here in Python over the simulated counts with the arithmetic of the generated
PromQL (``monitor.slo.rules``): over a window, good and scored are differences of the cumulative counts (what
``increase()`` of the counters gives, without its extrapolation at the window's edges), burn rate = (1 - good /
scored) / (1 - objective), a condition holds when the burn rate over its long and its short window exceeds its
factor and the long window holds at least ``min_evaluations``; there is no ``for``. The windows, factors and minimum
are read from the SLO definition (``monitor.slo.spec``), not copied. Beside it, on the same counts: the regression
detector at its defaults (bench_alerts.py: windows 1h and 24h, trailing 7-day baseline, for 10m) and the fixed
threshold a team would set at its objective, "pass rate over 1h < 0.95, for 10m".

Delay: from the start of the drop until the alert fires, in evaluations (and time). Budget spent: the failed
evaluations from the start of the drop until the alert, as a share of the 28-day error budget (5 % of 28 days of
traffic). False alerts: alerts opened over 30 days of noise at 0.97 (after 8 days of history), per 30 days.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_alerts import HISTORY_MINUTES, _detector_fires

from monitor.slo.spec import SloDefinition, SloSettings, duration_seconds, resolve

BEFORE = 0.97
OBJECTIVE = 0.95
FOR_MINUTES = 10
SLO = resolve([SloSettings(name="agent-quality", rubric="rubric", objective=OBJECTIVE)])[0]
BUDGET_MINUTES = SLO.window_seconds // 60


@dataclass(frozen=True)
class Condition:
    tier: str
    factor: float
    long: int
    short: int
    """Windows in minutes."""


def conditions(slo: SloDefinition) -> list[Condition]:
    return [Condition(tier, window.burn_rate, duration_seconds(window.long) // 60, duration_seconds(window.short) // 60)
            for tier, alert in slo.tiers() for window in alert.windows]


CONDITIONS = conditions(SLO)


class Stream:
    """Cumulative counts per minute (index m: the counts after m minutes), grown minute by minute."""

    def __init__(self, per_hour: int, seed: int) -> None:
        self.per_minute = per_hour / 60
        self.rng = np.random.default_rng(seed)
        self.scored = [0]
        self.good = [0]

    def add(self, minutes: int, rate: float) -> None:
        # Evaluations arrive evenly (20/h: one every third minute), each passing with probability ``rate``.
        first = len(self.scored) - 1
        arrived = [int((first + m + 1) * self.per_minute) - int((first + m) * self.per_minute) for m in range(minutes)]
        passed = self.rng.binomial(arrived, rate)
        for count, value in zip(arrived, passed, strict=True):
            self.scored.append(self.scored[-1] + count)
            self.good.append(self.good[-1] + int(value))

    @property
    def now(self) -> int:
        return len(self.scored) - 1

    def window(self, now: int, minutes: int) -> tuple[int, int]:
        start = max(0, now - minutes)
        return self.good[now] - self.good[start], self.scored[now] - self.scored[start]


def slo_firing(stream: Stream, now: int, slo: SloDefinition = SLO) -> set[str]:
    """The tiers whose burn-rate condition holds at ``now``: the PromQL of ``monitor.slo.rules`` on exact counts."""
    budget = slo.error_budget
    firing = set()
    for condition in CONDITIONS:
        if condition.tier in firing:
            continue
        good_long, scored_long = stream.window(now, condition.long)
        good_short, scored_short = stream.window(now, condition.short)
        if scored_long < slo.alerting.min_evaluations or scored_short == 0:
            continue  # the guard; and an empty short window is no sample (0/0) in PromQL
        burn_long = (1 - good_long / scored_long) / budget
        burn_short = (1 - good_short / scored_short) / budget
        if burn_long > condition.factor and burn_short > condition.factor:
            firing.add(condition.tier)
    return firing


def threshold_fires(stream: Stream, now: int) -> bool:
    good, scored = stream.window(now, 60)
    return scored > 0 and good / scored < OBJECTIVE


def detector_fires(stream: Stream, now: int) -> bool:
    return _detector_fires(stream.scored, stream.good, now)


@dataclass
class Detection:
    minutes: dict[str, int | None]
    """Per rule: minutes from the start of the drop until it fires (None: not within the horizon)."""
    spent: dict[str, float | None]
    """Per rule: failures from the start of the drop until it fires, as a share of the 28-day error budget."""


RULES = ("page", "ticket", "detector", "threshold")


def detect_drop(per_hour: int, drop: float, seed: int, horizon_minutes: int, detector_minutes: int) -> Detection:
    stream = Stream(per_hour, seed)
    stream.add(HISTORY_MINUTES, BEFORE)
    start = stream.now
    found: dict[str, int | None] = dict.fromkeys(RULES)
    streaks = {"detector": 0, "threshold": 0}
    persistent: dict[str, Callable[[Stream, int], bool]] = {"detector": detector_fires, "threshold": threshold_fires}
    for minute in range(1, horizon_minutes + 1):
        stream.add(1, BEFORE - drop)
        now = stream.now
        for tier in slo_firing(stream, now):
            if found[tier] is None:
                found[tier] = minute
        for rule, fires in persistent.items():
            if found[rule] is not None or (rule == "detector" and minute > detector_minutes):
                continue
            streaks[rule] = streaks[rule] + 1 if fires(stream, now) else 0
            if streaks[rule] > FOR_MINUTES:
                found[rule] = minute
        if all(found[r] is not None or (r == "detector" and minute >= detector_minutes) for r in RULES):
            break
    budget = (1 - OBJECTIVE) * stream.per_minute * BUDGET_MINUTES
    spent: dict[str, float | None] = {}
    for rule, minute in found.items():
        if minute is None:
            spent[rule] = None
        else:
            good, scored = stream.window(start + minute, minute)
            spent[rule] = (scored - good) / budget
    return Detection(found, spent)


def false_alerts(per_hour: int, days: int, seed: int) -> dict[str, int]:
    """Alerts opened (a rule going from quiet to firing) over ``days`` of noise at the normal pass rate."""
    stream = Stream(per_hour, seed)
    stream.add(HISTORY_MINUTES, BEFORE)
    opened = dict.fromkeys(RULES, 0)
    was = dict.fromkeys(RULES, False)
    streaks = {"detector": 0, "threshold": 0}
    for _ in range(days * 1440):
        stream.add(1, BEFORE)
        now = stream.now
        tiers = slo_firing(stream, now)
        streaks["detector"] = streaks["detector"] + 1 if detector_fires(stream, now) else 0
        streaks["threshold"] = streaks["threshold"] + 1 if threshold_fires(stream, now) else 0
        state = {"page": "page" in tiers, "ticket": "ticket" in tiers,
                 "detector": streaks["detector"] > FOR_MINUTES, "threshold": streaks["threshold"] > FOR_MINUTES}
        for rule in RULES:
            opened[rule] += state[rule] and not was[rule]
        was = state
    return opened


def _time(minutes: float) -> str:
    if minutes < 120:
        return f"{minutes:.0f} min"
    if minutes < 2 * 1440:
        return f"{minutes / 60:.1f} h"
    return f"{minutes / 1440:.1f} d"


def delays_table(runs: int, traffic: tuple[int, ...], drops: tuple[float, ...]) -> None:
    horizon, detector_horizon = 7 * 1440, 3 * 1440
    print(f"| traffic | drop | SLO page: median delay | budget spent before the page | SLO ticket: median delay | "
          f"budget spent before the ticket | regression detector: median delay | threshold < {OBJECTIVE} over 1h: "
          "median delay |")
    print("|---|---|---|---|---|---|---|---|")
    for per_hour in traffic:
        for drop in drops:
            results = [detect_drop(per_hour, drop, seed, horizon, detector_horizon) for seed in range(runs)]
            cells = [f"{per_hour}/h", f"{drop * 100:.0f} points"]
            for rule in RULES:
                minutes = [r.minutes[rule] for r in results if r.minutes[rule] is not None]
                limit = detector_horizon if rule == "detector" else horizon
                if not minutes:
                    cells.append(f"never in {_time(limit)} (0/{runs})")
                else:
                    median = statistics.median(minutes)
                    found = "" if len(minutes) == runs else f", {len(minutes)}/{runs}"
                    cells.append(f"{median * per_hour / 60:,.0f} ({_time(median)}{found})")
                if rule in ("page", "ticket"):
                    spent = [r.spent[rule] for r in results if r.spent[rule] is not None]
                    cells.append(f"{statistics.median(spent):.1%}" if spent else "-")
            print("| " + " | ".join(cells) + " |")


def false_table(runs: int, traffic: tuple[int, ...], days: int) -> None:
    print(f"| traffic | simulated days | SLO pages per 30 days | SLO tickets | regression detector alerts | "
          f"threshold < {OBJECTIVE} alerts |")
    print("|---|---|---|---|---|---|")
    for per_hour in traffic:
        totals = dict.fromkeys(RULES, 0)
        for seed in range(runs):
            for rule, count in false_alerts(per_hour, days, 1000 + seed).items():
                totals[rule] += count
        scale = 30 / (days * runs)
        cells = [f"{totals[r] * scale:.1f}" for r in RULES]
        print(f"| {per_hour}/h | {days * runs} | " + " | ".join(cells) + " |")


# -- rule evaluation cost in a real Prometheus ---------------------------------------------------------------------

def _binary(name: str) -> str:
    import shutil

    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed (Debian: apt-get install prometheus)")
    return found


def rule_cost(slos: int, history_hours: int, interval: str, scrape_seconds: int) -> dict[str, Any]:
    """100 SLOs' rule groups (one rubric and agent each) over ``history_hours`` of synthetic counters backfilled
    into a real Prometheus (promtool tsdb create-blocks-from openmetrics: the counters scraped every
    ``scrape_seconds``, and the 5-minute records once a minute, as the rules would have written them), then a
    live exporter continuing the counters: the groups' own ``prometheus_rule_group_last_duration_seconds`` after a
    few evaluations."""
    import yaml

    from monitor.slo.rules import rule_groups

    definitions = resolve([SloSettings(name=f"slo-{i}", rubric=f"rubric-{i}", objective=OBJECTIVE)
                           for i in range(slos)])
    rates = {"pass": 0.9, "fail": 0.08, "unscored": 0.02}  # evaluations per second per SLO
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "rules.yaml").write_text(yaml.safe_dump(rule_groups(definitions, 0.2, interval=interval)))
        now = int(time.time())
        start = now - history_hours * 3600
        written = 0
        with (tmp / "history.om").open("w") as out:
            out.write("# TYPE rubric_monitor_evaluations counter\n")
            for i in range(slos):
                for outcome, rate in rates.items():
                    labels = f'rubric="rubric-{i}",rubric_version="v1",agent="agent-{i}",outcome="{outcome}"'
                    out.writelines(f"rubric_monitor_evaluations_total{{{labels}}} {int(rate * (t - start))} {t}\n"
                                   for t in range(start, now, scrape_seconds))
                    written += (now - start) // scrape_seconds
            out.write("# TYPE rubric_monitor_rubric_info gauge\n")
            for i in range(slos):
                out.writelines(f'rubric_monitor_rubric_info{{rubric="rubric-{i}",rubric_version="v1",kind="weighted"}}'
                               f" 1 {t}\n" for t in range(start, now, scrape_seconds))
                written += (now - start) // scrape_seconds
            for kind, rate in (("good", 0.9), ("scored", 0.98), ("unscored", 0.02)):
                out.write(f"# TYPE slo:rubric_monitor_slo_{kind}:increase5m gauge\n")
                for i in range(slos):
                    labels = f'slo="slo-{i}",rubric="rubric-{i}",rubric_version="v1"'
                    out.writelines(f"slo:rubric_monitor_slo_{kind}:increase5m{{{labels}}} {rate * 300:.1f} {t}\n"
                                   for t in range(start, now, 60))
                    written += (now - start) // 60
            out.write("# EOF\n")
        backfill = subprocess.run([_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                                   str(tmp / "history.om"), str(tmp / "tsdb")], capture_output=True, text=True)
        if backfill.returncode != 0:
            raise SystemExit(backfill.stderr[-2000:])
        (tmp / "history.om").unlink()
        started = time.time()

        def exposition() -> bytes:
            elapsed = time.time() - start
            lines = ["# TYPE rubric_monitor_evaluations_total counter"]
            for i in range(slos):
                for outcome, rate in rates.items():
                    lines.append(f'rubric_monitor_evaluations_total{{rubric="rubric-{i}",rubric_version="v1",'
                                 f'agent="agent-{i}",outcome="{outcome}"}} {int(rate * elapsed)}')
            lines.append("# TYPE rubric_monitor_rubric_info gauge")
            lines += [f'rubric_monitor_rubric_info{{rubric="rubric-{i}",rubric_version="v1",kind="weighted"}} 1'
                      for i in range(slos)]
            return ("\n".join(lines) + "\n").encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                body = exposition()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        prometheus_port = _free_port()
        (tmp / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": f"{scrape_seconds}s", "evaluation_interval": interval},
            "rule_files": [str(tmp / "rules.yaml")],
            "scrape_configs": [
                {"job_name": "synthetic", "static_configs": [{"targets": [f"127.0.0.1:{server.server_address[1]}"]}]},
                {"job_name": "prometheus", "scrape_interval": "5s",
                 "static_configs": [{"targets": [f"127.0.0.1:{prometheus_port}"]}]}],
        }))
        process = subprocess.Popen([_binary("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                                    f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{prometheus_port}"
            _wait_for_compaction(base, timeout=900)
            durations, cpu = _wait_for_durations(base, slos, rounds=5, timeout=900)
        finally:
            process.terminate()
            process.wait(timeout=60)
            server.shutdown()
        return {"samples_backfilled": written, "durations": durations, "cpu_per_round": cpu,
                "waited": time.time() - started}


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _metrics(base: str) -> str:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def _value(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")))


def _wait_for_compaction(base: str, timeout: float, quiet: float = 90) -> None:
    """Until the backfilled 2-hour blocks are compacted (no new compaction and the same blocks for ``quiet``
    seconds: Prometheus compacts once a minute), so that compaction does not count as rule evaluation."""
    deadline = time.time() + timeout
    last: tuple[float, float] | None = None
    since = time.time()
    while time.time() < deadline:
        try:
            text = _metrics(base)
        except OSError:
            time.sleep(1)
            continue
        state = (_value(text, "prometheus_tsdb_compactions_total"), _value(text, "prometheus_tsdb_blocks_loaded"))
        if state != last:
            last, since = state, time.time()
        elif time.time() - since >= quiet:
            return
        time.sleep(2)
    raise SystemExit("Prometheus kept compacting")


def _wait_for_durations(base: str, groups: int, rounds: int, timeout: float) -> tuple[list[float], float]:
    """Each group's median evaluation duration over ``rounds`` evaluations, after two rounds of warming up (the
    first evaluation also loads the blocks' chunks); and Prometheus' CPU seconds per round of all groups over
    the same time (``process_cpu_seconds_total``: the groups overlap in time, so their durations also count the
    time they wait for a core)."""
    deadline = time.time() + timeout
    seen: dict[str, list[float]] = {}
    last_round: dict[str, float] = {}
    cpu_start: tuple[float, float] | None = None
    while time.time() < deadline:
        try:
            text = _metrics(base)
        except OSError:
            time.sleep(1)
            continue
        iterations = {line.split("{", 1)[1].rsplit("}", 1)[0]: float(line.rsplit(" ", 1)[1])
                      for line in text.splitlines() if line.startswith("prometheus_rule_group_iterations_total{")}
        durations = {line.split("{", 1)[1].rsplit("}", 1)[0]: float(line.rsplit(" ", 1)[1])
                     for line in text.splitlines() if line.startswith("prometheus_rule_group_last_duration_seconds{")}
        evaluated = sum(iterations.values())
        if cpu_start is None and len(iterations) == groups and min(iterations.values()) >= 3:
            cpu_start = (_value(text, "process_cpu_seconds_total"), evaluated)
        for group, count in iterations.items():
            if count >= 3 and last_round.get(group) != count and group in durations:
                last_round[group] = count
                seen.setdefault(group, []).append(durations[group])
        if cpu_start is not None and len(seen) == groups and all(len(v) >= rounds for v in seen.values()):
            cpu = _value(text, "process_cpu_seconds_total") - cpu_start[0]
            return [statistics.median(v) for v in seen.values()], cpu / ((evaluated - cpu_start[1]) / groups)
        time.sleep(0.5)
    raise SystemExit("Prometheus did not evaluate every group in time")


def cost_table(slos: int, histories: tuple[int, ...]) -> None:
    from bench_alerts import calibration

    print(f"A loop of 10M additions takes {calibration():.2f} s of CPU on this machine; rules evaluated every 10 s "
          "(the cost of one evaluation does not depend on the interval), counters backfilled at one sample a minute.")
    print()
    print(f"| SLOs | history backfilled | samples backfilled | Prometheus CPU per evaluation of the {slos} groups | "
          "group evaluation (last_duration): sum | median group | slowest group |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for hours in histories:
        result = rule_cost(slos, hours, "10s", 60)
        durations = sorted(result["durations"])
        print(f"| {slos} | {hours} h | {result['samples_backfilled']:,} | {result['cpu_per_round'] * 1000:,.0f} ms | "
              f"{sum(durations) * 1000:,.0f} ms | "
              f"{statistics.median(durations) * 1000:.1f} ms | {durations[-1] * 1000:.1f} ms |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--prometheus", action="store_true", help="only the rules' evaluation cost")
    parser.add_argument("--slos", type=int, default=100)
    parser.add_argument("--history-hours", type=int, nargs="+", default=[6, 72])
    args = parser.parse_args()
    if args.prometheus:
        cost_table(args.slos, tuple(args.history_hours))
        return 0
    runs = 3 if args.quick else 10
    delays_table(runs, (60, 600), (0.02, 0.05, 0.10, 0.20, 0.30, 0.50))
    print()
    false_table(1 if args.quick else 3, (20, 60, 600), 30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
