"""One contract for every trace source (``monitor.sources.base.TraceSource``): OTLP files, Application Insights
(the real ``azure-monitor-query`` client against the fake Logs API) and the in-memory twin.

- a first pull delivers every span written, each as written (ids, name, times, attributes);
- a pull from the checkpoint of the last batch delivers what was added since, and nothing it did not read;
- ``read_through`` is None before a read completed and at most ``now`` after;
- ``close`` can be called twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from monitor.formats.otlp import spans_to_otlp_document
from monitor.models import SpanRecord
from monitor.sources import InMemorySource, TraceSource
from monitor.sources.app_insights import AppInsightsSource
from monitor.sources.otlp_file import OtlpFileSource
from tests.app_insights_helpers import (
    NOW,
    TOKEN,
    TOKEN_ENV,
    conversation,
    conversations,
    fresh_metrics,
    load,
    settings_for,
)
from tests.fakes.log_analytics import FakeLogAnalytics

FIRST = conversations(3, NOW - timedelta(minutes=50), timedelta(minutes=8), legacy_events=False)
LATER = [span for index in range(2)
         for span in conversation(100 + index, NOW + timedelta(minutes=1 + 5 * index), legacy_events=False)]
"""Spans of two more conversations, started after the first pull and added once it was done."""
LATER_NOW = NOW + timedelta(minutes=30)


@dataclass
class Subject:
    source: TraceSource
    add: Callable[[list[SpanRecord]], None]
    """Make spans available to the source, as an exporter would."""


def _memory(tmp_path: Path) -> Iterator[Subject]:
    source = InMemorySource(FIRST, batch_size=4)
    yield Subject(source, source.add)


def _otlp_file(tmp_path: Path) -> Iterator[Subject]:
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(spans_to_otlp_document(FIRST)) + "\n", encoding="utf-8")

    def add(spans: list[SpanRecord]) -> None:
        with path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(spans_to_otlp_document(spans)) + "\n")

    yield Subject(OtlpFileSource(path, batch_spans=4), add)


def _app_insights(tmp_path: Path) -> Iterator[Subject]:
    with pytest.MonkeyPatch.context() as patch, FakeLogAnalytics() as fake:
        patch.setenv(TOKEN_ENV, TOKEN)
        written = list(FIRST)
        load(fake, written)

        def add(spans: list[SpanRecord]) -> None:
            written.extend(spans)
            load(fake, written)  # the tables as the workspace now holds them

        source = AppInsightsSource(settings_for(fake, ingestion_delay_seconds=0.0), fresh_metrics())
        yield Subject(source, add)


IMPLEMENTATIONS = {"memory": _memory, "otlp_file": _otlp_file, "app_insights": _app_insights}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    made = IMPLEMENTATIONS[request.param](tmp_path)
    subject = next(made)
    yield subject
    subject.source.close()
    next(made, None)


def _identity(span: SpanRecord) -> tuple[str, str, str]:
    return span.trace_id, span.span_id, span.name


def _pull(source: TraceSource, checkpoint: str | None, now: object) -> tuple[list[SpanRecord], str | None]:
    spans: list[SpanRecord] = []
    for batch in source.pull(checkpoint, now):  # type: ignore[arg-type]
        spans.extend(batch.spans)
        checkpoint = batch.checkpoint
    return spans, checkpoint


def test_a_first_pull_delivers_every_span_as_written(subject: Subject) -> None:
    assert subject.source.read_through() is None
    spans, _ = _pull(subject.source, None, NOW)
    assert {_identity(s) for s in spans} == {_identity(s) for s in FIRST}
    written = {_identity(s): s for s in FIRST}
    for span in spans:
        original = written[_identity(span)]
        assert (span.start_time, span.end_time, span.parent_span_id) == (
            original.start_time, original.end_time, original.parent_span_id)
        for key in ("gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id"):
            assert span.attributes.get(key) == original.attributes.get(key)
    through = subject.source.read_through()
    assert through is not None and through <= NOW


def test_a_pull_from_the_checkpoint_delivers_what_was_added_since(subject: Subject) -> None:
    _, checkpoint = _pull(subject.source, None, NOW)
    subject.add(LATER)
    spans, _ = _pull(subject.source, checkpoint, LATER_NOW)
    delivered = {_identity(s) for s in spans}
    assert {_identity(s) for s in LATER} <= delivered
    # A source may read an overlap again (late ingestion); the store keeps each span once. Never an unknown span.
    assert delivered <= {_identity(s) for s in FIRST + LATER}


def test_close_can_be_called_twice(subject: Subject) -> None:
    _pull(subject.source, None, NOW)
    subject.source.close()
    subject.source.close()
