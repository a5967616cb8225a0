"""Write a calibration set from tau-bench trajectories: conversations (OpenAI-chat JSONL) and labels.

    python tools/tau_calibration_set.py INPUT.json OUT_DIR [--limit N] [--dimension task_completion]

tau-bench records carry a task-success reward (1.0 or 0.0). It becomes each conversation's label for
``rubric-monitor calibrate``: ``passed`` (reward 1), ``score`` (the reward) and, for a weighted rubric with a
task-completion dimension, that dimension at 5 (reward 1) or 1 (reward 0). Writes ``OUT_DIR/conversations.jsonl``
and ``OUT_DIR/labels.jsonl``; conversation ids are ``tau-{task_id}-{trial}`` as in ``tau_to_otlp.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.tau_to_otlp import conversation_id, derive_tool_definitions


def calibration_records(records: Sequence[dict[str, Any]], dimension: str = "task_completion"
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(conversations, labels) for ``records``."""
    tools = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
             for t in derive_tool_definitions(records)]
    conversations: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    for record in records:
        identifier = conversation_id(record)
        reward = float(record["reward"])
        if reward not in (0.0, 1.0):
            raise ValueError(f"record {identifier}: reward {reward!r} is not 0 or 1")
        conversations.append({"id": identifier, "agent": "airline-agent", "messages": record["traj"], "tools": tools})
        labels.append({"id": identifier, "passed": reward == 1.0, "score": reward,
                       "dimensions": {dimension: 5 if reward == 1.0 else 1}})
    return conversations, labels


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("input", type=Path, help="tau-bench trajectories (a JSON array of records)")
    parser.add_argument("output", type=Path, help="directory to write conversations.jsonl and labels.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="only the first N records")
    parser.add_argument("--dimension", default="task_completion", help="the task-completion dimension id")
    args = parser.parse_args(argv)
    try:
        records = json.loads(args.input.read_text(encoding="utf-8"))[: args.limit]
        conversations, labels = calibration_records(records, args.dimension)
        args.output.mkdir(parents=True, exist_ok=True)
        write_jsonl(args.output / "conversations.jsonl", conversations)
        write_jsonl(args.output / "labels.jsonl", labels)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"tau_calibration_set: {args.input}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(conversations)} conversations and labels to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
