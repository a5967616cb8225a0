"""① A source reading OTLP JSON lines files (the OpenTelemetry collector's ``file`` exporter).

``path`` is one file, or a directory whose ``*.jsonl`` and ``*.json`` files are read in name order. Reading is
incremental: the checkpoint records, per file, the byte offset reached (always at a line boundary) and
fingerprints of the bytes at the start of the file and just before that offset. A file that shrank, or whose
fingerprinted bytes changed, was truncated or replaced, and is read again from the start; a new name holding
the bytes of a file read before is that file renamed by rotation, and is read on from where it was. A last
line without its newline is still being written, and is left for the next cycle. A line that cannot be read,
whatever the reason, is counted and logged with its place and read past: it never holds the position back.

Sizes are bounded: a line longer than ``max_line_bytes`` is skipped (``line_too_long``, counted once) without
being held in memory, and an unfinished one is skipped as far as it was written, so it is not read again every
cycle (the checkpoint then stands inside it, and the next cycle skips on to its end); a span whose attributes and
events hold more than ``max_span_bytes`` of text is rejected (``span_too_large``) before it reaches the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from monitor.errors import SourceError
from monitor.formats.otlp import ParseResult, parse_otlp_line
from monitor.models import SpanRecord
from monitor.sources.base import SourceBatch

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SPANS = 5_000
_FINGERPRINT_BYTES = 4_096
_CHECKPOINT_VERSION = 1
_LOGGED_BAD_LINES_PER_FILE = 10
_PATTERNS = ("*.jsonl", "*.json")
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_SPAN_BYTES = 4 * 1024 * 1024
LINE_TOO_LONG = "line_too_long"
SPAN_TOO_LARGE = "span_too_large"
_SKIP_CHUNK = 1024 * 1024
PARSE_ERROR = "parse_error"
"""Rejection reason of a line whose reading raised an error no check foresaw."""


@dataclass
class _Position:
    """How far one file was read; ``head``/``tail`` hash the bytes at its start and just before ``offset``."""

    offset: int = 0
    line: int = 0
    head: str = ""
    tail: str = ""
    skipping: bool = False
    """``offset`` stands inside a line too long to read (its end not written yet): skip on to its end."""


@dataclass
class _Pending:
    spans: list[SpanRecord] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    rows: int = 0

    def take(self, checkpoint: str, read_through: datetime | None = None) -> SourceBatch:
        batch = SourceBatch(self.spans, checkpoint, rejected=dict(self.rejected), rows=self.rows,
                            read_through=read_through)
        self.spans, self.rejected, self.rows = [], Counter(), 0
        return batch


class OtlpFileSource:
    def __init__(self, path: Path, name: str = "otlp_file", batch_spans: int = DEFAULT_BATCH_SPANS, *,
                 parse_line: Callable[[str], ParseResult] = parse_otlp_line,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES) -> None:
        """``parse_line`` reads one line (the OTLP JSON format unless told otherwise)."""
        if batch_spans < 1:
            raise ValueError(f"batch_spans must be at least 1, got {batch_spans}")
        self.max_line_bytes = max_line_bytes
        self.max_span_bytes = max_span_bytes
        self.path = Path(path)
        self.name = name
        self._batch_spans = batch_spans
        self._parse_line_text = parse_line
        self._read_through: datetime | None = None

    def pull(self, checkpoint: str | None, now: datetime) -> Iterator[SourceBatch]:
        """Yield what was appended since ``checkpoint``, at most about ``batch_spans`` spans per batch.

        A file that cannot be read does not stop the others; once they are read, ``SourceError`` names it.
        """
        files = self._files()
        positions = self._match(files, self._load(checkpoint))
        pending = _Pending()
        unreadable: list[str] = []
        emitted = checkpoint
        for name, file in files.items():
            position = positions[name]
            try:
                for _ in self._read(file, position, pending):
                    emitted = self._dump(positions)
                    yield pending.take(emitted)
            except OSError as exc:
                unreadable.append(f"{file}: {exc.strerror or exc}")
        final = self._dump(positions)
        if pending.rows or pending.spans or pending.rejected or final != emitted:
            yield pending.take(final, read_through=None if unreadable else now)
        if unreadable:
            raise SourceError(f"source {self.name}: cannot read {'; '.join(unreadable)}")
        # Reached only when every batch was taken and every file read to its end: spans written before this
        # pull are all delivered. Lines are not in time order, so a partial read proves nothing.
        self._read_through = now

    def read_through(self) -> datetime | None:
        return self._read_through

    def close(self) -> None:
        """Files are opened and closed within each pull: nothing to release."""

    # -- files

    def _files(self) -> dict[str, Path]:
        if self.path.is_file():
            return {self.path.name: self.path}
        if not self.path.is_dir():
            raise SourceError(f"source {self.name}: {self.path} is neither a file nor a directory")
        found = {p.name: p for pattern in _PATTERNS for p in self.path.glob(pattern)}
        # Dot-files are editors' and exporters' temporary files, not finished output.
        return {n: found[n] for n in sorted(found) if not n.startswith(".") and found[n].is_file()}

    def _read(self, file: Path, position: _Position, pending: _Pending) -> Iterator[None]:
        """Read complete lines of ``file`` from ``position`` into ``pending``; yields whenever a batch is full
        (``position`` then stands at a line boundary after everything in ``pending``)."""
        with file.open("rb") as stream:
            stream.seek(position.offset)
            bad_lines = 0
            while True:
                if position.skipping and not self._skip_rest_of_line(stream, position):
                    break
                raw = stream.readline(self.max_line_bytes + 1)
                if len(raw) > self.max_line_bytes:
                    bad_lines += 1
                    pending.rejected[LINE_TOO_LONG] += 1
                    pending.rows += 1
                    position.offset += len(raw)
                    position.skipping = not raw.endswith(b"\n")  # one byte too long, its newline included
                    position.line += not position.skipping
                    self._log_bad_line(file, position.line + 1, {LINE_TOO_LONG: 1}, bad_lines,
                                       f"longer than {self.max_line_bytes} bytes")
                    continue
                if not raw.endswith(b"\n"):
                    # End of file, or a last line the writer has not finished: leave it for the next cycle.
                    break
                position.offset += len(raw)
                position.line += 1
                rejected, failure = self._parse_line(raw, pending)
                if rejected:
                    bad_lines += 1
                    self._log_bad_line(file, position.line, rejected, bad_lines, failure)
                if len(pending.spans) >= self._batch_spans:
                    self._fingerprint(stream, position)
                    yield
                    stream.seek(position.offset)
            self._fingerprint(stream, position)
        if bad_lines > _LOGGED_BAD_LINES_PER_FILE:
            logger.warning("%s: %d unreadable lines in all this cycle", file, bad_lines)

    @staticmethod
    def _skip_rest_of_line(stream: BinaryIO, position: _Position) -> bool:
        """Read past the rest of a too-long line a chunk at a time; False when its end is not written yet (the
        offset then stands at the end of the file, so those bytes are not read again)."""
        while True:
            chunk = stream.readline(_SKIP_CHUNK)
            position.offset += len(chunk)
            if chunk.endswith(b"\n"):
                position.line += 1
                position.skipping = False
                return True
            if len(chunk) < _SKIP_CHUNK:
                return False

    def _parse_line(self, raw: bytes, pending: _Pending) -> tuple[dict[str, int], str]:
        """Read one line into ``pending``: what it rejected, by reason, and the error if reading it failed."""
        failure = ""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            rejected = {"invalid_utf8": 1}
        else:
            if not text.strip():
                return {}, ""
            try:
                spans, rejected = self._parse_line_text(text)
            except Exception as exc:  # a line we failed to read must never hold the position back
                spans, rejected = [], {PARSE_ERROR: 1}
                failure = f"{type(exc).__name__}: {exc}"
            kept = [s for s in spans if _text_size(s.attributes, s.events) <= self.max_span_bytes]
            if len(kept) < len(spans):
                rejected = {**rejected, SPAN_TOO_LARGE: rejected.get(SPAN_TOO_LARGE, 0) + len(spans) - len(kept)}
            pending.spans.extend(kept)
        pending.rows += 1
        pending.rejected.update(rejected)
        return rejected, failure

    @staticmethod
    def _log_bad_line(file: Path, line: int, rejected: dict[str, int], bad_lines: int, failure: str) -> None:
        if bad_lines <= _LOGGED_BAD_LINES_PER_FILE:
            reasons = ", ".join(f"{count} x {reason}" for reason, count in rejected.items())
            because = f" ({failure[:200]})" if failure else ""
            logger.warning("%s:%d: could not read %s%s", file, line, reasons, because)

    @staticmethod
    def _match(files: dict[str, Path], recorded: dict[str, _Position]) -> dict[str, _Position]:
        """Where to resume each file. A file keeps its recorded position while its fingerprinted bytes are
        unchanged; a file whose bytes changed was truncated or replaced and starts over, unless it is a file
        read before under another name (rotation renames the old file and starts a new one)."""
        positions: dict[str, _Position] = {}
        orphans: list[tuple[str, _Position]] = []
        for name, position in recorded.items():
            same = _continues(files[name], position) if name in files else False
            if same is not False:  # unreadable right now (None): keep the position, the read will report it
                positions[name] = position
            elif position.offset > 0:
                orphans.append((name, position))
        for name, file in files.items():
            if name in positions:
                continue
            adopted = next((item for item in orphans if _continues(file, item[1])), None)
            if adopted is not None:
                orphans.remove(adopted)
                logger.info("%s is %s renamed: reading on from line %d", file, adopted[0], adopted[1].line)
                positions[name] = adopted[1]
            else:
                if name in recorded:
                    logger.info("%s was truncated or replaced: reading it again", file)
                positions[name] = _Position()
        return positions

    @staticmethod
    def _fingerprint(stream: BinaryIO, position: _Position) -> None:
        position.head, position.tail = _fingerprints(stream, position.offset)

    # -- checkpoint

    def _load(self, checkpoint: str | None) -> dict[str, _Position]:
        if checkpoint is None:
            return {}
        try:
            state = json.loads(checkpoint)
            if state.get("version") != _CHECKPOINT_VERSION:
                raise ValueError(f"version {state.get('version')!r}")
            return {str(name): _Position(**values) for name, values in state["files"].items()}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # The store will drop spans it already holds, so starting over costs time, not correctness.
            logger.error("source %s: unusable checkpoint (%s): reading %s again", self.name, exc, self.path)
            return {}

    @staticmethod
    def _dump(positions: dict[str, _Position]) -> str:
        files = {name: asdict(position) for name, position in sorted(positions.items())}
        return json.dumps({"version": _CHECKPOINT_VERSION, "files": files}, sort_keys=True)


def _text_size(*values: Any) -> int:
    """About how many bytes of text ``values`` hold (strings by length, numbers as a few): cheap enough to
    run on every span, and what a stored span's size grows with."""
    size, stack = 0, list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            size += len(value)
        elif isinstance(value, dict):
            size += sum(len(str(key)) for key in value)
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif hasattr(value, "attributes"):  # a SpanEvent
            size += len(getattr(value, "name", "") or "")
            stack.append(value.attributes)
        else:
            size += 8
    return size


def _continues(file: Path, position: _Position) -> bool | None:
    """Whether ``file`` still holds the bytes read before up to ``position.offset`` (``None``: unreadable)."""
    if position.offset == 0:
        return True
    try:
        with file.open("rb") as stream:
            if stream.seek(0, 2) < position.offset:
                return False
            return _fingerprints(stream, position.offset) == (position.head, position.tail)
    except OSError:
        return None


def _fingerprints(stream: BinaryIO, offset: int) -> tuple[str, str]:
    """Hashes of the first bytes of the file and of the bytes just before ``offset`` (both up to 4 KiB)."""
    if offset == 0:
        return "", ""
    stream.seek(0)
    head = hashlib.sha256(stream.read(min(offset, _FINGERPRINT_BYTES))).hexdigest()
    start = max(0, offset - _FINGERPRINT_BYTES)
    stream.seek(start)
    tail = hashlib.sha256(stream.read(offset - start)).hexdigest()
    return head, tail
