"""Benchmark of the App Insights source: query-API rows → SpanRecords → conversations, on one core.

Each slice is a query result exactly as the service sends it (the JSON body of one ``PrimaryResult`` table,
customDimensions as JSON strings), made before the clock starts. The timed part is what the daemon does with
it: the real ``LogsQueryClient.query_workspace`` call, served from memory by a ``requests`` adapter instead of
the network (the client's pipeline, reading and decoding the body, its result objects), ``RowReader.read``
(rows → ``SpanRecord``s), then ``monitor.assemble.assemble`` (spans → conversations). Slices are processed
one at a time and dropped, as the source does, so peak memory should depend on the slice size and not on the
total volume.

``--path source`` (the default) queries as ``AppInsightsSource`` does, keeping the rows as sent
(``QueryCapture``); ``--path client`` queries as a stock client call does (the client's generated models and
``LogsTable`` rows), for comparison. ``--tree DIR`` runs the code of another checkout of the repository (the
previous commit, say) with this script; ``--report --before DIR`` adds that checkout's rows to the table.

Workloads:
- ``compact``: 6 spans per conversation (invoke_agent, 3 chat spans with short histories, 2 execute_tool);
  rows of about 1.2 KB.
- ``tau``: the 200 tau-bench airline conversations (``tools/tau_to_otlp.py``), replicated with fresh ids;
  every chat span repeats the history, the 6 KB policy and the tool definitions: rows average 12.6 KB.

    python benchmarks/bench_app_insights.py --workload compact --spans 1000000
    python benchmarks/bench_app_insights.py --workload compact --path client
    python benchmarks/bench_app_insights.py --report   # the BENCHMARKS.md table, each run in a subprocess
    python benchmarks/bench_app_insights.py --report --before /tmp/previous-checkout
    python benchmarks/bench_app_insights.py --report --before /tmp/main --report-workloads compact --max-spans 100000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
TREE_OPTION = "--tree"
# The code under test: this checkout, or the one named by --tree (read before the imports below).
REPO = (Path(sys.argv[sys.argv.index(TREE_OPTION) + 1]).resolve()
        if TREE_OPTION in sys.argv[:-1] else HERE)
sys.path.insert(0, str(REPO))

import requests  # noqa: E402
from azure.core.credentials import AccessToken  # noqa: E402
from azure.core.pipeline.transport import RequestsTransport  # noqa: E402
from azure.monitor.query import LogsQueryClient  # noqa: E402

from monitor.assemble import assemble  # noqa: E402
from monitor.models import SpanRecord  # noqa: E402
from monitor.sources.app_insights import RowReader  # noqa: E402
from monitor.sources.kql import WORKSPACE, Window  # noqa: E402
from tools.spans_to_app_insights import TABLE_COLUMNS, spans_to_rows  # noqa: E402

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
TRACE_MARK = "feedfacefeedface"  # the first 16 hex digits of every template trace id, replaced per replica
SPAN_MARK = "c0ffee"  # the first 6 hex digits of every template span id
CONVERSATION_MARK = "convREPLICA"
TAU_BENCH = HERE.parent / "tests" / "data" / "corpora" / "tau-bench-airline" / "gpt-4o-airline.json"
TABLES = ("AppDependencies", "AppRequests", "AppTraces")


@dataclass(frozen=True)
class Template:
    """One conversation's rows encoded for the wire, with replaceable id marks."""

    rows_json: str
    rows: int


def _columns() -> list[tuple[str, str]]:
    seen: set[str] = set()
    columns = []
    for table in TABLES:
        for column in TABLE_COLUMNS[table]:
            if column[0] not in seen:
                seen.add(column[0])
                columns.append(column)
    return columns


COLUMNS = _columns()


