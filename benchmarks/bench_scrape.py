"""Metrics at scale: scrape time, bytes and series, end-of-cycle refresh, and the cost of recording a result.

    python benchmarks/bench_scrape.py --backend sqlite --sizes 0,100000,1000000
    python benchmarks/bench_scrape.py --backend postgres --postgres-url postgresql+psycopg://... --sizes ...
    python benchmarks/bench_scrape.py --backend postgres --postgres-url ... --sizes 0 --record-only

100 rubrics × 20 agents × 10 dimensions, windows 1h and 24h. For each history size, the results of the last 24
hours are inserted in bulk (results, their dimension rows), the rollups rebuilt from them
(``SqlStore.rebuild_rollups``, the product path), then a daemon's state is built as after a restart (``startup``:
the first read of the windows), 2,000 evaluations are recorded through the product path (one per rubric and
agent, so every series exists), and the end-of-cycle refresh and 20 scrapes over real HTTP are timed: by a
client in this process, by curl (a separate process, as Prometheus is), and in the server's CPU time.

Recording cost, on the same store (``record_costs``): store variants take turns result by result, in rounds, so
machine load hits them alike: ``before`` records as before the rollups existed (no rollups, one statement per
table), ``now`` is the product; on PostgreSQL also ``separate`` (rollups kept in one statement per table, the
product before it recorded in one statement) and ``now_without_rollups``. Results are a 10-dimension weighted
rubric's, with reasons. The metric side compares the histograms the counters replaced (prometheus_client, as on
main before) with ``QualityMetrics.record``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder

from monitor.daemon.http import HealthState, MonitorHTTPServer
from monitor.evaluators.prompts import PROMPT_VERSION
from monitor.metrics import MonitorMetrics
from monitor.metrics.exposition import Exposition, names_unescaped
from monitor.metrics.quality import QualityMetrics
from monitor.metrics.rollups import parse_window
from monitor.models import DimensionScore, EvaluationResult
from monitor.store.base import RollupKey, RollupSums
from monitor.store.sql import SqlStore

RUBRICS, AGENTS, DIMENSIONS = 100, 20, 10
WINDOWS = ("1h", "24h")
SCRAPES = 20
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_PAYLOAD = json.dumps({"reason": "x" * 200})  # a stand-in: nothing timed here reads a result's payload
_CHUNK = 20_000
# A judge's reasons as the weighted evaluator keeps them (bounded), so a recorded payload has its real size.
_REASON = "The agent confirmed the booking details and cited the fare rules, but skipped the baggage policy. " * 2
_DIMENSION_REASON = "Asked for the reservation id before changing the flight; quoted the policy correctly."


def rubric(r: int) -> str:
    return f"rubric-{r:03d}"


def agent(a: int) -> str:
    return f"agent-{a:02d}"


def bulk_insert(store: SqlStore, size: int, now: float) -> float:
    """``size`` results in the last 24 h with their dimension rows, straight into the tables; returns seconds."""
    started = time.perf_counter()
    rng = random.Random(7)
    raw: Any = store._engine.raw_connection()
    postgres = store._engine.dialect.name == "postgresql"
    try:
        cursor = raw.cursor()
        if not postgres:
            cursor.execute("PRAGMA synchronous=OFF")
        next_id = 1
        for start in range(0, size, _CHUNK):
            results: list[tuple[Any, ...]] = []
            dimensions: list[tuple[Any, ...]] = []
            for i in range(start, min(size, start + _CHUNK)):
                r, a = rng.randrange(RUBRICS), rng.randrange(AGENTS)
                ts = now - rng.random() * 86400
                scores = [rng.randint(1, 5) for _ in range(DIMENSIONS)]
                score = sum(scores) / (5 * DIMENSIONS)
                outcome = "pass" if score >= 0.6 else "fail"
                results.append((next_id, f"bulk-{i}", rubric(r), "1", -1, 0, True, agent(a), outcome, score, ts,
                                _PAYLOAD))
                dimensions.extend((next_id, f"dim-{d}", rubric(r), "1", agent(a), s, True, ts)
                                  for d, s in enumerate(scores))
                next_id += 1
            if postgres:
                with cursor.copy("COPY results (id, conversation_id, rubric, rubric_version, turn_key, revision, "
                                 "current, agent, outcome, score, evaluated_ts, payload) FROM STDIN") as copy:
                    for row in results:
                        copy.write_row(row)
                with cursor.copy("COPY result_dimensions (result_id, dimension, rubric, rubric_version, agent, "
                                 "score, current, evaluated_ts) FROM STDIN") as copy:
                    for row in dimensions:
                        copy.write_row(row)
            else:
                cursor.executemany("INSERT INTO results (id, conversation_id, rubric, rubric_version, turn_key, "
                                   "revision, current, agent, outcome, score, evaluated_ts, payload) "
                                   "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", results)
                cursor.executemany("INSERT INTO result_dimensions VALUES (?,?,?,?,?,?,?,?)", dimensions)
            raw.commit()
        if postgres and size:
            cursor.execute("SELECT setval(pg_get_serial_sequence('results', 'id'), %s)", (next_id,))
            cursor.execute("ANALYZE")
            raw.commit()
    finally:
        raw.close()
    return time.perf_counter() - started


def evaluation(r: int, a: int, serial: int, at: datetime) -> EvaluationResult:
    scores = [1 + (r + a + d + serial) % 5 for d in range(DIMENSIONS)]
    score = sum(scores) / (5 * DIMENSIONS)
    return EvaluationResult(
        conversation_id=f"live-{serial}", trace_ids=(f"{serial:032x}",), agent=agent(a), rubric=rubric(r),
        rubric_version="1", rubric_kind="weighted", judge_model="m", outcome="pass" if score >= 0.6 else "fail",
        score=score, evaluated_at=at, reason=_REASON,
        dimension_scores=tuple(DimensionScore(id=f"dim-{d}", score=s, applicable=True, weight=1 + d % 3,
                                              reason=_DIMENSION_REASON)
                               for d, s in enumerate(scores)),
    )


class _WithoutRollups(SqlStore):
    """``record`` without the rollup maintenance, in the statements the store uses now."""

    def _insert_result(self, conn: Any, row: dict[str, Any], scores: Sequence[tuple[str, int]],
                       rollup: dict[tuple[int, RollupKey], RollupSums]) -> None:
        super()._insert_result(conn, row, scores, {})

    def _note_late_changes(self, rollup: dict[tuple[int, RollupKey], RollupSums]) -> None:
        return None


class _Before(_WithoutRollups):
    """``record`` as it was before the rollups: one statement per table (result, then its dimension rows)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._one_statement = False


