"""Bounded reading of rubric and settings files: what the bounds cost on a real rubric, and how fast a hostile
file (an alias bomb, 10,000-deep nesting) is refused. PyYAML's own ``safe_load`` is the baseline.

    .venv/bin/python benchmarks/bench_documents.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.formats.documents import DocumentError, load_yaml
from tests.test_rubric_files import alias_bomb

REPO = Path(__file__).resolve().parents[1]


def timed(function: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            function()
        except DocumentError:
            pass
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> int:
    rubric = (REPO / "examples" / "rubrics" / "restaurant-reservation.yaml").read_text()
    rows = [
        ("example rubric, yaml.safe_load", timed(lambda: yaml.safe_load(rubric), 200)),
        ("example rubric, bounded load_yaml", timed(lambda: load_yaml(rubric), 200)),
        ("alias bomb (9**9 values), refused", timed(lambda: load_yaml(alias_bomb()), 20)),
        ("10,000-deep list, refused", timed(lambda: load_yaml("x: " + "[" * 10_000 + "]" * 10_000), 5)),
    ]
    for label, seconds in rows:
        print(f"| {label} | {seconds * 1000:.2f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
