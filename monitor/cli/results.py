"""``rubric-monitor results``: the verdicts in the store, as a table or JSON; ``results show CONVERSATION``: one
conversation's verdicts in full, with the prompt sent and the judge's reply (the audit trail).

Reads the store named by the settings (``store.url``), the same one the daemon writes; it never writes to it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from monitor.cli.common import config_arg
from monitor.errors import ConfigError
from monitor.models import EvaluationResult, as_utc, utc_now
from monitor.redaction import redact
from monitor.settings import Settings, load_settings
from monitor.store.sql import SqlStore
from monitor.store.url import store_url

REASON_CHARS = 70
"""Characters of a dimension's reason shown in the table (``results show`` prints all of it)."""


def register(sub: Any) -> None:
    results = sub.add_parser("results", help="list the stored verdicts (results show CONVERSATION: one in full)",
                             description="List the stored verdicts, newest first.")
    config_arg(results)
    results.add_argument("--rubric", help="only this rubric")
    results.add_argument("--agent", help="only this agent")
    results.add_argument("--failed", action="store_true", help="only verdicts that failed or could not be scored")
    results.add_argument("--since", help="only verdicts this recent: 30m, 24h, 7d, or an ISO 8601 time")
    results.add_argument("--limit", type=int, default=50, help="at most this many rows (default: 50)")
    results.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    results.set_defaults(handler=cmd_results)
    shows = results.add_subparsers(dest="results_command", metavar="show")
    show = shows.add_parser("show", help="one conversation's verdicts in full, with the prompt sent",
                            description="One conversation's verdicts in full, with the prompt sent to the judge "
                                        "and its raw reply.")
    show.add_argument("conversation", help="conversation id (the first column of `results`)")
    show.add_argument("--json", action="store_true", dest="show_json", help="the stored results as JSON")
    show.set_defaults(handler=cmd_show)


def cmd_results(args: argparse.Namespace) -> int:
    return list_results(args, load_settings(args.config), sys.stdout)


def cmd_show(args: argparse.Namespace) -> int:
    return show_results(args, load_settings(args.config), sys.stdout)


def open_store(settings: Settings) -> SqlStore:
    """The daemon's store, refusing to create an empty SQLite file where the user expected results."""
    url = store_url(settings)
    if url.startswith("sqlite") and ":memory:" not in url:
        path = url.split(":///", 1)[-1]
        if path and not Path(path).exists():
            raise ConfigError("settings", "store.url", f"{path} does not exist: no results yet (run the daemon "
                                                       "first, from the directory it ran in, or pass its --config)")
    return SqlStore(url)


_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(value: str, now: datetime) -> datetime:
    """``30m``, ``24h``, ``7d`` back from now, or an ISO 8601 time (UTC when it names no zone)."""
    if value[-1:] in _SECONDS and value[:-1].isdigit():
        return now - timedelta(seconds=int(value[:-1]) * _SECONDS[value[-1]])
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        raise ConfigError("--since", None, f"{value!r} is neither a duration like 24h nor an ISO 8601 time") from None


def weakest(result: EvaluationResult, count: int = 2) -> str:
    """The lowest-scored applicable dimensions (heaviest first among equals) with their reasons; for a verdict
    without dimensions, why it is unscored or its reason."""
    if result.outcome == "unscored":
        return f"unscored: {result.unscored_reason or result.reason}"
    scored = sorted((d for d in result.dimension_scores if d.applicable and d.score is not None),
                    key=lambda d: (d.score or 0, -d.weight))
    if not scored:
        return _clip(result.reason, REASON_CHARS * 2)
    parts = []
    for d in scored[:count]:
        reason = f": {_clip(d.reason, REASON_CHARS)}" if d.reason else ""
        parts.append(f"{d.id} {d.score}{reason}")
    return "; ".join(parts)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _score(result: EvaluationResult) -> str:
    return "-" if result.score is None else f"{result.score:.2f}"


