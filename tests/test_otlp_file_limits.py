"""OTLP files are read within bounds: a line longer than ``source.max_line_bytes`` is skipped (counted once, and
an unfinished one is not read again every cycle), and a span larger than ``source.max_span_bytes`` is rejected
before it reaches the store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.formats.otlp import spans_to_otlp_document
from monitor.metrics import MonitorMetrics
from monitor.models import SpanRecord
from monitor.settings import Settings
from monitor.sources import build_source
from monitor.sources.base import SourceBatch
from monitor.sources.otlp_file import OtlpFileSource

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def span(number: int, text: str = "") -> SpanRecord:
    return SpanRecord(trace_id="a" * 32, span_id=f"{number:016x}", name=f"chat {number}",
                      start_time=NOW + timedelta(seconds=number),
                      attributes={"gen_ai.operation.name": "chat", "note": text})


def line(*spans: SpanRecord) -> bytes:
    return (json.dumps(spans_to_otlp_document(list(spans))) + "\n").encode()


def pull(source: OtlpFileSource, checkpoint: str | None) -> tuple[list[SourceBatch], str | None]:
    batches = list(source.pull(checkpoint, NOW))
    return batches, (batches[-1].checkpoint if batches else checkpoint)


def numbers(batches: list[SourceBatch]) -> list[int]:
    return [int(s.span_id, 16) for b in batches for s in b.spans]


def rejected(batches: list[SourceBatch]) -> dict[str, int]:
    total: dict[str, int] = {}
    for batch in batches:
        for reason, count in batch.rejected.items():
            total[reason] = total.get(reason, 0) + count
    return total


def offsets(checkpoint: str | None) -> dict[str, int]:
    assert checkpoint is not None
    return {name: p["offset"] for name, p in json.loads(checkpoint)["files"].items()}


def test_a_huge_unfinished_line_is_skipped_once_and_not_read_again_every_cycle(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    huge = b'{"resourceSpans": [' + b" " * 200_000  # a writer stuck in the middle of a 200 KB line
    file.write_bytes(line(span(1)) + huge)
    source = OtlpFileSource(file, max_line_bytes=64 * 1024)

    first, checkpoint = pull(source, None)
    assert numbers(first) == [1]
    assert rejected(first) == {"line_too_long": 1}
    # Its bytes are behind the checkpoint: the next cycle does not read them again.
    assert offsets(checkpoint) == {"spans.jsonl": file.stat().st_size}

    second, checkpoint = pull(source, checkpoint)
    assert numbers(second) == [] and rejected(second) == {}

    with file.open("ab") as stream:  # the line ends at last, and a good one follows
        stream.write(b" " * 100_000 + b"]}\n" + line(span(2)))
    third, checkpoint = pull(source, checkpoint)
    assert numbers(third) == [2] and rejected(third) == {}
    assert offsets(checkpoint) == {"spans.jsonl": file.stat().st_size}


def test_a_long_complete_line_is_skipped_and_the_next_one_read(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    file.write_bytes(line(span(1, "x" * 100_000)) + line(span(2)))
    batches, _ = pull(OtlpFileSource(file, max_line_bytes=64 * 1024), None)
    assert numbers(batches) == [2] and rejected(batches) == {"line_too_long": 1}


def test_a_span_larger_than_the_cap_is_rejected_before_it_is_stored(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    file.write_bytes(line(span(1, "x" * 50_000), span(2, "small")))
    batches, _ = pull(OtlpFileSource(file, max_span_bytes=16 * 1024), None)
    assert numbers(batches) == [2] and rejected(batches) == {"span_too_large": 1}


def test_the_bounds_are_settings_passed_to_the_source(tmp_path: Path) -> None:
    settings = Settings.model_validate({"source": {"kind": "otlp_file", "path": str(tmp_path),
                                                   "max_line_bytes": 65536, "max_span_bytes": 32768}})
    source = build_source(settings.source, MonitorMetrics(CollectorRegistry()))
    assert isinstance(source, OtlpFileSource)
    assert (source.max_line_bytes, source.max_span_bytes) == (65536, 32768)
    with pytest.raises(ValueError, match="max_span_bytes"):
        Settings.model_validate({"source": {"kind": "otlp_file", "max_span_bytes": 10}})


def test_a_line_one_byte_too_long_with_its_newline_does_not_swallow_the_next(tmp_path: Path) -> None:
    file = tmp_path / "spans.jsonl"
    first = line(span(1, "a longer note than the next line has"))
    file.write_bytes(first + line(span(2)))
    batches, checkpoint = pull(OtlpFileSource(file, max_line_bytes=len(first) - 1), None)
    assert numbers(batches) == [2] and rejected(batches) == {"line_too_long": 1}
    assert offsets(checkpoint) == {"spans.jsonl": file.stat().st_size}
