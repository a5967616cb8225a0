"""Benchmark of the OTLP/HTTP receiver: spans per second per core accepted and committed (OTLP protobuf, batches of
512 spans as the SDK's batch processor sends them) on SQLite and PostgreSQL, p99 request latency, memory under a
sustained 2x overload, and acknowledged spans lost across kill -9s.

The receiver runs in a process of its own (``serve``: the store and the listener, no scoring cycle), so its CPU
time is read from /proc apart from the load generator's; "per core" is spans committed per CPU-second of that
process (the database server's CPU is reported apart for PostgreSQL). Every request goes to 127.0.0.1.

    python benchmarks/bench_receiver.py throughput --store sqlite [--requests 200] [--clients 4]
    python benchmarks/bench_receiver.py throughput --store postgresql+psycopg://...  # a URL: PostgreSQL
    python benchmarks/bench_receiver.py overload --store URL [--seconds 30]
    python benchmarks/bench_receiver.py kills --store URL [--kills 50]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BATCH = 512
TOKEN = "bench-token"
TICKS = os.sysconf("SC_CLK_TCK")


# ---- the receiver under test ---------------------------------------------------------------------------------


def serve(url: str, port: int, max_pending: int) -> None:
    """Run the receiver alone until killed: the store, the committer and the listener."""
    from prometheus_client import CollectorRegistry

    from monitor.daemon.loop import tune_garbage_collector
    from monitor.metrics import MonitorMetrics
    from monitor.settings import OtlpReceiverSourceSettings
    from monitor.sources.otlp_receiver import OtlpReceiverSource
    from monitor.store import SqlStore

    token = Path(tempfile.mkdtemp()) / "token"
    token.write_text(TOKEN)
    store = SqlStore(url)
    receiver = OtlpReceiverSource(OtlpReceiverSourceSettings(port=port, token_file=token,
                                                             max_pending_spans=max_pending),
                                  MonitorMetrics(CollectorRegistry()))
    receiver.attach(store, "ignore")
    tune_garbage_collector()  # as the daemon does once built
    receiver.start()
    print("ready", flush=True)
    threading.Event().wait()


class Server:
    def __init__(self, url: str, max_pending: int = 50_000, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "serve", "--store", url, "--port", str(self.port),
             "--max-pending", str(max_pending)], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "ready", f"the receiver did not start: {line!r}"

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def postgres_cpu_seconds(url: str) -> float | None:
    """CPU of the PostgreSQL server the URL names when it runs on this machine: its postmaster (found by the
    ``-p PORT`` of its command line) and the backends it forked."""
    if not url.startswith("postgresql"):
        return None
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    parents: dict[int, int] = {}
    master = None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if command and command[0].endswith(b"postgres") and b"-p" in command \
                and command[command.index(b"-p") + 1:command.index(b"-p") + 2] == [port.encode()]:
            master = int(entry.name)
    if master is None:
        return None
    total = 0.0
    for pid in [master, *(pid for pid, parent in parents.items() if parent == master)]:
        try:
            total += cpu_seconds(pid)
        except (OSError, ValueError, IndexError):
            continue
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- load ------------------------------------------------------------------------------------------------------


LOADS = ("named", "sessions")
"""``named``: every span names its conversation and carries one output message (the load the goal was set
on).
``sessions``: as openai-v2 sends by default, no conversation id; a trace is one turn of a session (an agent span,
3 model calls whose input is the whole history so far, tool spans), each turn extending the one before, so the
store joins the traces by transcript."""


def make_requests(count: int, batch: int = BATCH, seed: int = 1,
                  load: str = "named") -> list[tuple[bytes, set[tuple[str, str]]]]:
    """``count`` ExportTraceServiceRequest bodies of ``batch`` GenAI spans each, 8 spans a trace (``LOADS``)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def text(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    def message(role: str, content: str) -> dict[str, Any]:
        return {"role": role, "parts": [{"type": "text", "content": content}]}

    chooser = random.Random(seed)
    now = time.time_ns()
    requests = []
    history: list[dict[str, Any]] = []
    traces = 0
    for _ in range(count):
        spans = []
        ids: set[tuple[str, str]] = set()
        for index in range(batch):
            if index % 8 == 0:
                trace_id = chooser.randbytes(16)
                conversation = trace_id.hex()[:12]
                turn = traces % 5  # sessions of 5 turns, one trace a turn; some span two requests
                traces += 1
                if turn == 0:
                    history = [message("system", "You book tables at restaurants. " * 4)]
                history.append(message("user", f"Turn {turn}: a table for {chooser.randint(2, 8)} tonight, please."))
            span_id = chooser.randbytes(8)
            ids.add((trace_id.hex(), span_id.hex()))
            if load == "named":
                reply = json.dumps([message("assistant", "x" * 300)])
                attributes = [text("gen_ai.operation.name", "chat"), text("gen_ai.conversation.id", conversation),
                              text("gen_ai.request.model", "gpt-4o"),
                              KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=120)),
                              text("gen_ai.output.messages", reply)]
                name = "chat gpt-4o"
            elif index % 8 in (1, 4, 7):
                answer = message("assistant", f"Checked {chooser.random():.6f}: " + "y" * 120)
                attributes = [text("gen_ai.operation.name", "chat"), text("gen_ai.request.model", "gpt-4o"),
                              KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=120)),
                              text("gen_ai.input.messages", json.dumps(history)),
                              text("gen_ai.output.messages", json.dumps([answer]))]
                history.append(answer)
                name = "chat gpt-4o"
            else:
                attributes = [text("gen_ai.operation.name", "execute_tool" if index % 8 else "invoke_agent"),
                              text("gen_ai.agent.name", "table-booker"), text("gen_ai.tool.name", "find_table")]
                name = "execute_tool find_table" if index % 8 else "invoke_agent table-booker"
            now += 1_000_000  # a span a millisecond: the turns of a session in order
            spans.append(Span(trace_id=trace_id, span_id=span_id, name=name, kind=Span.SPAN_KIND_CLIENT,
                              start_time_unix_nano=now, end_time_unix_nano=now + 900_000, attributes=attributes))
        request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
            resource={"attributes": [text("service.name", "bench")]}, scope_spans=[ScopeSpans(spans=spans)])])
        requests.append((request.SerializeToString(), ids))
    return requests


