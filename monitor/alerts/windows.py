"""The counts of every window and its baseline, kept in memory between cycles and brought up to date from the store.

Counting in the database means scanning and grouping every dimension score of the longest window plus its baseline
at every cycle: on SQLite, which groups about 4 µs a row in the daemon's process, 3.2 s a cycle at 100 rubrics x 20
agents x 10 dimensions with 400,000 scores. Here the store is asked only which current results the windows hold
(their ids, one indexed range); the results not seen before are fetched with their scores, those no longer there
are dropped, and each side of each window is counted with ``numpy.bincount`` over the arrays held.

Exact, as a fresh query would be: the ids come from the store every cycle, so a result recorded by another replica
or process, superseded by a new revision, or removed by retention counts (or stops counting) at the next cycle. A
stored result never changes but for its ``current`` flag, which is what the ids follow. One caller at a time (the
daemon's cycle, or one ``rubric-monitor regressions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import and_, select
from sqlalchemy.engine import Connection

from monitor.alerts.detector import Counts, JudgeConfig, SeriesCounts
from monitor.store.tables import dimensions_table, results_table

ConfigKey = tuple[str, str, str, str, str, str | None]
"""(rubric, agent, rubric version, judge model, prompt version, agent version): results counted together."""
PASS, FAIL, UNSCORED, JUDGE_ERROR = range(4)
"""Outcome codes; ``JUDGE_ERROR`` is unscored because the judge could not be reached."""
_OUTCOMES = {"pass": PASS, "fail": FAIL}
_FETCH_BY_ID = 2000
"""Up to this many new results are fetched by id; more (the first cycle) by the window's range."""
_CHUNK = 500
"""Ids per ``IN`` list: within every SQLite build's limit of bound parameters."""
PART_ROWS = 100_000
"""Rows converted to arrays at a time in a first read."""
SPARE_KEYS = 100
"""Configurations no longer held are forgotten once they outnumber those held by this many."""

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


def _among(rows: Sequence[Any], ids: Ints) -> list[Any]:
    """The rows (id first) whose id is one of ``ids``."""
    if not rows:
        return []
    found = np.isin(np.fromiter((row[0] for row in rows), np.int64, len(rows)), ids)
    return [row for row, keep in zip(rows, found.tolist(), strict=True) if keep]


def _outcome(outcome: str, unscored_reason: str | None) -> int:
    if outcome in _OUTCOMES:
        return _OUTCOMES[outcome]
    return JUDGE_ERROR if (unscored_reason or "").startswith("judge_error") else UNSCORED