class _SeparateStatements(SqlStore):
    """``record`` with rollups in one statement per table (result, dimension rows, rollup upsert): what it was
    on PostgreSQL before the one-statement record."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._one_statement = False


class _OldQualityMetrics:
    """The histograms the counters replaced, counted as ``Pipeline._record`` did on main."""

    def __init__(self) -> None:
        registry = CollectorRegistry()
        labels = ["rubric", "rubric_version", "agent"]
        self.evaluations = Counter("e", "", [*labels, "outcome"], registry=registry)
        self.score = Histogram("s", "", labels, buckets=[i / 10 for i in range(1, 11)], registry=registry)
        self.dimension = Histogram("d", "", [*labels, "dimension"], buckets=[1, 2, 3, 4, 5], registry=registry)

    def record(self, result: EvaluationResult) -> None:
        labels = (result.rubric, result.rubric_version, result.agent)
        self.evaluations.labels(*labels, result.outcome).inc()
        if result.score is not None and result.outcome != "unscored":
            self.score.labels(*labels).observe(result.score)
            for d in result.dimension_scores:
                if d.applicable and d.score is not None:
                    self.dimension.labels(*labels, d.id).observe(d.score)


RECORD_VARIANTS = {
    "before": _Before,  # no rollups, one statement per table (main before issue 10)
    "now": SqlStore,  # the product
    "separate": _SeparateStatements,  # rollups, one statement per table (PostgreSQL before this change)
    "now_without_rollups": _WithoutRollups,  # the product's statements without the rollup part
}
"""Stores compared by ``record_costs``; on SQLite the last two are the same code as ``now`` and ``before``."""


def store_of_commit(commit: str) -> type[SqlStore]:
    """``SqlStore`` as ``monitor/store/sql.py`` was at ``commit`` (the rest of the package as it is now): the code
    before a change, timed in the same process as the code after it."""
    repo = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:monitor/store/sql.py"], capture_output=True,
                            text=True, check=True).stdout
    module = types.ModuleType(f"sql_at_{commit}")
    exec(compile(source, f"{commit}:monitor/store/sql.py", "exec"), module.__dict__)  # this repository's own code
    store: type[SqlStore] = module.SqlStore
    return store


def record_costs(url: str, rounds: int, per_round: int, commit: str | None = None) -> dict[str, Any]:
    """Per-record wall time of each store variant, interleaved: each round records ``per_round`` results per
    variant, taking turns result by result in an order that rotates, so machine load hits every variant alike.
    Returns each variant's median (ms) over all records, and per round the ratio of its median to ``before``'s.
    Metrics: the histograms before issue 10 against the counters now, timed alongside."""
    postgres = url.startswith("postgresql")
    variants: dict[str, type[SqlStore]] = dict(RECORD_VARIANTS)
    names = list(RECORD_VARIANTS) if postgres else ["before", "now"]
    if commit is not None:
        variants[f"at_{commit}"] = store_of_commit(commit)
        names.append(f"at_{commit}")
    stores = {name: variants[name](url) for name in names}
    metrics: dict[str, _OldQualityMetrics | QualityMetrics] = {"before": _OldQualityMetrics(),
               "now": MonitorMetrics(CollectorRegistry(), [parse_window(w) for w in WINDOWS]).quality}
    times: dict[str, list[list[float]]] = {name: [] for name in [*names, "metrics_before", "metrics_now"]}
    now, serial = datetime.now(UTC), 0
    for round_index in range(rounds):
        for values in times.values():
            values.append([])
        for i in range(per_round):
            order = names[(i + round_index) % len(names):] + names[:(i + round_index) % len(names)]
            for name in order:
                serial += 1
                done = evaluation(serial % RUBRICS, (serial // RUBRICS) % AGENTS, 10_000_000 + serial, now)
                started = time.perf_counter()
                stores[name].record(done)
                times[name][-1].append(time.perf_counter() - started)
                if name in metrics:
                    started = time.perf_counter()
                    metrics[name].record(done)
                    times[f"metrics_{name}"][-1].append(time.perf_counter() - started)
    for store in stores.values():
        store.close()
    report: dict[str, Any] = {f"record_{name}_ms": round(statistics.median(
        [t for per_round_times in rounds_times for t in per_round_times]) * 1000, 3)
        for name, rounds_times in times.items()}
    for name in names[1:]:
        ratios = [statistics.median(mine) / statistics.median(base)
                  for mine, base in zip(times[name], times["before"], strict=True)]
        report[f"record_{name}_vs_before_per_round"] = [round(r, 3) for r in ratios]
        report[f"record_{name}_vs_before_median"] = round(statistics.median(ratios), 3)
    whole = [(statistics.median(s) + statistics.median(m)) / (statistics.median(b) + statistics.median(mb))
             for s, m, b, mb in zip(times["now"], times["metrics_now"], times["before"], times["metrics_before"],
                                    strict=True)]
    report["record_whole_path_now_vs_before_median"] = round(statistics.median(whole), 3)
    report["record_rounds"], report["record_per_round"] = rounds, per_round
    return report


def get(url: str, **headers: str) -> tuple[float, bytes]:
    request = urllib.request.Request(url, headers=headers)
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        body = response.read()
    return time.perf_counter() - started, body


def curl_seconds(url: str, headers: list[str]) -> float:
    """One scrape by curl, a separate process: its own time from connecting to the body's last byte."""
    arguments = [part for header in headers for part in ("-H", header)]
    done = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}", *arguments, url],
                          capture_output=True, text=True, check=True)
    return float(done.stdout)