def list_results(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    now = utc_now()
    since = parse_since(args.since, now) if args.since else None
    store = open_store(settings)
    try:
        found = store.find_results(rubric=args.rubric, agent=args.agent, failed=args.failed, since=since,
                                   limit=max(1, args.limit))
    finally:
        store.close()
    if args.json:
        for result in found:
            out.write(json.dumps(_summary(result), ensure_ascii=False) + "\n")
        return 0
    if not found:
        out.write("no results match\n" if (args.rubric or args.agent or args.failed or args.since)
                  else "no results yet\n")
        return 0
    rows = [(r.conversation_id if r.turn_index is None else f"{r.conversation_id}#{r.turn_index}", r.rubric,
             _score(r), r.outcome, weakest(r)) for r in found]
    out.write(_table(("conversation", "rubric", "score", "label", "weakest dimensions"), rows))
    return 0


def _summary(result: EvaluationResult) -> dict[str, Any]:
    output = result.foundry_output()
    output.update(agent=result.agent, judge_model=result.judge_model,
                  evaluated_at=result.evaluated_at.isoformat(), turn_index=result.turn_index)
    return output


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    # The last column takes what the terminal has left; on a pipe nothing is cut.
    if sys.stdout.isatty():
        room = shutil.get_terminal_size().columns - sum(w + 2 for w in widths[:-1])
        widths[-1] = max(20, min(widths[-1], room))
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, _clip(str(row[-1]), widths[-1])]).rstrip())
    return "\n".join(lines) + "\n"


def show_results(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    store = open_store(settings)
    try:
        found = store.results(args.conversation)
    finally:
        store.close()
    if not found:
        sys.stderr.write(f"rubric-monitor: no stored verdict for conversation {args.conversation!r} (list them "
                         "with `results`)\n")
        return 1
    if args.show_json:
        for result in found:
            out.write(result.model_dump_json() + "\n")
        return 0
    out.write("\n\n".join(_describe(result) for result in found) + "\n")
    return 0


PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_\d+>")


def _redaction_lines(r: EvaluationResult) -> list[str]:
    """Which values were replaced before the judge saw the conversation, and where the placeholders are."""
    counts = r.details.get("redacted")
    if not isinstance(counts, dict) or not counts:
        return []
    texts = [r.reason, *(d.reason for d in r.dimension_scores), r.raw_reply or "",
             *(m.get("content", "") for m in r.prompt or [])]
    seen = sorted({p for text in texts for p in PLACEHOLDER.findall(text)})
    summary = ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
    lines = [f"redacted before judging: {summary} (placeholders such as <EMAIL_1> stand for them)"]
    if seen:
        lines.append("placeholders shown here: " + ", ".join(seen))
    return lines


def _mark(text: str) -> str:
    """Placeholders marked in the prompt and reply, so a reader tells them from the agent's own text."""
    return PLACEHOLDER.sub(lambda m: f"[redacted {m.group(0)[1:-1]}]", text)


def _describe(r: EvaluationResult) -> str:
    turn = "" if r.turn_index is None else f", assistant turn {r.turn_index}"
    superseded = f" (revision {r.revision})" if r.revision else ""
    threshold = "" if r.threshold is None else f" (pass threshold {r.threshold})"
    lines = [
        f"conversation {r.conversation_id}{turn}{superseded}, agent {r.agent}",
        f"rubric {r.rubric} version {r.rubric_version} ({r.rubric_kind}), judged by {r.judge_model} at "
        f"{r.evaluated_at.isoformat(timespec='seconds')}",
        f"verdict: {r.outcome}, score {_score(r)}{threshold}",
        f"reason: {r.reason}" if r.reason else "reason: (none)",
    ]
    if r.unscored_reason:
        lines.append(f"unscored because: {r.unscored_reason}")
    if r.dimension_scores:
        lines.append("dimensions:")
        for d in r.dimension_scores:
            score = d.score if d.applicable else "n/a"
            lines.append(f"  {d.id} (weight {d.weight}): {score}" + (f" - {d.reason}" if d.reason else ""))
    if r.details:
        lines.append("details: " + json.dumps(r.details, ensure_ascii=False, indent=1))
    lines.extend(_redaction_lines(r))
    lines.append(f"judge calls {r.judge_calls}, tokens in {r.input_tokens} / out {r.output_tokens}, "
                 f"cost ${r.cost_usd:.4f}, response mode {r.response_mode or '-'}"
                 + (", conversation cut to fit the judge's context" if r.context_truncated else ""))
    if r.prompt is None:
        lines.append("prompt: not stored (store.store_content is false)")
    else:
        lines.append("prompt sent to the judge:")
        for message in r.prompt:
            lines.append(f"--- {message.get('role', '?')} ---")
            lines.append(_mark(message.get("content", "")))
        lines.append("--- judge reply ---")
        lines.append(_mark(r.raw_reply or "(none)"))
    # A reason stored by an earlier release may hold a key an endpoint echoed back.
    return redact("\n".join(lines))
