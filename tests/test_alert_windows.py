"""The windows' counts, kept between cycles, are at every cycle what counting the stored results by hand gives: after
new results (written by another store object on the same database, as another replica or process would), results
dated in the future, superseded revisions, results removed by retention, and time moving on."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.alerts.detector import Counts, JudgeConfig, SeriesCounts
from monitor.alerts.store import AlertStore
from monitor.alerts.windows import SPARE_KEYS, WindowCounts
from monitor.models import DimensionScore, EvaluationResult
from monitor.store import retention
from monitor.store.base import RetentionPolicy
from monitor.store.sql import SqlStore
from tests.helpers import fresh_postgres, require_postgres

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PLAN = (("1h", 3600.0), ("24h", 86400.0), ("3d", 3 * 86400.0))
BASELINE = 2 * 86400.0
Key = tuple[str, str, JudgeConfig, str | None]


def hand_count(results: list[EvaluationResult], now: datetime) -> list[tuple[str, dict[Key, tuple[Counts, Counts]]]]:
    """Per window of ``PLAN``, the counts of ``results`` (the current ones) as the detector defines them."""
    out = []
    until = now.timestamp()
    for name, seconds in PLAN:
        start = until - seconds
        expected: dict[Key, tuple[Counts, Counts]] = {}
        for result in results:
            ts = result.evaluated_at.timestamp()
            if not start - BASELINE <= ts <= until:
                continue
            key = (result.rubric, result.agent,
                   JudgeConfig(result.rubric_version, result.judge_model, result.prompt_version or ""),
                   result.agent_version)
            pair = expected.setdefault(key, (Counts(), Counts()))
            side = pair[0] if ts >= start else pair[1]
            side.passed += result.outcome == "pass"
            side.failed += result.outcome == "fail"
            side.unscored += result.outcome == "unscored"
            side.judge_errors += (result.unscored_reason or "").startswith("judge_error")
            side.first_ts, side.last_ts = min(side.first_ts, ts), max(side.last_ts, ts)
            for dimension in result.dimension_scores:
                if dimension.applicable and dimension.score is not None and result.outcome != "unscored":
                    side.dimensions.setdefault(dimension.id, [0] * 5)[int(dimension.score) - 1] += 1
        out.append((name, expected))
    return out


def as_read(read: list[tuple[str, list[SeriesCounts]]]) -> list[tuple[str, dict[Key, tuple[Counts, Counts]]]]:
    out = []
    for name, series in read:
        keys = [(s.rubric, s.agent, s.config, s.agent_version) for s in series]
        assert len(set(keys)) == len(keys), f"{name}: a configuration read twice"
        out.append((name, {key: (s.current, s.baseline) for key, s in zip(keys, series, strict=True)}))
    return out


def a_result(rng: random.Random, number: int, at: datetime, revision: int = 0) -> EvaluationResult:
    outcome = rng.choice(["pass", "pass", "fail", "unscored"])
    return EvaluationResult(
        conversation_id=f"c{number}", agent=rng.choice(["a", "b"]), rubric=rng.choice(["r", "s"]),
        rubric_version="1", rubric_kind="weighted", judge_model=rng.choice(["m1", "m2"]),
        prompt_version=rng.choice(["1", None]), agent_version=rng.choice([None, "v1", "v2"]), outcome=outcome,
        score=None if outcome == "unscored" else rng.random(),
        unscored_reason=rng.choice(["judge_error: timeout", "empty conversation"]) if outcome == "unscored" else None,
        evaluated_at=at, revision=revision,
        dimension_scores=tuple(DimensionScore(id=d, score=rng.randint(1, 5), applicable=rng.random() < 0.8, weight=1)
                               for d in ("x", "y", "z")[:rng.randint(0, 3)]))


@dataclass
class World:
    """A store written by one object (another replica, as far as the reader knows) and read by another."""

    writer: SqlStore
    reader: AlertStore
    rng: random.Random
    now: datetime = NOW
    results: dict[str, EvaluationResult] = field(default_factory=dict)
    """The current result of each conversation."""
    recorded: int = 0

    def record(self, count: int) -> None:
        for _ in range(count):
            number = self.recorded = self.recorded + 1
            # Most within the windows and baselines, some older, some dated in the future (a skewed clock).
            at = self.now - timedelta(minutes=self.rng.uniform(-90, 4 * 24 * 60))
            result = a_result(self.rng, number, at)
            assert self.writer.record(result)
            self.results[result.conversation_id] = result

    def supersede(self, count: int) -> None:
        for conversation in self.rng.sample(sorted(self.results), min(count, len(self.results))):
            old = self.results[conversation]
            at = self.now - timedelta(minutes=self.rng.uniform(0, 30))
            # A new revision of the same conversation and rubric (the judge, prompt or agent version may differ).
            new = a_result(self.rng, int(conversation[1:]), at, old.revision + 1).model_copy(
                update={"rubric": old.rubric, "agent": old.agent})
            assert self.writer.record(new)
            self.results[conversation] = new

    def expire(self, days: float) -> None:
        retention.apply(self.writer, self.now, RetentionPolicy(results_days=days))
        cutoff = (self.now - timedelta(days=days)).timestamp()
        self.results = {k: r for k, r in self.results.items() if r.evaluated_at.timestamp() >= cutoff}

    def check(self) -> None:
        read = self.reader.window_counts(PLAN, BASELINE, self.now)
        assert [name for name, _ in read] == [name for name, _ in PLAN]
        assert as_read(read) == hand_count(list(self.results.values()), self.now)


STEPS = st.lists(st.one_of(
    st.tuples(st.just("record"), st.integers(1, 40)),
    st.tuples(st.just("supersede"), st.integers(1, 10)),
    st.tuples(st.just("advance"), st.integers(1, 6 * 60)),
    st.tuples(st.just("expire"), st.sampled_from([2.5, 3.5])),
), min_size=1, max_size=12)


def run_steps(url: str, seed: int, steps: list[tuple[str, int | float]], spare_keys: int = SPARE_KEYS) -> int:
    """Runs the steps, checking the counts after each; returns how many times configurations were forgotten."""
    writer = SqlStore(url)
    windows = WindowCounts(spare_keys=spare_keys)
    world = World(writer, AlertStore(SqlStore(url), windows), random.Random(seed))
    world.record(30)
    world.check()
    for action, amount in steps:
        if action == "record":
            world.record(int(amount))
        elif action == "supersede":
            world.supersede(int(amount))
        elif action == "advance":
            world.now += timedelta(minutes=amount)
        else:
            world.expire(float(amount))
        world.check()
    # Then every result ages out of the windows (every configuration is left unheld), and new ones come.
    world.now += timedelta(days=10)
    world.check()
    world.record(30)
    world.check()
    return windows.compactions


@pytest.mark.parametrize("spare", [100, 0], ids=["kept", "forgotten"])
def test_kept_counts_equal_a_hand_count_at_every_cycle_on_sqlite(spare: int) -> None:
    """With ``spare`` 0 the configurations no longer held are forgotten (and the rest renumbered) as soon as they
    outnumber those held, which every example's end makes sure of; with the default never, at this size."""
    compactions: list[int] = []

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(0, 10_000), STEPS)
    def run(seed: int, steps: list[tuple[str, int | float]]) -> None:
        with tempfile.TemporaryDirectory() as folder:
            compactions.append(run_steps(f"sqlite:///{Path(folder) / 'results.db'}", seed, steps, spare_keys=spare))

    run()
    assert bool(sum(compactions)) == (spare == 0)


def test_kept_counts_equal_a_hand_count_at_every_cycle_on_postgres() -> None:
    url = require_postgres()

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(0, 10_000), STEPS)
    def run(seed: int, steps: list[tuple[str, int | float]]) -> None:
        run_steps(fresh_postgres(url), seed, steps)

    run()


def test_the_first_read_of_many_results_fetches_by_range_in_parts_then_by_id(tmp_path: Path) -> None:
    """Past 2,000 new results the first read takes the window's range (in parts of rows, here 700) instead of lists
    of ids; both ways agree."""
    windows = WindowCounts(part_rows=700)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    world = World(SqlStore(url), AlertStore(SqlStore(url), windows), random.Random(7))
    world.record(2500)
    world.check()
    assert len(windows.parts_read) > 3 and max(windows.parts_read) == 700
    world.record(300)
    world.supersede(200)
    world.now += timedelta(minutes=1)
    world.check()
