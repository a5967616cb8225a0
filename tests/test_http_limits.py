"""The HTTP endpoints cannot be held or exhausted: slow-loris clients (half-sent requests) cost a socket and a
bounded buffer each, never a thread, are dropped when too many or too slow, and never stand in a scrape's way.
The three servers (``/metrics`` and the probes, the OTLP/HTTP receiver, the review page) are one
``BoundedHTTPServer`` each, and each is put through the same slow-loris test.

Every wait here is on a count or an event (bounded by a generous deadline that only fails a hung test)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon.http import BoundedHTTPServer, HealthState, HTTPLimits, MonitorHTTPServer
from monitor.metrics import MonitorMetrics
from monitor.metrics.exposition import Exposition

HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
"""A request stopped in its headers."""
HALF_BODY = b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"resourceSpans"
"""A request whose headers arrived and whose body stopped after a few bytes."""
LORIS = 200
TOKEN = "slow-loris-token-0123456789"


def wait_for(condition: Callable[[], bool], what: str, deadline_seconds: float = 60.0) -> None:
    """Wait until ``condition`` holds; the deadline only keeps a broken server from hanging the suite."""
    deadline = time.monotonic() + deadline_seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@contextmanager
def metrics_server(limits: HTTPLimits) -> Iterator[MonitorHTTPServer]:
    registry = CollectorRegistry()
    server = MonitorHTTPServer("127.0.0.1", 0, Exposition(registry, MonitorMetrics(registry).quality),
                               HealthState(interval=timedelta(seconds=60)), lambda: None, limits=limits)
    server.start()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def slow_clients(address: tuple[str, int], count: int, halves: tuple[bytes, ...] = (HALF_SENT,)
                 ) -> Iterator[list[socket.socket]]:
    """``count`` connections, each sending one of ``halves`` (in turn) and then nothing."""
    clients = []
    try:
        for number in range(count):
            client = socket.create_connection(address, timeout=30)
            client.sendall(halves[number % len(halves)])
            clients.append(client)
        yield clients
    finally:
        for client in clients:
            client.close()


def read_until_closed(client: socket.socket) -> bytes:
    answer = b""
    while chunk := client.recv(4096):
        answer += chunk
    return answer


def scrape(address: tuple[str, int], path: str = "/metrics") -> tuple[int, bytes]:
    host, port = address
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=30) as response:
        return response.status, response.read()


@dataclass
class Endpoint:
    """A server under test: its ``BoundedHTTPServer`` and a normal request, returning what a user gets."""

    http: BoundedHTTPServer
    normal_request: Callable[[], tuple[int, bytes]]
    expected: Callable[[int, bytes], bool]


def request(address: tuple[str, int], method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    host, port = address
    sent = urllib.request.Request(f"http://{host}:{port}{path}", data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(sent, timeout=30) as response:
        return response.status, response.read()


@contextmanager
def metrics_endpoint(tmp_path: Path) -> Iterator[Endpoint]:
    with metrics_server(HTTPLimits(header_timeout_seconds=600)) as server:
        yield Endpoint(server.http, lambda: scrape(server.address),
                       lambda status, body: status == 200 and b"rubric_monitor" in body)


@contextmanager
def receiver_endpoint(tmp_path: Path) -> Iterator[Endpoint]:
    import json

    from monitor.formats.otlp import spans_to_otlp_document
    from monitor.models import SpanRecord
    from monitor.settings import OtlpReceiverSourceSettings
    from monitor.sources.otlp_receiver import OtlpReceiverSource
    from monitor.store import SqlStore

    (tmp_path / "token").write_text(TOKEN)
    store = SqlStore(f"sqlite:///{tmp_path / 'receiver.db'}")
    receiver = OtlpReceiverSource(OtlpReceiverSourceSettings(port=0, token_file=tmp_path / "token",
                                                             read_timeout_seconds=600),
                                  MonitorMetrics(CollectorRegistry()))
    receiver.attach(store, "ignore")
    receiver.start()
    span = SpanRecord(trace_id="1" * 32, span_id="2" * 16, name="chat", start_time=datetime(2026, 5, 1, tzinfo=UTC),
                      attributes={"gen_ai.operation.name": "chat"})
    body = json.dumps(spans_to_otlp_document([span])).encode()
    try:
        assert receiver._server is not None
        yield Endpoint(receiver._server,
                       lambda: request(receiver.address, "POST", "/v1/traces", body, {
                           "Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}),
                       lambda status, answer: status == 200 and answer == b"{}" and len(store.spans_of("1" * 32)) == 1)
    finally:
        receiver.close()
        store.close()


@contextmanager
def review_endpoint(tmp_path: Path) -> Iterator[Endpoint]:
    from monitor.review.store import ReviewStore
    from monitor.review.web import Auth, ReviewApp, ReviewServer
    from monitor.settings import ReviewSettings
    from monitor.store import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path / 'review.db'}")
    settings = ReviewSettings(enabled=True, port=0, request_timeout_seconds=600)
    server = ReviewServer(ReviewApp(ReviewStore(store), settings, Auth(TOKEN, None, ())))
    server.start()
    try:
        yield Endpoint(server.http,
                       lambda: request(server.address, "GET", "/queue", None, {"Authorization": f"Bearer {TOKEN}"}),
                       lambda status, page: status == 200 and b"Review queue" in page)
    finally:
        server.close()
        store.close()


ENDPOINTS = {"metrics": metrics_endpoint, "receiver": receiver_endpoint, "review": review_endpoint}


@pytest.mark.parametrize("name", sorted(ENDPOINTS))
def test_slow_loris_clients_take_no_thread_bounded_memory_and_do_not_delay_a_request(name: str,
                                                                                      tmp_path: Path) -> None:
    with ENDPOINTS[name](tmp_path) as endpoint:
        server = endpoint.http
        threads_started = threading.active_count()
        held = min(LORIS, server.limits.max_pending)
        with slow_clients(server.address, LORIS, (HALF_SENT, HALF_BODY)):
            wait_for(lambda: server.pending + server.dropped["too_many_pending"] == LORIS,
                     f"{LORIS} half-sent requests held or dropped")
            assert server.pending == held
            # One thread reads every connection: the half-sent requests have no thread of their own.
            assert threading.active_count() <= threads_started
            assert server.buffered_bytes <= held * max(len(HALF_SENT), len(HALF_BODY))
            status, body = endpoint.normal_request()  # answered while they are held
            assert endpoint.expected(status, body), (status, body[:300])
            assert threading.active_count() <= threads_started + server.limits.workers
            # Still held (but the oldest, when the normal request needed its place).
            assert server.pending >= held - 1


def test_too_many_half_sent_requests_drop_the_oldest_and_a_scrape_still_gets_in() -> None:
    limits = HTTPLimits(max_pending=40, header_timeout_seconds=600)
    with metrics_server(limits) as server, slow_clients(server.address, 100) as clients:
        wait_for(lambda: server.http.dropped["too_many_pending"] == 60, "the 60 oldest dropped")
        assert server.http.pending == 40
        # The oldest were answered 503 and closed: their reads end.
        assert read_until_closed(clients[0]).startswith(b"HTTP/1.0 503 ")
        status, _ = scrape(server.address)
        assert status == 200


def test_a_request_that_never_ends_its_headers_is_closed_after_the_read_timeout() -> None:
    with metrics_server(HTTPLimits(header_timeout_seconds=0.2)) as server, \
            slow_clients(server.address, 3) as clients:
        for client in clients:
            assert client.recv(100).startswith(b"HTTP/1.0 408")  # closed by the server, saying why
            assert client.recv(100) == b""
        wait_for(lambda: server.http.dropped["read_timeout"] == 3, "three timed out")
        assert server.http.pending == 0


def test_an_oversized_request_is_refused_with_413_and_its_buffer_freed() -> None:
    with metrics_server(HTTPLimits(max_request_bytes=4096)) as server, \
            socket.create_connection(server.address, timeout=30) as client:
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8192)
        assert client.recv(100).startswith(b"HTTP/1.0 413")
        wait_for(lambda: server.http.dropped["too_large"] == 1, "counted")
        assert server.http.buffered_bytes == 0


def test_the_bounded_server_is_generic_a_handler_is_all_another_endpoint_brings() -> None:
    from http.server import BaseHTTPRequestHandler

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = BoundedHTTPServer("127.0.0.1", 0, Echo, HTTPLimits(max_request_bytes=1 << 20), name="echo")
    server.start()
    try:
        host, port = server.address
        payload = b"x" * 200_000  # arrives in many reads: the body is read before the handler runs
        request = urllib.request.Request(f"http://{host}:{port}/v1/logs", data=payload, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.read() == payload
    finally:
        server.close()