def measure(url: str, size: int, records: int) -> dict[str, Any]:
    store = SqlStore(url)
    now = datetime.now(UTC)
    inserted = bulk_insert(store, size, now.timestamp())
    started = time.perf_counter()
    rollup_rows = store.rebuild_rollups()
    rebuild = time.perf_counter() - started

    registry = CollectorRegistry()
    metrics = MonitorMetrics(registry, [parse_window(w) for w in WINDOWS], max_agents_per_rubric=50)
    metrics.judge_configured("openai", "gpt-4o-mini", PROMPT_VERSION)
    for r in range(RUBRICS):
        metrics.rubric_active(rubric(r))
        metrics.rubric_info.labels(rubric(r), "1", "weighted").set(1)
    started = time.perf_counter()
    metrics.quality.refresh(store, now)  # after a restart: every window read from the rollups
    startup = time.perf_counter() - started

    serial = 0
    for r in range(RUBRICS):
        for a in range(AGENTS):
            serial += 1
            done = evaluation(r, a, serial, now)
            store.record(done)
            metrics.record_result(done)
    refreshes, refresh_cpu = [], []
    for _ in range(5):
        started, cpu = time.perf_counter(), time.process_time()
        metrics.quality.refresh(store, datetime.now(UTC))
        refreshes.append(time.perf_counter() - started)
        refresh_cpu.append(time.process_time() - cpu)
    started = time.perf_counter()
    metrics.quality.windows.refresh(store, datetime.now(UTC).timestamp())
    windows_only = time.perf_counter() - started
    # The hour turning: the hour that entered and, per window, the hour that left are read.
    turned = metrics.quality.windows
    started = time.perf_counter()
    turned.refresh(store, datetime.now(UTC).timestamp() + 3600)
    turn = time.perf_counter() - started
    turned.refresh(store, datetime.now(UTC).timestamp())  # back (a reload), for the scrapes below
    metrics.quality.refresh(store, datetime.now(UTC))

    exposition = Exposition(registry, metrics.quality)
    scrape_cpu: dict[str, list[float]] = {"text": [], "openmetrics": [], "gzip": [], "live_openmetrics": [],
                                          "live_openmetrics_underscores": []}
    live, openmetrics_encoder = exposition._live, choose_encoder(OPENMETRICS)[0]
    for _ in range(SCRAPES):  # the server's own work, in CPU time: what machine load does not inflate
        for kind, accept, encoding in (("text", "", ""), ("openmetrics", OPENMETRICS, ""),
                                       ("gzip", OPENMETRICS, "gzip")):
            cpu = time.process_time()
            exposition.scrape(accept, encoding)
            scrape_cpu[kind].append(time.process_time() - cpu)
        # The daemon's own series in OpenMetrics as rendered now, and with prometheus_client's default escaping
        # (``underscores``) as they were rendered before: the same bytes.
        for kind, encoder in (("live_openmetrics", names_unescaped(openmetrics_encoder)),
                              ("live_openmetrics_underscores", openmetrics_encoder)):
            cpu = time.process_time()
            encoder(live)
            scrape_cpu[kind].append(time.process_time() - cpu)
    assert names_unescaped(openmetrics_encoder)(live) == openmetrics_encoder(live)
    server = MonitorHTTPServer("127.0.0.1", 0, exposition, HealthState(interval=timedelta(seconds=60)),
                               lambda: None)
    server.start()
    endpoint = "http://{}:{}/metrics".format(*server.address)
    try:
        text_times, body = [], b""
        for _ in range(SCRAPES):
            elapsed, body = get(endpoint)
            text_times.append(elapsed)
        om_times, om_body = [], b""
        for _ in range(SCRAPES):
            elapsed, om_body = get(endpoint, Accept=OPENMETRICS)
            om_times.append(elapsed)
        gzip_times, zipped = [], b""
        for _ in range(SCRAPES):
            elapsed, zipped = get(endpoint, **{"Accept-Encoding": "gzip"})
            gzip_times.append(elapsed)
        # As a scraper in its own process sees it (Prometheus is one): curl's transfer time, start-up excluded.
        by_curl = {kind: [curl_seconds(endpoint, headers) for _ in range(SCRAPES)] for kind, headers in (
            ("text", []), ("openmetrics", [f"Accept: {OPENMETRICS}"]),
            ("openmetrics_gzip", [f"Accept: {OPENMETRICS}", "Accept-Encoding: gzip"]))}
    finally:
        server.close()
    assert gzip.decompress(zipped) == body
    series = sum(1 for line in io.BytesIO(body) if line.strip() and not line.startswith(b"#"))
    store.close()
    return {
        "results": size, "bulk_insert_s": round(inserted, 1), "rollup_rows": rollup_rows,
        "rebuild_rollups_s": round(rebuild, 2), "startup_window_read_s": round(startup, 2),
        "evaluations_recorded": records or serial,
        "refresh_median_s": round(statistics.median(refreshes), 3), "refresh_max_s": round(max(refreshes), 3),
        "refresh_cpu_median_s": round(statistics.median(refresh_cpu), 3),
        **{f"scrape_cpu_{k}_median_ms": round(statistics.median(v) * 1000, 2) for k, v in scrape_cpu.items()},
        "windows_refresh_s": round(windows_only, 3), "hour_turn_refresh_s": round(turn, 3),
        "series": series, "bytes": len(body), "openmetrics_bytes": len(om_body), "gzip_bytes": len(zipped),
        "scrape_median_ms": round(statistics.median(text_times) * 1000, 1),
        "scrape_max_ms": round(max(text_times) * 1000, 1),
        "openmetrics_median_ms": round(statistics.median(om_times) * 1000, 1),
        "gzip_median_ms": round(statistics.median(gzip_times) * 1000, 1),
        **{f"curl_{kind}_{stat}_ms": round(f(values) * 1000, 1) for kind, values in by_curl.items()
           for stat, f in (("median", statistics.median), ("max", max))},
    }


def fresh_postgres(url: str) -> str:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
    engine.dispose()
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--postgres-url", default="postgresql+psycopg://postgres@127.0.0.1:55432/rm_bench")
    parser.add_argument("--sizes", default="0,100000,1000000")
    parser.add_argument("--record-rounds", type=int, default=5, help="rounds of interleaved records")
    parser.add_argument("--record-per-round", type=int, default=200, help="records per variant and round")
    parser.add_argument("--record-commit", help="also time the store as it was at this git commit")
    parser.add_argument("--record-only", action="store_true",
                        help="only the recording cost, on a store holding SIZES results (no scrapes)")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            url = (fresh_postgres(args.postgres_url) if args.backend == "postgres"
                   else f"sqlite:///{Path(tmp) / 'results.db'}")
            if args.record_only:
                store = SqlStore(url)
                row: dict[str, Any] = {"results": size,
                                       "bulk_insert_s": round(bulk_insert(store, size, time.time()), 1)}
                store.close()
            else:
                row = measure(url, size, 0)
            row.update(record_costs(url, args.record_rounds, args.record_per_round, args.record_commit))
            row["backend"] = args.backend
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
