"""Delivery of notifications: one worker thread per notifier, fed from the outbox in the store.

A cycle only writes outbox rows and hands their ids over; it never waits for a receiver. Each notifier has its own
queue and thread, so a receiver that is down, slow or throttling delays only its own notifications. Attempts are
retried with jittered exponential backoff (a 429's ``Retry-After`` honoured) up to the notifier's ``max_attempts``,
then counted as failed. A row is marked sent as soon as its receiver accepts it: after a restart, pending rows are
delivered and sent ones are not sent again.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import Counter

from monitor.alerts.notifiers.base import DeliveryError, Notifier
from monitor.alerts.store import AlertStore, OutboxItem
from monitor.models import utc_now

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 60.0

    def wait(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.backoff_max_seconds, retry_after)
        base: float = self.backoff_seconds * math.pow(2.0, attempt - 1)
        jitter: float = random.uniform(0.5, 1.0)
        return min(self.backoff_max_seconds, base * jitter)


class Dispatcher:
    def __init__(self, notifiers: Sequence[Notifier], policies: dict[str, RetryPolicy], store: AlertStore,
                 counter: Counter) -> None:
        self._notifiers = {n.name: n for n in notifiers}
        self._policies = policies
        self._store = store
        self._counter = counter
        self._queues: dict[str, queue.Queue[OutboxItem | None]] = {n: queue.Queue() for n in self._notifiers}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    @property
    def names(self) -> list[str]:
        return list(self._notifiers)

    def notifier(self, name: str) -> Notifier | None:
        return self._notifiers.get(name)

    def start(self, resume: bool = True) -> None:
        """Start the workers and (``resume``) hand them what was pending when the daemon last stopped."""
        for name, work in self._queues.items():
            thread = threading.Thread(target=self._work, args=(name, work), name=f"notify-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if resume:
            self._enqueue(self._store.outbox())

    def submit(self, outbox_ids: Sequence[int]) -> None:
        if outbox_ids:
            self._enqueue(self._store.outbox(outbox_ids))

    def _enqueue(self, items: Sequence[OutboxItem]) -> None:
        for item in items:
            work = self._queues.get(item.notifier)
            if work is None:
                # The notifier was removed from the settings since: nobody to deliver to.
                log.warning("notification %d is for notifier %r, which is no longer configured; dropped", item.id,
                            item.notifier)
                self._store.mark(item.id, "dropped", item.attempts)
                self._counter.labels(item.notifier, "dropped").inc()
                continue
            work.put(item)

    def wait_idle(self, timeout: float) -> bool:
        """True once every queue is empty and no delivery is in progress (tests, ``notify test``)."""
        done = threading.Event()

        def join_all() -> None:
            for work in self._queues.values():
                work.join()
            done.set()

        threading.Thread(target=join_all, daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers; deliveries still waiting stay pending in the store for the next start."""
        self._stop.set()
        for work in self._queues.values():
            work.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def _work(self, name: str, work: queue.Queue[OutboxItem | None]) -> None:
        while True:
            item = work.get()
            try:
                if item is None:
                    return
                if not self._stop.is_set():
                    self._deliver(item)
            except Exception:
                # A bug in one notifier must not kill its worker (nor any other).
                log.exception("notifier %r: delivering notification %d failed", name, item.id if item else -1)
            finally:
                work.task_done()

    def _deliver(self, item: OutboxItem) -> None:
        notifier = self._notifiers[item.notifier]
        policy = self._policies.get(item.notifier, RetryPolicy())
        attempts = item.attempts
        while True:
            attempts += 1
            try:
                notifier.send({**item.event, "sent_at": utc_now().isoformat()})
            except DeliveryError as exc:
                if not exc.retryable or attempts >= policy.max_attempts:
                    # The message names the notifier and the failure, never the URL (a secret).
                    log.warning("notifier %r: %s notification %d failed after %d attempt(s): %s", item.notifier,
                                item.event.get("kind"), item.id, attempts, exc)
                    self._store.mark(item.id, "failed", attempts)
                    self._counter.labels(item.notifier, "failed").inc()
                    return
                self._counter.labels(item.notifier, "retry").inc()
                self._store.mark(item.id, "pending", attempts)
                wait = policy.wait(attempts, exc.retry_after)
                log.info("notifier %r: %s; retrying notification %d in %.1fs", item.notifier, exc, item.id, wait)
                if self._stop.wait(wait):
                    return  # shutting down: it stays pending and is delivered after the restart
                continue
            self._store.mark(item.id, "sent", attempts)
            self._counter.labels(item.notifier, "sent").inc()
            return