class WindowCounts:
    """The current results of the longest window plus its baseline, as arrays: ``refresh`` brings them up to date
    with the store, ``count`` counts every side of every window."""

    def __init__(self, part_rows: int = PART_ROWS, spare_keys: int = SPARE_KEYS) -> None:
        self.part_rows = part_rows
        """Rows converted to arrays at a time in a first read."""
        self.spare_keys = spare_keys
        """Configurations no longer held are forgotten once they outnumber those held by this many."""
        self.parts_read: list[int] = []
        """The rows of each part of scores converted to arrays by the last read, in order."""
        self.compactions = 0
        """How many times configurations no longer held were forgotten."""
        self._keys: dict[ConfigKey, int] = {}
        self._key_list: list[ConfigKey] = []
        self._pairs: dict[tuple[int, str], int] = {}
        """(key index, dimension) → pair index: a dimension's scores are counted per configuration."""
        self._pair_list: list[tuple[int, str]] = []
        self._laid_out: _Layout | None = None
        # One entry per result held (r_*) and per dimension score of those results (d_*). A score repeats its
        # result's time (d_ts): a side's scores are then one mask, with no lookup of their results per cycle.
        self.r_id: Ints = np.empty(0, np.int64)
        self.r_key: Ints = np.empty(0, np.int64)
        self.r_ts: Floats = np.empty(0, np.float64)
        self.r_outcome: Ints = np.empty(0, np.int64)
        self.d_result: Ints = np.empty(0, np.int64)
        self.d_pair: Ints = np.empty(0, np.int64)
        self.d_ts: Floats = np.empty(0, np.float64)
        self.d_score: Ints = np.empty(0, np.int64)

    # bringing the arrays up to date --------------------------------------------------------------------------------

    def refresh(self, conn: Connection, since: float, until: float) -> tuple[int, int]:
        """Hold exactly the current results with ``since <= evaluated_ts <= until``; returns (fetched, dropped)."""
        r = results_table.c
        held = and_(r.current.is_(True), r.evaluated_ts >= since, r.evaluated_ts <= until)
        # The ids come from the partial index of current results by time (``CURRENT_BY_TIME``) without reading the
        # table, and straight from the driver's cursor: plain integers, 40,000 a cycle at 100 rubrics x 20 agents,
        # which SQLAlchemy's rows would triple the cost of.
        rows = conn.execute(select(r.id).where(held)).cursor.fetchall()
        ids = np.fromiter(chain.from_iterable(rows), np.int64, len(rows))
        dropped = self._keep(ids)
        new = np.setdiff1d(ids, self.r_id, assume_unique=True)
        if len(new):
            self._fetch(conn, new, since, until)
        return len(new), dropped

    def _keep(self, ids: Ints) -> int:
        kept = np.isin(self.r_id, ids, assume_unique=True)
        dropped = int(len(kept) - np.count_nonzero(kept))
        if dropped:
            self.r_id, self.r_key, self.r_ts, self.r_outcome = (
                self.r_id[kept], self.r_key[kept], self.r_ts[kept], self.r_outcome[kept])
            scores = np.isin(self.d_result, self.r_id)
            self.d_result, self.d_pair, self.d_ts, self.d_score = (
                self.d_result[scores], self.d_pair[scores], self.d_ts[scores], self.d_score[scores])
            if len(self._key_list) > 2 * len(np.unique(self.r_key)) + self.spare_keys:
                self._compact()
        return dropped

    def _fetch(self, conn: Connection, new: Ints, since: float, until: float) -> None:
        r, d = results_table.c, dimensions_table.c
        result_columns = (r.id, r.rubric, r.agent, r.rubric_version, r.judge_model, r.prompt_version,
                          r.agent_version, r.evaluated_ts, r.outcome, r.unscored_reason)
        score_columns = (d.result_id, d.dimension, d.score)
        # A result's scores are fetched by its id (or range), without asking whether it is still current: it was
        # when its id was read, and a result superseded since drops out at the next cycle, scores and all. Rows
        # come in parts, so a first read of millions of scores never holds them all as Python rows.
        streamed = conn.execution_options(yield_per=self.part_rows)
        self.parts_read = []  # the last read's only: the daemon reads every cycle
        if len(new) > _FETCH_BY_ID:
            in_range = and_(r.evaluated_ts >= since, r.evaluated_ts <= until)
            result_parts: Iterable[Sequence[Any]] = streamed.execute(
                select(*result_columns).where(and_(r.current.is_(True), in_range))).partitions()
            score_parts: Iterable[Sequence[Any]] = streamed.execute(select(*score_columns).where(
                and_(d.evaluated_ts >= since, d.evaluated_ts <= until))).partitions()
        else:
            chunks = [new[start:start + _CHUNK].tolist() for start in range(0, len(new), _CHUNK)]
            result_parts = (conn.execute(select(*result_columns).where(r.id.in_(chunk))).all() for chunk in chunks)
            score_parts = (conn.execute(select(*score_columns).where(d.result_id.in_(chunk))).all()
                           for chunk in chunks)
        r_id, r_key, r_ts, r_outcome = [], [], [], []
        for part in result_parts:
            # Rows recorded after the ids were read are left to the next cycle, like any new result.
            for (result_id, rubric, agent, version, judge_model, prompt_version, agent_version, ts, outcome,
                 reason) in _among(part, new):
                r_id.append(result_id)
                r_key.append(self._key((str(rubric), str(agent), str(version), str(judge_model or ""),
                                        str(prompt_version or ""),
                                        None if agent_version is None else str(agent_version))))
                r_ts.append(float(ts))
                r_outcome.append(_outcome(str(outcome), reason))
        ids, keys, times = np.array(r_id, np.int64), np.array(r_key, np.int64), np.array(r_ts, np.float64)
        self.r_id = np.concatenate((self.r_id, ids))
        self.r_key = np.concatenate((self.r_key, keys))
        self.r_ts = np.concatenate((self.r_ts, times))
        self.r_outcome = np.concatenate((self.r_outcome, np.array(r_outcome, np.int64)))
        if not len(ids):
            return
        order = np.argsort(ids)
        for part in score_parts:
            if part:
                self._add_scores(part, ids, order, keys, times)

    def _add_scores(self, rows: Sequence[Any], ids: Ints, order: Ints, keys: Ints, times: Floats) -> None:
        """Scores as arrays: each one's result found by a binary search among the new ones (``ids`` sorted by
        ``order``), its (configuration, dimension) pair numbered once per distinct pair rather than per score."""
        self.parts_read.append(len(rows))
        result_ids, dimensions, scores = zip(*rows, strict=True)
        owners = np.array(result_ids, np.int64)
        position = order[np.minimum(np.searchsorted(ids, owners, sorter=order), len(ids) - 1)]
        mine = ids[position] == owners  # the scores of other results in the range: not new, or not current
        names = sorted(set(dimensions))
        name_index = {name: index for index, name in enumerate(names)}
        dimension_codes = np.fromiter(map(name_index.__getitem__, dimensions), np.int64, len(dimensions))
        distinct, inverse = np.unique(keys[position[mine]] * len(names) + dimension_codes[mine], return_inverse=True)
        pair_of = np.array([self._pair(code // len(names), str(names[code % len(names)]))
                            for code in distinct.tolist()], np.int64)
        self.d_result = np.concatenate((self.d_result, owners[mine]))
        self.d_pair = np.concatenate((self.d_pair, pair_of[inverse.reshape(-1)]))
        self.d_ts = np.concatenate((self.d_ts, times[position[mine]]))
        self.d_score = np.concatenate((self.d_score, np.array(scores, np.int64)[mine]))

    def _key(self, key: ConfigKey) -> int:
        index = self._keys.get(key)
        if index is None:
            index = self._keys[key] = len(self._key_list)
            self._key_list.append(key)
        return index

    def _pair(self, key: int, dimension: str) -> int:
        index = self._pairs.get((key, dimension))
        if index is None:
            index = self._pairs[(key, dimension)] = len(self._pair_list)
            self._pair_list.append((key, dimension))
        return index

    def _compact(self) -> None:
        """Forget configurations no longer held (agent versions come and go), renumbering the rest."""
        self.compactions += 1
        used = np.unique(self.r_key)
        key_map = np.full(len(self._key_list), -1, np.int64)
        key_map[used] = np.arange(len(used))
        self._key_list = [self._key_list[k] for k in used.tolist()]
        self._keys = {key: index for index, key in enumerate(self._key_list)}
        pairs_used = np.unique(self.d_pair)
        pair_map = np.full(len(self._pair_list), -1, np.int64)
        pair_map[pairs_used] = np.arange(len(pairs_used))
        self._pair_list = [(int(key_map[self._pair_list[p][0]]), self._pair_list[p][1]) for p in pairs_used.tolist()]
        self._pairs = {pair: index for index, pair in enumerate(self._pair_list)}
        self.r_key = key_map[self.r_key]
        self.d_pair = pair_map[self.d_pair]
        self._laid_out = None

    # counting ------------------------------------------------------------------------------------------------------

    def count(self, windows: Sequence[tuple[str, float]], baseline_seconds: float, until: float
              ) -> list[tuple[str, list[SeriesCounts]]]:
        """Per window (name, seconds) and per configuration with results in it or in its baseline: the counts of
        the window (``until - seconds <= evaluated_ts``) and of the baseline period before it."""
        layout = self._layout()
        out = []
        for name, seconds in windows:
            start = until - seconds
            since = start - baseline_seconds
            current = self._side(self.r_ts >= start, self.d_ts >= start, layout)
            baseline = self._side((self.r_ts >= since) & (self.r_ts < start),
                                  (self.d_ts >= since) & (self.d_ts < start), layout)
            series = []
            for k in layout.order:
                now, before = current[k], baseline[k]
                if now is None and before is None:
                    continue  # no result in this window or its baseline: not a series of this window
                rubric, agent, version, judge_model, prompt_version, agent_version = self._key_list[k]
                series.append(SeriesCounts(rubric, agent, JudgeConfig(version, judge_model, prompt_version),
                                           agent_version, now or Counts(), before or Counts()))
            out.append((name, series))
        return out

    def _layout(self) -> _Layout:
        """Made again only when a configuration or a pair was added or forgotten."""
        shape = (len(self._key_list), len(self._pair_list))
        if self._laid_out is None or self._laid_out.shape != shape:
            by_pair = sorted(range(len(self._pair_list)), key=lambda p: self._pair_list[p])
            bounds = [0] * (len(self._key_list) + 1)
            for key, _ in self._pair_list:
                bounds[key + 1] += 1
            for k in range(len(self._key_list)):
                bounds[k + 1] += bounds[k]
            self._laid_out = _Layout(
                shape, sorted(range(len(self._key_list)), key=lambda k: _sort_key(self._key_list[k])),
                np.array(by_pair, np.int64), bounds, [self._pair_list[p][1] for p in by_pair])
        return self._laid_out

    def _side(self, results: npt.NDArray[np.bool_], scores: npt.NDArray[np.bool_], layout: _Layout
              ) -> list[Counts | None]:
        """Per configuration, its Counts on one side (None: no result there)."""
        keys = len(self._key_list)
        key, ts = self.r_key[results], self.r_ts[results]
        outcomes = np.bincount(key * 4 + self.r_outcome[results], minlength=keys * 4).reshape(keys, 4)
        held: list[bool] = (outcomes.sum(axis=1) > 0).tolist()
        first = np.full(keys, np.inf)
        np.minimum.at(first, key, ts)
        last = np.full(keys, -np.inf)
        np.maximum.at(last, key, ts)
        by_score = np.bincount(self.d_pair[scores] * 5 + self.d_score[scores] - 1,
                               minlength=len(self._pair_list) * 5).reshape(-1, 5)[layout.by_pair]
        # Per configuration, how many of its dimensions have scores on this side: all of them (the usual case) makes
        # its dictionary in one step.
        scored = by_score.sum(axis=1) > 0
        scored_before = np.concatenate(([0], np.cumsum(scored))).tolist()
        scored_list: list[bool] = scored.tolist()
        rows, bounds, dimensions = by_score.tolist(), layout.bounds, layout.dimensions
        firsts, lasts = first.tolist(), last.tolist()
        out: list[Counts | None] = []
        for k, (passed, failed, unscored, judge_errors) in enumerate(outcomes.tolist()):
            if not held[k]:
                out.append(None)
                continue
            low, high = bounds[k], bounds[k + 1]
            if scored_before[high] - scored_before[low] == high - low:
                by_dimension = dict(zip(dimensions[low:high], rows[low:high], strict=True))
            else:
                by_dimension = {dimensions[p]: rows[p] for p in range(low, high) if scored_list[p]}
            out.append(Counts(passed, failed, unscored + judge_errors, judge_errors, firsts[k], lasts[k],
                              by_dimension))
        return out


@dataclass(frozen=True)
class _Layout:
    """How the arrays map to series: the configurations in the order of their series, and the pairs sorted by
    (configuration, dimension), so that a configuration's dimensions are one slice."""

    shape: tuple[int, int]
    """(configurations, pairs) when made."""
    order: list[int]
    by_pair: Ints
    """Pair numbers in (configuration, dimension) order."""
    bounds: list[int]
    """Configuration k's pairs are ``by_pair[bounds[k]:bounds[k + 1]]``."""
    dimensions: list[str]
    """The dimension of each pair, in ``by_pair`` order."""


def _sort_key(key: ConfigKey) -> tuple[str, str, str, str, str, bool, str]:
    rubric, agent, version, judge_model, prompt_version, agent_version = key
    return (rubric, agent, version, judge_model, prompt_version, agent_version is not None, agent_version or "")
