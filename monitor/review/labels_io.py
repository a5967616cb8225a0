"""Labels in and out: JSON lines or CSV in the format ``calibrate`` reads (``monitor.trust.agreement``), with the
fields a stored label adds (``rubric``, ``reviewer``, ``note``, ``labelled_at``, ``not_applicable``), so a labelled
set comes in from other tools and goes out to them, and an export imports back to the same labels."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from monitor.errors import ConfigError
from monitor.review.store import StoredLabel
from monitor.trust.agreement import Label, label_records, parse_label


def export_record(label: StoredLabel) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": label.conversation_id, "rubric": label.rubric, "reviewer": label.reviewer, "passed": label.passed}
    if label.score is not None:
        record["score"] = label.score
    record["dimensions"] = {d: v for d, v in sorted(label.dimensions.items()) if v is not None}
    not_applicable = sorted(d for d, v in label.dimensions.items() if v is None)
    if not_applicable:
        record["not_applicable"] = not_applicable
    if label.note:
        record["note"] = label.note
    if label.labelled_at is not None:
        record["labelled_at"] = label.labelled_at.isoformat()
    return record


def to_jsonl(labels: Sequence[StoredLabel]) -> str:
    return "".join(json.dumps(export_record(label), ensure_ascii=False) + "\n" for label in labels)


def to_csv(labels: Sequence[StoredLabel]) -> str:
    dimensions = sorted({d for label in labels for d in label.dimensions})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "rubric", "reviewer", "passed", "score", "note", "labelled_at",
                     *(f"dim:{d}" for d in dimensions)])
    for label in labels:
        scores = ["" if d not in label.dimensions else "na" if label.dimensions[d] is None
                  else str(label.dimensions[d]) for d in dimensions]
        writer.writerow([label.conversation_id, label.rubric, label.reviewer, "pass" if label.passed else "fail",
                         "" if label.score is None else repr(label.score), label.note,
                         "" if label.labelled_at is None else label.labelled_at.isoformat(), *scores])
    return out.getvalue()


def _text_field(record: dict[str, Any], name: str, where: str, default: str | None) -> str:
    value = record.get(name, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(where, name, f"each label needs the {name} (in the file or given with --{name})")
    return value


def read_stored_labels(path: Path, rubric: str | None, reviewer: str) -> list[StoredLabel]:
    """The labels of a file as stored labels; ``rubric`` and ``reviewer`` fill in what a record does not name.
    Errors name the file, line and field; a file with the same evaluation and reviewer twice is refused."""
    found: dict[tuple[str, str, str], StoredLabel] = {}
    for where, record in label_records(path):
        base: Label = parse_label(record, where)
        name = _text_field(record, "rubric", where, rubric)
        who = _text_field(record, "reviewer", where, reviewer)
        not_applicable = record.get("not_applicable") or []
        if not isinstance(not_applicable, list) or not all(isinstance(d, str) for d in not_applicable):
            raise ConfigError(where, "not_applicable", "must list dimension ids")
        dimensions: dict[str, int | None] = {**base.dimensions, **{d: None for d in not_applicable}}
        note = record.get("note") or ""
        if not isinstance(note, str):
            raise ConfigError(where, "note", "must be text")
        labelled_at = None
        if record.get("labelled_at"):
            try:
                labelled_at = datetime.fromisoformat(str(record["labelled_at"]))
            except ValueError:
                raise ConfigError(where, "labelled_at", f"{record['labelled_at']!r} is not an ISO 8601 time") from None
            if labelled_at.tzinfo is None:
                raise ConfigError(where, "labelled_at", "needs a time zone (UTC: +00:00)")
        key = (base.id, name, who)
        if key in found:
            raise ConfigError(where, "id", f"conversation {base.id!r} is labelled twice for rubric {name!r} by "
                                           f"{who!r}")
        found[key] = StoredLabel(base.id, name, who, base.passed, dimensions, base.score, note[:2000],
                                 labelled_at=labelled_at)
    return list(found.values())
