"""The OTLP file source (incremental, restartable, rotation-safe) and the in-memory source."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.errors import SourceError
from monitor.formats.otlp import ParseResult, parse_otlp_line, spans_to_otlp_document
from monitor.models import SpanRecord
from monitor.sources.base import SourceBatch
from monitor.sources.memory import InMemorySource
from monitor.sources.otlp_file import OtlpFileSource
from monitor.store import InMemoryStore

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _span(number: int, trace: str = "a") -> SpanRecord:
    return SpanRecord(
        trace_id=trace * 32, span_id=f"{number:016x}", name=f"chat {number}",
        start_time=NOW + timedelta(seconds=number), attributes={"gen_ai.operation.name": "chat"},
    )


def _line(*numbers: int, trace: str = "a") -> str:
    return json.dumps(spans_to_otlp_document([_span(n, trace) for n in numbers])) + "\n"


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as stream:
        stream.write(text)


def _pull(source: OtlpFileSource, checkpoint: str | None) -> tuple[list[SourceBatch], str | None]:
    batches = list(source.pull(checkpoint, NOW))
    return batches, (batches[-1].checkpoint if batches else checkpoint)


def _numbers(batches: list[SourceBatch]) -> list[int]:
    return [int(span.span_id, 16) for batch in batches for span in batch.spans]


def test_each_cycle_reads_only_what_was_appended(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_line(1, 2) + _line(3))
    source = OtlpFileSource(traces)

    first, checkpoint = _pull(source, None)
    assert _numbers(first) == [1, 2, 3]
    assert sum(b.rows for b in first) == 2 and all(b.rejected == {} for b in first)

    _append(traces, _line(4))
    second, checkpoint = _pull(source, checkpoint)
    assert _numbers(second) == [4]

    nothing, _ = _pull(source, checkpoint)
    assert nothing == []


def test_a_restarted_daemon_resumes_from_its_stored_checkpoint(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_line(1) + _line(2))
    _, stored = _pull(OtlpFileSource(traces), None)
    _append(traces, _line(3))

    after_restart, _ = _pull(OtlpFileSource(traces), stored)

    assert _numbers(after_restart) == [3]


def test_a_line_still_being_written_waits_for_its_newline(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    complete, partial = _line(1), _line(2)
    traces.write_text(complete + partial[:40])
    source = OtlpFileSource(traces)

    first, checkpoint = _pull(source, None)
    assert _numbers(first) == [1] and all(b.rejected == {} for b in first)

    _append(traces, partial[40:])
    second, _ = _pull(source, checkpoint)
    assert _numbers(second) == [2] and second[0].rejected == {}


def test_a_rotated_file_is_read_from_its_start(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_line(1) + _line(2))
    source = OtlpFileSource(traces)
    _, checkpoint = _pull(source, None)

    # Replaced by a new file that is already longer than the old offset: only its content tells.
    traces.unlink()
    traces.write_text(_line(10, 11, 12) + _line(13, 14, 15))
    replaced, checkpoint = _pull(source, checkpoint)
    assert _numbers(replaced) == [10, 11, 12, 13, 14, 15]

    # Truncated in place (copytruncate) and shorter than before.
    traces.write_text(_line(20))
    truncated, checkpoint = _pull(source, checkpoint)
    assert _numbers(truncated) == [20]

    # Rewritten with the same bytes plus more (an atomic rewrite): nothing is read twice.
    traces.write_text(_line(20) + _line(21))
    rewritten, _ = _pull(source, checkpoint)
    assert _numbers(rewritten) == [21]


def test_a_file_renamed_by_rotation_is_read_on_not_again(tmp_path: Path) -> None:
    current = tmp_path / "traces.jsonl"
    current.write_text(_line(1) + _line(2))
    source = OtlpFileSource(tmp_path)
    _, checkpoint = _pull(source, None)

    # The collector renames the full file (after a last write) and starts a new one under the old name.
    _append(current, _line(3))
    current.rename(tmp_path / "traces-2026-03-01T00-00-00.jsonl")
    current.write_text(_line(4))

    rotated, _ = _pull(source, checkpoint)
    assert _numbers(rotated) == [3, 4]


def test_a_malformed_line_is_counted_and_logged_once_with_its_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    traces = tmp_path / "traces.jsonl"
    broken_span = json.loads(_line(3))
    broken_span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "nope"
    traces.write_text(_line(1) + "{this is not json\n" + "\n" + json.dumps(broken_span) + "\n" + _line(4))
    source = OtlpFileSource(traces)

    with caplog.at_level(logging.WARNING, logger="monitor.sources.otlp_file"):
        batches, checkpoint = _pull(source, None)

    assert _numbers(batches) == [1, 4]
    assert batches[-1].rejected == {"invalid_json": 1, "invalid_trace_id": 1}
    assert sum(b.rows for b in batches) == 4  # the blank line is not a row
    assert f"{traces}:2: could not read 1 x invalid_json" in caplog.text
    assert f"{traces}:4: could not read 1 x invalid_trace_id" in caplog.text

    caplog.clear()
    _append(traces, _line(5))
    with caplog.at_level(logging.WARNING, logger="monitor.sources.otlp_file"):
        later, _ = _pull(source, checkpoint)
    assert _numbers(later) == [5] and later[0].rejected == {} and caplog.text == ""


def _broken(line: str, **fields: object) -> str:
    """``line`` with its first span's fields overridden."""
    document = json.loads(line)
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(fields)
    return json.dumps(document) + "\n"