def _wire(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "datetime":
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond:06d}0Z"
    if kind == "dynamic" and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _renamed(spans: list[SpanRecord], number: int) -> list[SpanRecord]:
    """Template ids: marks the replicas rewrite, plus ``number`` so templates differ from each other."""
    spans_map = {s.span_id: f"{SPAN_MARK}{number:04x}{index:06x}" for index, s in enumerate(spans)}
    trace = f"{TRACE_MARK}{number:016x}"
    renamed = []
    for span in spans:
        attributes = dict(span.attributes)
        if "gen_ai.conversation.id" in attributes:
            attributes["gen_ai.conversation.id"] = f"{CONVERSATION_MARK}-{number}"
        renamed.append(
            span.model_copy(
                update={
                    "trace_id": trace,
                    "span_id": spans_map[span.span_id],
                    "attributes": attributes,
                    "parent_span_id": spans_map.get(span.parent_span_id or "", None),
                }
            )
        )
    return renamed


def template(spans: list[SpanRecord], number: int) -> Template:
    rows = spans_to_rows(_renamed(spans, number), "workspace")
    encoded = [
        json.dumps(
            [_wire(row.get(name), kind) for name, kind in COLUMNS], ensure_ascii=False, separators=(",", ":")
        )
        for table in TABLES
        for row in rows.tables.get(table, [])
    ]
    return Template(",".join(encoded), len(encoded))


def compact_spans() -> list[SpanRecord]:
    trace, root = "0" * 32, "0" * 15 + "1"
    spans = [
        SpanRecord(
            trace_id=trace,
            span_id=root,
            name="invoke_agent support",
            kind="internal",
            start_time=T0,
            end_time=T0 + timedelta(seconds=9),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support",
                "gen_ai.conversation.id": "c",
                "gen_ai.provider.name": "openai",
            },
        )
    ]
    history: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": "Where is my order 1234?"}]}
    ]
    for turn in range(3):
        at = T0 + timedelta(seconds=3 * turn)
        call = {
            "type": "tool_call",
            "id": f"call_{turn}",
            "name": "lookup_order",
            "arguments": {"id": "1234"},
        }
        last = turn == 2
        parts = [{"type": "text", "content": "It ships tomorrow."}] if last else [call]
        output = [{"role": "assistant", "parts": parts, "finish_reason": "stop" if last else "tool_call"}]
        spans.append(
            SpanRecord(
                trace_id=trace,
                span_id=f"{turn + 2:016x}",
                parent_span_id=root,
                name="chat gpt-4o",
                kind="client",
                start_time=at,
                end_time=at + timedelta(milliseconds=700),
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.usage.input_tokens": 200 + 40 * turn,
                    "gen_ai.usage.output_tokens": 25,
                    "gen_ai.response.finish_reasons": ["stop"],
                    "gen_ai.input.messages": json.dumps(history),
                    "gen_ai.output.messages": json.dumps(output),
                },
            )
        )
        history = history + output
        if not last:
            result = {
                "role": "tool",
                "parts": [
                    {
                        "type": "tool_call_response",
                        "id": f"call_{turn}",
                        "response": "status: packed, carrier: UPS",
                    }
                ],
            }
            spans.append(
                SpanRecord(
                    trace_id=trace,
                    span_id=f"{turn + 10:016x}",
                    parent_span_id=root,
                    name="execute_tool lookup_order",
                    kind="internal",
                    start_time=at + timedelta(seconds=1),
                    end_time=at + timedelta(seconds=1, milliseconds=50),
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "lookup_order",
                        "gen_ai.tool.call.id": f"call_{turn}",
                        "gen_ai.tool.call.arguments": '{"id": "1234"}',
                        "gen_ai.tool.call.result": "status: packed, carrier: UPS",
                    },
                )
            )
            history = history + [result]
    return spans


def templates(workload: str) -> list[Template]:
    if workload == "compact":
        return [template(compact_spans(), 0)]
    from tools.tau_to_otlp import derive_tool_definitions, tau_record_to_spans

    records = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    tools = derive_tool_definitions(records)
    return [
        template(tau_record_to_spans(r, base_time=T0, tool_definitions=tools), n)
        for n, r in enumerate(records)
    ]


