"""A one-line progress bar on stderr, for commands a person watches (``evaluate``); silent when stderr is not a
terminal, so logs and pipes never see it."""

from __future__ import annotations

import sys
from typing import TextIO

WIDTH = 30


class ProgressBar:
    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.done = 0
        self.label = label
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = total > 0 and self._stream.isatty()
        self._draw()

    def advance(self) -> None:
        self.done += 1
        self._draw()

    def clear(self) -> None:
        """Erase the bar, so that a line written to the same terminal starts at its left edge."""
        if self.enabled:
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def redraw(self) -> None:
        self._draw()

    def close(self) -> None:
        self.clear()
        self.enabled = False

    def _draw(self) -> None:
        if not self.enabled:
            return
        filled = WIDTH * self.done // self.total
        self._stream.write(f"\r[{'#' * filled}{'.' * (WIDTH - filled)}] {self.done}/{self.total} {self.label}")
        self._stream.flush()
