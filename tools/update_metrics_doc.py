"""Rewrite the metrics table of docs/metrics.md from the metric catalog in ``monitor.metrics``."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry

from monitor.metrics import MonitorMetrics, metrics_table

START, END = "<!-- metrics-table:start -->", "<!-- metrics-table:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def with_metrics_table(doc: str) -> str:
    head, _, rest = doc.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{metrics_table(MonitorMetrics(CollectorRegistry()))}\n{END}{tail}"


if __name__ == "__main__":
    DOC.write_text(with_metrics_table(DOC.read_text(encoding="utf-8")), encoding="utf-8")
