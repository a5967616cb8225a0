"""Rewrite the settings table of docs/settings.md from the settings' docstrings (``rubric-monitor config-doc``).

The name is historical: the table lived in the README before the reference moved to ``docs/``."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.cli.daemon import config_table

START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def with_config_table(readme: str) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{config_table()}\n{END}{tail}"


if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
    path.write_text(with_config_table(path.read_text(encoding="utf-8")), encoding="utf-8")