class Client:
    """One keep-alive connection posting protobuf bodies."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def post(self, body: bytes) -> int:
        for _ in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request("POST", "/v1/traces", body=body, headers={
                    "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"})
                response = self.conn.getresponse()
                response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.close()
                return response.status
            except (OSError, http.client.HTTPException):
                self.close()
        return 0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def throughput(url: str, requests: int, clients: int, load: str = "named") -> dict[str, Any]:
    bodies = make_requests(requests, load=load)
    server = Server(url)
    try:
        cpu_before, pg_before = server.cpu_seconds(), postgres_cpu_seconds(url)
        latencies: list[float] = []
        statuses: Counter[int] = Counter()
        lock = threading.Lock()
        work = list(range(len(bodies)))

        def run() -> None:
            client = Client(server.port)
            while True:
                with lock:
                    if not work:
                        break
                    index = work.pop()
                while True:
                    started = time.perf_counter()
                    status = client.post(bodies[index][0])
                    with lock:
                        statuses[status] += 1
                        if status == 200:
                            latencies.append(time.perf_counter() - started)
                    if status == 200:
                        break
                    time.sleep(0.2)
            client.close()

        started = time.perf_counter()
        threads = [threading.Thread(target=run) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        cpu = server.cpu_seconds() - cpu_before
        pg_after = postgres_cpu_seconds(url)
        spans = requests * BATCH
        return {
            "store": url.split(":", 1)[0], "load": load, "requests": requests, "clients": clients, "spans": spans,
            "wall_s": round(wall, 2), "receiver_cpu_s": round(cpu, 2),
            "spans_per_s_wall": round(spans / wall), "spans_per_receiver_cpu_s": round(spans / cpu),
            "postgres_cpu_s": None if pg_before is None or pg_after is None else round(pg_after - pg_before, 2),
            "p50_ms": round(1000 * statistics.median(latencies), 1),
            "p99_ms": round(1000 * percentile(latencies, 0.99), 1), "statuses": dict(statuses),
        }
    finally:
        server.kill()


def overload(url: str, seconds: float, capacity: float, clients: int) -> dict[str, Any]:
    """Open loop at twice ``capacity`` spans/s for ``seconds``: what is answered, and the receiver's memory."""
    rate = 2 * capacity / BATCH  # requests per second
    bodies = make_requests(64, seed=7)
    server = Server(url)
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    rss: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    tickets = threading.Semaphore(0)

    def send() -> None:
        client = Client(server.port)
        sent = 0
        while not stop.is_set():
            if not tickets.acquire(timeout=0.2):
                continue
            started = time.perf_counter()
            status = client.post(bodies[sent % len(bodies)][0])
            sent += 1
            with lock:
                statuses[status] += 1
                if status == 200:
                    latencies.append(time.perf_counter() - started)
        client.close()

    threads = [threading.Thread(target=send) for _ in range(clients)]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    issued = 0
    try:
        while (elapsed := time.perf_counter() - started) < seconds:
            due = int(elapsed * rate)
            for _ in range(due - issued):
                tickets.release()
            issued = due
            rss.append(server.rss_mib())
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        server.kill()
    answered = sum(statuses.values())
    quarter = max(1, len(rss) // 4)
    return {
        "store": url.split(":", 1)[0], "offered_spans_per_s": round(2 * capacity), "seconds": seconds,
        "statuses": dict(statuses), "accepted_spans_per_s": round(statuses[200] * BATCH / seconds),
        "refused_share": round(1 - statuses[200] / answered, 3) if answered else None,
        "p99_ms_of_200": round(1000 * percentile(latencies, 0.99), 1),
        "rss_mib_first_quarter_max": round(max(rss[:quarter]), 1),
        "rss_mib_last_quarter_max": round(max(rss[-quarter:]), 1),
        "rss_mib_max": round(max(rss), 1),
        "requests_offered": issued, "requests_never_sent": issued - answered,
        "note": "status 0: the connection was refused or reset (past max_connections)",
    }


def kills(url: str, count: int, seed: int = 50) -> dict[str, Any]:
    """Batches sent while the receiver is killed with SIGKILL at random points and restarted ``count`` times;
    every acknowledged span must be stored, each once."""
    import sqlalchemy

    chooser = random.Random(seed)
    bodies = make_requests(max(4 * count, 100), batch=64, seed=seed)
    acknowledged: set[int] = set()
    answered_again = 0
    server = Server(url)
    port = server.port
    stop = threading.Event()

    def send() -> None:
        nonlocal answered_again
        client = Client(port)
        while not stop.is_set() and len(acknowledged) < len(bodies):
            index = next(i for i in range(len(bodies)) if i not in acknowledged)
            if client.post(bodies[index][0]) == 200:
                acknowledged.add(index)
                if chooser.random() < 0.2:  # an answer lost: the client sends an acknowledged batch again
                    client.post(bodies[chooser.choice(sorted(acknowledged))][0])
                    answered_again += 1
            else:
                time.sleep(0.01)

    sender = threading.Thread(target=send)
    lost_at_a_kill = 0
    engine = sqlalchemy.create_engine(url)

    def stored() -> list[tuple[str, str]]:
        with engine.connect() as conn:
            return [(str(r[0]), str(r[1])) for r in conn.exec_driver_sql("select trace_id, span_id from spans")]

    try:
        sender.start()
        for _ in range(count):
            target = len(acknowledged) + chooser.randint(1, 3)
            while len(acknowledged) < target and sender.is_alive():
                time.sleep(0.002)
            time.sleep(chooser.uniform(0, 0.03))
            server.kill()
            held = set(stored())
            wanted = set().union(*(bodies[i][1] for i in set(acknowledged)))
            lost_at_a_kill += len(wanted - held)
            server = Server(url, port=port)  # the same port: the client reconnects as it would to a Service
        while len(acknowledged) < len(bodies) and sender.is_alive():
            time.sleep(0.05)
    finally:
        stop.set()
        sender.join(60)
        server.kill()
    final = stored()
    engine.dispose()
    everything = set().union(*(ids for _, ids in bodies))
    return {"store": url.split(":", 1)[0], "kills": count, "batches": len(bodies),
            "acknowledged_spans_lost": lost_at_a_kill + len(everything - set(final)),
            "duplicates": len(final) - len(set(final)), "acknowledged_batches_sent_again": answered_again,
            "spans_stored": len(final), "spans_sent": len(everything)}


def store_url(given: str) -> str:
    if given == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    if given.startswith("postgresql"):
        import sqlalchemy

        engine = sqlalchemy.create_engine(given)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        engine.dispose()
    return given


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["throughput", "overload", "kills", "serve"])
    parser.add_argument("--store", default="sqlite", help="sqlite (a new file), or a SQLAlchemy URL (emptied)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--load", choices=LOADS, default="named", help="named (the goal's) or sessions (LOADS)")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--capacity", type=float, default=0, help="spans/s to double (default: measured)")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-pending", type=int, default=50_000)
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.store, args.port, args.max_pending)
        return
    url = store_url(args.store)
    if args.mode == "throughput":
        result = throughput(url, args.requests, args.clients, args.load)
    elif args.mode == "overload":
        capacity = args.capacity or throughput(url, 60, args.clients)["spans_per_s_wall"]
        result = overload(store_url(args.store), args.seconds, capacity, 4 * args.clients)
    else:
        result = kills(url, args.kills)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