def _store_cycle(source: OtlpFileSource, store: InMemoryStore) -> list[SourceBatch]:
    """One pull whose batches are stored with their checkpoints, as the pipeline does."""
    batches = list(source.pull(store.checkpoint(source.name), NOW))
    for batch in batches:
        store.add_spans(source.name, batch.spans, batch.checkpoint, "ignore")
    return batches


def test_malformed_spans_are_rejected_and_never_hold_the_position_back(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    half_an_emoji = _line(6).replace('"chat 6"', '"chat 6 \\ud83d"')
    traces.write_text(
        _line(1)
        + _broken(_line(2, 3), events=5)  # one bad span: its neighbour on the line is still read
        + _broken(_line(4), startTimeUnixNano="INF").replace('"INF"', "Infinity")
        + _broken(_line(5), attributes=[{"key": "n", "value": {"arrayValue": {"values": 5}}}])
        + half_an_emoji
        + _line(7))
    source, store = OtlpFileSource(traces), InMemoryStore()

    first = _store_cycle(source, store)  # the store serialises every span: none may fail to encode

    assert _numbers(first) == [1, 3, 6, 7]
    assert sum(b.rows for b in first) == 6
    assert {k: v for b in first for k, v in b.rejected.items()} == {"malformed_span": 2, "invalid_time": 1}
    [named] = [span for span in store.spans_of("a" * 32) if span.span_id == f"{6:016x}"]
    assert named.name == "chat 6 \ufffd"

    _append(traces, _line(8))
    assert _numbers(_store_cycle(source, store)) == [8]


def test_a_line_whose_reading_fails_unexpectedly_is_counted_logged_and_read_past(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def parse(text: str) -> ParseResult:
        if "chat 2" in text:
            raise KeyError("an error no check foresaw")
        return parse_otlp_line(text)

    traces = tmp_path / "traces.jsonl"
    traces.write_text(_line(1) + _line(2) + _line(3))
    source = OtlpFileSource(traces, parse_line=parse)

    with caplog.at_level(logging.WARNING, logger="monitor.sources.otlp_file"):
        batches, checkpoint = _pull(source, None)

    assert _numbers(batches) == [1, 3] and batches[-1].rejected == {"parse_error": 1}
    assert f"{traces}:2: could not read 1 x parse_error (KeyError: 'an error no check foresaw')" in caplog.text
    _append(traces, _line(4))
    later, _ = _pull(source, checkpoint)
    assert _numbers(later) == [4]


def test_a_directory_is_read_in_name_order_and_new_files_are_picked_up(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl").write_text(_line(2))
    (tmp_path / "a.json").write_text(_line(1))
    (tmp_path / "notes.txt").write_text("not traces\n")
    (tmp_path / ".c.jsonl").write_text(_line(99))  # an exporter's temporary file
    source = OtlpFileSource(tmp_path)

    first, checkpoint = _pull(source, None)
    assert _numbers(first) == [1, 2]

    (tmp_path / "c.jsonl").write_text(_line(3))
    (tmp_path / "a.json").unlink()
    second, checkpoint = _pull(source, checkpoint)
    assert _numbers(second) == [3]
    assert checkpoint is not None and set(json.loads(checkpoint)["files"]) == {"b.jsonl", "c.jsonl"}


def test_batches_are_bounded_and_each_checkpoint_resumes_exactly(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(_line(3 * n + 1, 3 * n + 2, 3 * n + 3) for n in range(10)))
    source = OtlpFileSource(traces, batch_spans=5)

    batches, _ = _pull(source, None)
    assert _numbers(batches) == list(range(1, 31))
    assert all(len(batch.spans) <= 6 for batch in batches) and len(batches) >= 5

    # The daemon stored the first two batches, then died: the rest is read once, nothing is lost.
    resumed, _ = _pull(source, batches[1].checkpoint)
    assert _numbers(batches[:2]) + _numbers(resumed) == list(range(1, 31))


def test_an_unusable_checkpoint_starts_over_instead_of_stopping(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(_line(1))
    with caplog.at_level(logging.ERROR):
        batches, _ = _pull(OtlpFileSource(traces), '{"version": 99}')
    assert _numbers(batches) == [1]
    assert "unusable checkpoint" in caplog.text


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux /proc")
def test_an_unreadable_file_is_reported_after_the_others_are_read(tmp_path: Path) -> None:
    # Reading /proc/self/mem at offset 0 fails with EIO even for root, who can read any chmod-000 file.
    (tmp_path / "a.jsonl").symlink_to("/proc/self/mem")
    (tmp_path / "b.jsonl").write_text(_line(1))
    source = OtlpFileSource(tmp_path)
    batches: list[SourceBatch] = []

    with pytest.raises(SourceError, match="a.jsonl"):
        for batch in source.pull(None, NOW):
            batches.append(batch)

    assert _numbers(batches) == [1]
    assert json.loads(batches[-1].checkpoint)["files"]["a.jsonl"]["offset"] == 0


def test_a_missing_path_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="nowhere"):
        list(OtlpFileSource(tmp_path / "nowhere").pull(None, NOW))


def test_the_in_memory_source_hands_out_each_span_once() -> None:
    source = InMemorySource([_span(n) for n in range(1, 8)], batch_size=3)

    first = list(source.pull(None, NOW))
    assert [len(b.spans) for b in first] == [3, 3, 1]
    assert first[-1].checkpoint == "7"

    source.add([_span(8), _span(9)])
    second = list(source.pull(first[-1].checkpoint, NOW))
    assert _numbers(second) == [8, 9]
    assert list(source.pull(second[-1].checkpoint, NOW)) == []

    with pytest.raises(SourceError, match="not a count"):
        list(source.pull("minus one", NOW))
