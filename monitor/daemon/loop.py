"""The daemon: the HTTP endpoints up, then a cycle every ``interval_seconds`` until SIGTERM or SIGINT."""

from __future__ import annotations

import errno
import gc
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from monitor.app import Monitor, build_monitor
from monitor.daemon import shutdown
from monitor.daemon.http import MonitorHTTPServer, listen_error
from monitor.errors import ConfigError
from monitor.metrics.exposition import Exposition, Prepared
from monitor.models import utc_now
from monitor.settings import OtlpReceiverSourceSettings, Settings

if TYPE_CHECKING:
    from monitor.review.web import ReviewServer

log = logging.getLogger("monitor.daemon")  # the name the start-up and stop lines carry

SHUTDOWN_MARGIN_SECONDS = 5.0
"""Beyond ``shutdown_grace_seconds``: time to record what finished and close the store."""


def exposition(monitor: Monitor) -> Exposition:
    """``/metrics``: the registry, with the quality families and the regression detector's as prepared per cycle."""
    prepared: list[Prepared] = [monitor.metrics.quality]
    if monitor.alerts is not None:
        prepared.append(monitor.alerts.metrics)
    if monitor.slos is not None:
        prepared.append(monitor.slos.metrics)
    return Exposition(monitor.registry, *prepared)


def readiness_problem(monitor: Monitor) -> str | None:
    """Why this replica cannot do its work now (``/readyz``): the store does not answer, or the source's last read
    failed."""
    try:
        monitor.store.ping()
    except Exception as exc:
        return f"store: {exc}"
    if monitor.receiver is not None and (listener := monitor.receiver.problem()):
        return f"source {monitor.receiver.name}: {listener}"
    source = monitor.pipeline.source_problem
    return None if source is None else f"source {monitor.pipeline.source.name}: {source}"


def receiver_listen_error(settings: OtlpReceiverSourceSettings, exc: OSError) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError("settings", "source.port", f"{settings.host}:{settings.port} is already in use")
    return ConfigError("settings", "source.host", f"cannot listen on {settings.host}:{settings.port}: "
                                                   f"{exc.strerror or exc}")


GC_YOUNG_ALLOCATIONS = 20_000
"""Allocations between two young collections of the cyclic garbage collector (CPython's default: 700)."""


def tune_garbage_collector() -> None:
    """Keep the cyclic garbage collector off the hot paths of a process that runs for weeks. What start-up built
    (modules, the store's schema and statements, the models' validators: objects that live as long as the process)
    is frozen out of every later collection, and young collections run every ``GC_YOUNG_ALLOCATIONS`` allocations:
    the OTLP receiver allocates a few objects per span and holds a request's spans until their commit, so with
    the defaults about a tenth of its CPU went to collections that freed nothing (``benchmarks/bench_receiver.py``).
    Objects in reference cycles are still collected, a little later."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_ALLOCATIONS, 10, 10)


def run_daemon(settings: Settings, once: bool = False, results_command: str = "rubric-monitor results") -> int:
    """Run until SIGTERM/SIGINT (exit 0), or one cycle with ``once`` (exit 1 if the cycle failed).

    A signal at any point exits 0: during start-up before the first cycle; later the cycle in flight starts no
    new evaluation, and judge calls still in flight after ``shutdown_grace_seconds`` are abandoned (their
    evaluations stay pending); a second signal exits at once (``shutdown``). ``results_command`` is how the user
    who started the daemon lists its results, told after the first verdict."""

    shutdown.install()
    monitor = build_monitor(settings)
    monitor.pipeline.stop = shutdown.STOP
    if shutdown.STOP.is_set():
        log.info("stop requested during start-up: exiting before the first cycle")
        monitor.close()
        return 0
    tune_garbage_collector()
    try:
        server = MonitorHTTPServer(settings.metrics.host, settings.metrics.port,
                                   exposition(monitor), monitor.health,
                                   lambda: readiness_problem(monitor),
                                   on_drop=dropped_counter(monitor, "metrics"))
    except OSError as exc:
        monitor.close()
        raise listen_error(settings.metrics, exc) from None
    server.start()
    host, port = server.address
    log.info("metrics on http://%s:%d/metrics", host, port)
    if monitor.receiver is not None:
        try:
            receiver_host, receiver_port = monitor.receiver.start()
        except OSError as exc:
            server.close()
            monitor.close()
            raise receiver_listen_error(monitor.receiver.settings, exc) from None
        log.info("OTLP/HTTP receiver on http://%s:%d (POST /v1/traces, /v1/logs)", receiver_host, receiver_port)
    review_server = None
    monitor.next_steps = (f"next: the metrics are at http://{host}:{port}/metrics; list the verdicts with "
                          f"`{results_command}`, one in full with `{results_command} show CONVERSATION`")
    try:
        review_server = start_review(monitor)
        if once:
            return 0 if monitor.run_cycle().ok else 1
        return _serve(monitor, settings.interval_seconds, settings.shutdown_grace_seconds)
    finally:
        if review_server is not None:
            review_server.close()
        server.close()
        monitor.close()


def dropped_counter(monitor: Monitor, server: str) -> Callable[[str], None]:
    """Counts the connections ``server``'s listener drops (``rubric_monitor_http_connections_dropped_total``)."""
    return lambda reason: monitor.metrics.http_connections_dropped.labels(server, reason).inc()


def start_review(monitor: Monitor) -> ReviewServer | None:
    """The review page on its own listener (``review.enabled``)."""
    if monitor.review is None:
        return None
    from monitor.review.web import Auth, ReviewApp, ReviewServer

    review = monitor.settings.review
    app = ReviewApp(monitor.review.store, review,
                    Auth(monitor.review_token, review.trusted_proxy_header, review.trusted_proxy_addresses),
                    on_label=monitor.review.refresh)
    try:
        server = ReviewServer(app, on_drop=dropped_counter(monitor, "review"))
    except OSError as exc:
        raise ConfigError("settings", "review.port", f"cannot listen on {review.host}:{review.port}: "
                                                      f"{exc.strerror or exc}") from None
    server.start()
    log.info("review page on %s/queue", server.url)
    return server


def _serve(monitor: Monitor, interval: float, grace: float) -> int:
    from apscheduler.schedulers.background import BackgroundScheduler

    stopping = monitor.pipeline.stop
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        monitor.run_cycles, "interval", seconds=interval, id="cycle", next_run_time=utc_now(),
        max_instances=1, coalesce=True, misfire_grace_time=max(1, int(interval)),
    )
    scheduler.start()
    while not stopping.wait(1.0):
        pass
    log.info("stop requested: finishing the evaluations in flight (at most %gs), then exiting; send the signal "
             "again (Ctrl-C) to exit at once", grace)
    # The cycle in flight starts no new evaluation and abandons its judge calls after the grace period; a
    # source query cannot be cancelled that way, so past the grace period (and a margin to record what
    # finished) the process exits without it.
    finisher = threading.Thread(target=scheduler.shutdown, kwargs={"wait": True}, name="shutdown", daemon=True)
    finisher.start()
    finisher.join(grace + SHUTDOWN_MARGIN_SECONDS)
    if finisher.is_alive():
        log.warning("the cycle in flight did not end within %gs of the stop request; exiting without it (its "
                    "work is read or judged again on the next start)", grace + SHUTDOWN_MARGIN_SECONDS)
        logging.shutdown()
        os._exit(0)
    return 0
