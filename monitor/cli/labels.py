"""``rubric-monitor labels import FILE`` and ``labels export``: people's labels in and out of the store, as JSON
lines or CSV in the format ``calibrate`` reads (``monitor.review.labels_io``)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from monitor.cli.common import config_arg, configure_logging
from monitor.cli.results import open_store
from monitor.review.labels_io import read_stored_labels, to_csv, to_jsonl
from monitor.review.store import ReviewStore
from monitor.settings import load_settings


def cmd_import(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    labels = read_stored_labels(args.file, args.rubric, args.reviewer)
    store = open_store(settings)
    try:
        review = ReviewStore(store)
        attached = []
        for label in labels:
            result_id = review.current_result_id(label.conversation_id, label.rubric)
            attached.append(label if result_id is None else replace(label, result_id=result_id))
        review.save_labels(attached)
    finally:
        store.close()
    matched = sum(label.result_id is not None for label in attached)
    print(f"imported {len(attached)} labels ({matched} of them for verdicts in the store)", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    store = open_store(settings)
    try:
        labels = ReviewStore(store).labels(rubric=args.rubric)
    finally:
        store.close()
    text = to_csv(labels) if args.format == "csv" else to_jsonl(labels)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"exported {len(labels)} labels to {args.output}", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    labels = sub.add_parser("labels", help="people's labels: import and export (JSON lines or CSV)")
    verbs = labels.add_subparsers(dest="labels_command", required=True)
    importing = verbs.add_parser("import", help="store labels from a file (the same reviewer and evaluation "
                                                "again replaces the label)")
    config_arg(importing)
    importing.add_argument("file", type=Path, help="JSON lines, a JSON list or CSV (.csv), as calibrate reads")
    importing.add_argument("--rubric", help="rubric of labels that do not name one")
    importing.add_argument("--reviewer", default="import", help="reviewer of labels that do not name one")
    importing.set_defaults(handler=cmd_import)
    exporting = verbs.add_parser("export", help="write the stored labels")
    config_arg(exporting)
    exporting.add_argument("--rubric", help="only this rubric's labels")
    exporting.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    exporting.add_argument("--output", type=Path, help="file to write (default: standard output)")
    exporting.set_defaults(handler=cmd_export)
