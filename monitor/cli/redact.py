"""``rubric-monitor redact``: what the conversations of a file become once redacted, for tuning the ``redaction:``
settings (recognizers, custom patterns, allow-list) before turning them on. Nothing is sent anywhere."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from monitor.cli.common import config_arg, configure_logging
from monitor.formats.input_files import read_conversations
from monitor.privacy import build_redactor
from monitor.settings import load_settings


def register(sub: Any) -> None:
    redact = sub.add_parser("redact", help="show what the conversations of a file become once redacted")
    config_arg(redact)
    redact.add_argument("--input", type=Path, required=True, help="OTLP JSON lines or OpenAI-chat JSONL")
    redact.add_argument("--show-values", action="store_true",
                        help="also list each placeholder with the value it replaced (on stderr)")
    redact.set_defaults(handler=cmd_redact)


def cmd_redact(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    if not settings.redaction.enabled:
        print("rubric-monitor: redaction.enabled is false in these settings; showing what it would do with the "
              "recognizers they name", file=sys.stderr)
    redactor = build_redactor(settings.redaction.model_copy(update={"enabled": True}))
    total = 0
    for conversation in read_conversations(args.input):
        redacted = redactor.redact(conversation)
        shown = redacted.conversation
        print(json.dumps({
            "conversation_id": shown.id,
            "system_instructions": shown.system_instructions,
            "messages": [message.model_dump(mode="json", exclude_defaults=True) for message in shown.messages],
        }, ensure_ascii=False), flush=True)
        counts = redacted.counts
        total += sum(counts.values())
        summary = ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "nothing found"
        print(f"rubric-monitor: conversation {shown.id!r}: {summary}", file=sys.stderr)
        if args.show_values:
            for (label, value), placeholder in redacted.pseudonymizer.placeholders.items():
                print(f"  {placeholder} ({label.lower()}) = {value}", file=sys.stderr)
    print(f"rubric-monitor: {total} value(s) redacted ({redactor.describe()})", file=sys.stderr)
    return 0
