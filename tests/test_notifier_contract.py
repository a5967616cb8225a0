"""One contract for every notifier (``monitor.alerts.notifiers.base.Notifier``): Alertmanager, Slack, Teams, the
signed webhook, and the in-memory one that tests and dry runs use in their place.

- it receives the event kinds it was configured for, and no others;
- one ``send`` is one delivery, and the receiver can read it;
- a receiver that fails says whether trying again may help: 5xx and 429 are retryable, other 4xx are not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from monitor.alerts.events import probe_event
from monitor.alerts.notifiers.alertmanager import AlertmanagerNotifier
from monitor.alerts.notifiers.base import DeliveryError, Notifier
from monitor.alerts.notifiers.memory import MemoryNotifier
from monitor.alerts.notifiers.slack import SlackNotifier
from monitor.alerts.notifiers.teams import TeamsNotifier
from monitor.alerts.notifiers.webhook import WebhookNotifier
from tests.fakes.receiver import Answer, Receiver

KINDS = ("firing", "resolved", "test")


@dataclass
class Subject:
    notifier: Notifier
    delivered: Callable[[], int]
    """Deliveries the receiving end has seen."""
    fail_with: Callable[[int], None]
    """Make the receiving end answer with this HTTP status from now on."""


def _http(build: Callable[[str], Notifier]) -> Callable[[], Iterator[Subject]]:
    def make() -> Iterator[Subject]:
        status = [200]
        with Receiver(lambda _: Answer(status=status[0])) as receiver:
            yield Subject(build(receiver.url), lambda: len(receiver.received),
                          lambda code: status.__setitem__(0, code))
    return make


def _memory() -> Iterator[Subject]:
    notifier = MemoryNotifier("memory", KINDS)

    def fail_with(status: int) -> None:
        notifier.fail = DeliveryError(f"HTTP {status}", status == 429 or status >= 500)

    yield Subject(notifier, lambda: len(notifier.events), fail_with)


IMPLEMENTATIONS: dict[str, Callable[[], Iterator[Subject]]] = {
    "alertmanager": _http(lambda url: AlertmanagerNotifier("am", url, 5.0, timedelta(minutes=10), KINDS)),
    "slack": _http(lambda url: SlackNotifier("slack", url + "/hook", 5.0, KINDS)),
    "teams": _http(lambda url: TeamsNotifier("teams", url + "/hook", 5.0, KINDS)),
    "webhook": _http(lambda url: WebhookNotifier("webhook", url + "/hook", "s3cret", 5.0, KINDS)),
    "memory": _memory,
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    yield from IMPLEMENTATIONS[request.param]()


def test_it_receives_the_kinds_it_was_configured_for_and_no_others(subject: Subject) -> None:
    assert all(subject.notifier.accepts(kind) for kind in KINDS)
    assert not subject.notifier.accepts("annotation")


def test_one_send_is_one_delivery(subject: Subject) -> None:
    subject.notifier.send(probe_event(datetime(2026, 12, 1, tzinfo=UTC), "http://monitor:9464/metrics"))
    assert subject.delivered() == 1


@pytest.mark.parametrize(("status", "retryable"), [(500, True), (503, True), (429, True), (400, False),
                                                   (404, False)])
def test_a_failing_receiver_says_whether_to_try_again(subject: Subject, status: int, retryable: bool) -> None:
    subject.fail_with(status)
    with pytest.raises(DeliveryError) as raised:
        subject.notifier.send(probe_event(datetime(2026, 12, 1, tzinfo=UTC), "http://monitor:9464/metrics"))
    assert raised.value.retryable is retryable
    assert "http://" not in str(raised.value)  # a webhook URL carries its credential
