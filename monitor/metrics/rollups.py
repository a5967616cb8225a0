"""Rolling windows over the hourly rollups, kept incrementally so a cycle's cost does not grow with history.

A window of ``n`` hours is the sum of its ``n`` closed hours and the current hour, so it covers between ``n`` and
``n + 1`` hours of results. The closed hours' sums are kept in memory per window: when the hour turns, the hours
that entered are added and those that left are taken out (each one read from the store's rollups, a key range),
and changes this process makes to past hours (a superseded result) are applied as they are reported. The current
hour is read afresh every cycle, so results recorded by another process in the current hour count too; another
process's changes to past hours (``db rebuild-rollups`` included) count from the next restart.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from monitor.errors import ConfigError
from monitor.store.base import BUCKET_SECONDS, ResultStore, RollupKey, RollupSums, bucket_of

log = logging.getLogger(__name__)

_UNITS = {"h": 1, "d": 24, "w": 168}
KEEP_EXTRA_HOURS = 7 * 24
"""Rollups older than the longest window by more than this are pruned (``db rebuild-rollups`` restores them)."""
OTHER_AGENT = "other"


@dataclass(frozen=True)
class Window:
    name: str
    hours: int


def parse_window(window: str) -> Window:
    """``"24h"`` → ``Window("24h", 24)``; errors name the setting. Windows are whole hours (the rollups' unit)."""
    unit, number = window[-1:], window[:-1]
    if unit not in _UNITS or not number.isdigit() or int(number) == 0 or int(number) * _UNITS[unit] > 24 * 366:
        raise ConfigError("settings", "metrics.windows",
                          f"{window!r} is not a window of whole hours like 1h, 24h, 7d or 2w (at most a year)")
    return Window(window, int(number) * _UNITS[unit])


def _add(totals: dict[RollupKey, list[float]], key: RollupKey, sums: RollupSums, sign: int) -> None:
    entry = totals.get(key)
    if entry is None:
        entry = totals[key] = [0.0, 0.0, 0.0, 0.0]
    for i in range(4):
        entry[i] += sign * sums[i]
    if sign < 0 and entry[0] <= 0 and entry[2] <= 0:
        del totals[key]  # nothing left of it in the window: its series go


class WindowTotals:
    """Per window, the rollup sums of every (rubric, version, agent, dimension) with results in it."""

    def __init__(self, windows: Sequence[Window]) -> None:
        self.windows = tuple(windows)
        self._bucket: int | None = None
        self._closed: dict[str, dict[RollupKey, list[float]]] = {w.name: {} for w in self.windows}
        self._current: dict[RollupKey, RollupSums] = {}

    @property
    def longest(self) -> Window | None:
        return max(self.windows, key=lambda w: w.hours, default=None)

    def refresh(self, store: ResultStore, now_ts: float) -> None:
        """Bring every window to the hour of ``now_ts``: one read of the current hour, plus two per window when
        the hour has turned."""
        bucket = bucket_of(now_ts)
        with store.rollups_frozen():
            changes = store.drain_rollup_changes()
            last = self._bucket
            longest = self.longest
            if (last is None or changes.overflowed or bucket < last or longest is None
                    or bucket - last > min(w.hours for w in self.windows) * BUCKET_SECONDS):
                self._reload(store, bucket)
            else:
                for change_bucket, key, sums in changes.changes:
                    self._apply_late(last, change_bucket, key, sums)
                if bucket > last:
                    self._turn(store, last, bucket)
                self._current = store.rollup_sums(bucket, bucket)
            self._bucket = bucket
        if last is not None and bucket > last and longest is not None:
            store.prune_rollups(bucket - (longest.hours + KEEP_EXTRA_HOURS) * BUCKET_SECONDS)

    def _reload(self, store: ResultStore, bucket: int) -> None:
        for window in self.windows:
            closed = store.rollup_sums(bucket - window.hours * BUCKET_SECONDS, bucket - BUCKET_SECONDS)
            self._closed[window.name] = {key: list(sums) for key, sums in closed.items()}
        self._current = store.rollup_sums(bucket, bucket)

    def _apply_late(self, last: int, change_bucket: int, key: RollupKey, sums: RollupSums) -> None:
        if change_bucket >= last:
            return  # the current hour (or a later one) is read from the store
        for window in self.windows:
            if change_bucket >= last - window.hours * BUCKET_SECONDS:
                _add(self._closed[window.name], key, sums, 1)

    def _turn(self, store: ResultStore, last: int, bucket: int) -> None:
        entered = store.rollup_sums(last, bucket - BUCKET_SECONDS)
        for window in self.windows:
            closed = self._closed[window.name]
            span = window.hours * BUCKET_SECONDS
            for key, sums in entered.items():
                _add(closed, key, sums, 1)
            for key, sums in store.rollup_sums(last - span, bucket - span - BUCKET_SECONDS).items():
                _add(closed, key, sums, -1)

    def sums(self, window: Window) -> Iterator[tuple[RollupKey, RollupSums]]:
        """Closed hours plus the current one, per key with results (a superseded result leaves rows of zeros)."""
        closed = self._closed.get(window.name, {})
        for key, entry in closed.items():
            extra = self._current.get(key, (0, 0, 0, 0.0))
            sums = (round(entry[0] + extra[0]), round(entry[1] + extra[1]), round(entry[2] + extra[2]),
                    entry[3] + extra[3])
            if sums[0] > 0 or sums[2] > 0:
                yield key, sums
        for key, sums in self._current.items():
            if key not in closed and (sums[0] > 0 or sums[2] > 0):
                yield key, sums


class AgentLabels:
    """At most ``limit`` agents per rubric get their own label; later ones are ``other``. Agents are admitted
    first come (the busiest first when seeded from the rollups at start) and keep their label until restart."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tracked: dict[str, set[str]] = {}
        self._known: dict[tuple[str, str], str] = {}

    def seed(self, counts: dict[tuple[str, str], float]) -> None:
        for (rubric, agent), _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            self.label(rubric, agent)

    def label(self, rubric: str, agent: str) -> str:
        known = self._known.get((rubric, agent))
        if known is not None:
            return known
        tracked = self._tracked.setdefault(rubric, set())
        label = OTHER_AGENT
        if agent in tracked or len(tracked) < self.limit:
            tracked.add(agent)
            label = agent
        if len(self._known) < 100 * self.limit * max(1, len(self._tracked)):
            self._known[(rubric, agent)] = label  # bounded: agent names beyond the limit may be unbounded
        return label
