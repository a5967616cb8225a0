"""The HTTP endpoints cannot be held or exhausted: slow-loris clients (half-sent requests) cost a socket and a
bounded buffer each, never a thread, are dropped when too many or too slow, and never stand in a scrape's way.

Every wait here is on a count or an event (bounded by a generous deadline that only fails a hung test)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from prometheus_client import CollectorRegistry

from monitor.daemon.http import BoundedHTTPServer, HealthState, HTTPLimits, MonitorHTTPServer
from monitor.metrics import MonitorMetrics
from monitor.metrics.exposition import Exposition

HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
LORIS = 300


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
def slow_clients(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    clients = []
    try:
        for _ in range(count):
            client = socket.create_connection(address, timeout=30)
            client.sendall(HALF_SENT)
            clients.append(client)
        yield clients
    finally:
        for client in clients:
            client.close()


def scrape(address: tuple[str, int], path: str = "/metrics") -> tuple[int, bytes]:
    host, port = address
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=30) as response:
        return response.status, response.read()


def test_slow_loris_clients_grow_no_threads_and_do_not_delay_a_scrape() -> None:
    threads_before = threading.active_count()
    limits = HTTPLimits(max_pending=LORIS + 50, header_timeout_seconds=600)
    with metrics_server(limits) as server, slow_clients(server.address, LORIS):
        wait_for(lambda: server.http.pending == LORIS, f"{LORIS} half-sent requests held")
        # One thread reads every connection, a few workers answer: no thread per connection.
        assert threading.active_count() <= threads_before + 1 + limits.workers
        assert server.http.buffered_bytes <= LORIS * len(HALF_SENT)
        status, body = scrape(server.address)  # answered while all of them are held
        assert status == 200 and b"rubric_monitor" in body
        assert server.http.pending == LORIS
    assert threading.active_count() <= threads_before


def test_too_many_half_sent_requests_drop_the_oldest_and_a_scrape_still_gets_in() -> None:
    limits = HTTPLimits(max_pending=40, header_timeout_seconds=600)
    with metrics_server(limits) as server, slow_clients(server.address, 100) as clients:
        wait_for(lambda: server.http.dropped["too_many_pending"] == 60, "the 60 oldest dropped")
        assert server.http.pending == 40
        # The oldest were closed: their reads end.
        assert clients[0].recv(100) == b""
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