def slices(blueprints: list[Template], total_rows: int, slice_rows: int) -> Iterator[tuple[bytes, int]]:
    """Query bodies of about ``slice_rows`` rows each, whole conversations only, until ``total_rows``."""
    head = json.dumps({"name": "PrimaryResult", "columns": [{"name": n, "type": t} for n, t in COLUMNS]})
    made = replica = 0
    while made < total_rows:
        chunks, rows = [], 0
        while rows < slice_rows and made + rows < total_rows:
            blueprint = blueprints[replica % len(blueprints)]
            chunks.append(
                blueprint.rows_json.replace(TRACE_MARK, f"{replica:016x}")
                .replace(SPAN_MARK, f"{replica:06x}")
                .replace(CONVERSATION_MARK, f"c{replica}")
            )
            rows += blueprint.rows
            replica += 1
        made += rows
        yield ('{"tables":[' + head[:-1] + ',"rows":[' + ",".join(chunks) + "]}]}").encode(), rows


class _Body(io.BytesIO):
    enforce_content_length = False  # urllib3's attribute, which azure-core sets on every response


class MemoryAdapter(requests.adapters.BaseAdapter):
    """Answers every request with ``body``: the client does all its work except the network."""

    def __init__(self) -> None:
        super().__init__()
        self.body = b""

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        response = requests.Response()
        response.status_code = 200
        response.headers["Content-Type"] = "application/json; charset=utf-8"
        response.raw = _Body(self.body)
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass


class _Credential:
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("bench", 2**31)


def memory_client(path: str) -> tuple[LogsQueryClient, MemoryAdapter]:
    """A client whose transport answers from memory, configured as the source (or a stock client) has it."""
    adapter = MemoryAdapter()
    session = requests.Session()
    session.mount("https://", adapter)
    options: dict[str, Any] = {}
    if path == "source":
        from monitor.sources.app_insights import READ_BLOCK_BYTES

        options["connection_data_block_size"] = READ_BLOCK_BYTES
    client = LogsQueryClient(_Credential(), endpoint="https://bench.invalid",  # type: ignore[arg-type]
                             transport=RequestsTransport(session=session, **options))
    return client, adapter


def query(client: LogsQueryClient, path: str) -> Any:
    """The result table, fetched as ``AppInsightsSource._query`` does, or as a stock client call does."""
    if path == "client":
        return client.query_workspace("bench", "bench", timespan=None).tables[0]
    from monitor.sources.app_insights import QueryCapture

    capture = QueryCapture()
    result = client.query_workspace("bench", "bench", timespan=None, **capture.options())
    table = capture.primary(result.tables)
    assert table is not None
    return table


def rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(workload: str, total_rows: int, slice_rows: int, path: str = "source") -> dict[str, Any]:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    blueprints = templates(workload)
    reader = RowReader(WORKSPACE)
    client, adapter = memory_client(path)
    window = Window(T0 - timedelta(days=1), T0 + timedelta(days=1))
    baseline = rss_mib()
    timings = {"parse": 0.0, "read": 0.0, "assemble": 0.0}
    rows = spans = conversations = wire_bytes = 0
    for body, _ in slices(blueprints, total_rows, slice_rows):
        wire_bytes += len(body)
        adapter.body = body
        started = time.process_time()
        table = query(client, path)
        parsed = time.process_time()
        read = reader.read(table, window)
        converted = time.process_time()
        assembly = assemble(read.spans)
        finished = time.process_time()
        timings["parse"] += parsed - started
        timings["read"] += converted - parsed
        timings["assemble"] += finished - converted
        rows += read.rows
        spans += len(read.spans)
        conversations += len(assembly.conversations)
        del body, table, read, assembly
        adapter.body = b""
    total = sum(timings.values())
    return {
        "workload": workload,
        "path": path,
        "rows": rows,
        "spans": spans,
        "conversations": conversations,
        "slice_rows": slice_rows,
        "wire_mib": round(wire_bytes / 2**20),
        "seconds": round(total, 2),
        "spans_per_second": round(spans / total),
        "source_spans_per_second": round(spans / (timings["parse"] + timings["read"])),
        "reader_spans_per_second": round(spans / timings["read"]),
        "assemble_spans_per_second": round(spans / timings["assemble"]),
        "conversations_per_second": round(conversations / total),
        "baseline_rss_mib": round(baseline),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


REPORT_RUNS = (
    ("compact", 100_000, 20_000, ("before", "client", "source")),
    ("compact", 1_000_000, 20_000, ("source",)),
    ("tau", 20_000, 4_000, ("before", "client", "source")),
    ("tau", 100_000, 4_000, ("source",)),
)
"""Workload, rows, rows per slice, and which code runs it: ``before`` is the --before checkout with the stock
client path; ``client`` and ``source`` are this checkout with either path."""


def report(before: Path | None, workloads: tuple[str, ...] = ("compact", "tau"),
           max_spans: int | None = None) -> int:
    print(
        "| workload | code | path | spans | slice rows | wire MiB | spans/s (rows → conversations) "
        "| source stage spans/s | of which RowReader spans/s | assembly spans/s | conversations/s "
        "| RSS before slices MiB | peak RSS MiB |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload, total, per_slice, variants in REPORT_RUNS:
        if workload not in workloads or (max_spans is not None and total > max_spans):
            continue
        for variant in variants:
            if variant == "before" and before is None:
                continue
            code = "before" if variant == "before" else "after"
            path = "client" if variant == "before" else variant
            tree = [TREE_OPTION, str(before)] if variant == "before" else []
            # A fresh process per run: ru_maxrss is a process-lifetime peak.
            out = subprocess.run(
                [sys.executable, __file__, "--workload", workload, "--spans", str(total),
                 "--slice-rows", str(per_slice), "--path", path, "--json", *tree],
                check=True, capture_output=True, text=True,
            )
            r = json.loads(out.stdout)
            print(
                f"| {r['workload']} | {code} | {r['path']} | {r['spans']:,} | {r['slice_rows']:,} | "
                f"{r['wire_mib']:,} | {r['spans_per_second']:,} | {r['source_spans_per_second']:,} | "
                f"{r['reader_spans_per_second']:,} | {r['assemble_spans_per_second']:,} | "
                f"{r['conversations_per_second']:,} | {r['baseline_rss_mib']} | {r['peak_rss_mib']} |",
                flush=True,
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="App Insights rows → conversations benchmark")
    parser.add_argument("--workload", choices=["compact", "tau"], default="compact")
    parser.add_argument("--spans", type=int, default=100_000, help="rows to process in total")
    parser.add_argument("--slice-rows", type=int, default=20_000, help="rows per query result")
    parser.add_argument("--path", choices=["source", "client"], default="source",
                        help="query as AppInsightsSource does, or as a stock client call does")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--report", action="store_true", help="run the BENCHMARKS.md table")
    parser.add_argument("--before", type=Path, help="with --report: a checkout to compare with (stock path)")
    parser.add_argument("--report-workloads", nargs="+", choices=["compact", "tau"], default=["compact", "tau"],
                        help="with --report: only the rows of these workloads")
    parser.add_argument("--max-spans", type=int, help="with --report: only the rows of at most this many spans")
    parser.add_argument(TREE_OPTION, type=Path, help="run the code of this checkout instead of this one")
    args = parser.parse_args(argv)
    if args.report:
        return report(args.before, tuple(args.report_workloads), args.max_spans)
    result = run(args.workload, args.spans, args.slice_rows, args.path)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
