"""Schema migrations on SQLite and PostgreSQL: head equals the code's metadata, a database made by release 0.1.0
(with data) upgrades without losing a row, a database behind is refused with one line unless migrate is auto."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from monitor.models import DimensionScore, EvaluationResult, SpanRecord
from monitor.store import SqlStore, migrate
from monitor.store.tables import metadata
from tests.conftest import REPO
from tests.helpers import fresh_postgres, judge_config, require_postgres, run_cli, write_config
from tests.legacy import store_0_1_0 as legacy

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'store.db'}" if request.param == "sqlite" else fresh_postgres(require_postgres())


def schema_diff(url: str) -> list[Any]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata))
    finally:
        engine.dispose()


def test_migrations_at_head_produce_exactly_the_metadata(url: str) -> None:
    SqlStore(url).close()
    assert schema_diff(url) == []
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        assert migrate.state(conn).current == migrate.head()
    engine.dispose()


def test_every_revision_upgrades_one_step_at_a_time(url: str) -> None:
    engine = sqlalchemy.create_engine(url)
    try:
        for revision, _, _ in migrate.history():
            migrate.upgrade(engine, revision)
            with engine.connect() as conn:
                assert migrate.state(conn).current == revision
    finally:
        engine.dispose()
    assert schema_diff(url) == []


def _span(span_id: str, trace: str, at: float, conversation: str) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=span_id, start_time=T0 + timedelta(seconds=at),
                      attributes={"gen_ai.conversation.id": conversation, "gen_ai.agent.name": "agent-a"})


def _result(conversation: str, outcome: str, score: float | None) -> EvaluationResult:
    return EvaluationResult(
        conversation_id=conversation, agent="agent-a", rubric="r", rubric_version="v1", rubric_kind="weighted",
        judge_model="m", outcome=outcome, score=score,
        dimension_scores=(DimensionScore(id="d0", score=4, applicable=True, weight=3),
                          DimensionScore(id="d1", score=2, applicable=True, weight=1)),
        evaluated_at=T0 + timedelta(minutes=30),
    )


def _fill_with_release_0_1_0(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """A database as release 0.1.0 left it: created by its own code (``create_all``), with data in every table.
    Returns every row of every table."""
    old = legacy.SqlStore(url)
    old.add_spans("otlp_file", [_span("s1", "t1", 0, "conv-1"), _span("s2", "t1", 5, "conv-1"),
                                _span("s3", "t2", 10, "conv-2")], '{"offsets": {"a.jsonl": 120}}', "ignore")
    assert old.record(_result("conv-1", "pass", 0.7))
    assert old.record(_result("conv-2", "unscored", None))
    old.mark_scored("conv-1", 0)
    old.record_failure("conv-2", "r", 0)
    old.add_usage("r", date(2026, 11, 1), 1200, 0.25)
    old.cache_items("items-key", '{"items": ["a"]}')
    old.close()
    return _dump(url, legacy.metadata)


def _dump(url: str, tables: sqlalchemy.MetaData) -> dict[str, list[tuple[Any, ...]]]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return {name: sorted(tuple(row) for row in conn.execute(sqlalchemy.select(*table.columns)))
                    for name, table in tables.tables.items()}
    finally:
        engine.dispose()


def test_a_release_0_1_0_database_upgrades_with_nothing_lost(url: str) -> None:
    before = _fill_with_release_0_1_0(url)
    assert all(before.values()), "every table of the old release holds rows"
    with pytest.raises(migrate.SchemaBehind, match=r"revision 0001, this release needs .*db upgrade"):
        SqlStore(url, migrate="check")

    store = SqlStore(url, migrate="auto")
    try:
        # Every old row is still there, column for column (new columns are extra).
        old_columns = sqlalchemy.MetaData()
        for table in legacy.metadata.tables.values():
            table.to_metadata(old_columns)
        assert _dump(url, old_columns) == before
        # ...and the new code reads it: checkpoint, spans, results, budgets, adaptive items.
        assert store.checkpoint("otlp_file") == '{"offsets": {"a.jsonl": 120}}'
        assert [s.span_id for s in store.spans_of("conv-1")] == ["s1", "s2"]
        assert [(r.conversation_id, r.outcome) for r in store.results()] == [("conv-1", "pass"),
                                                                             ("conv-2", "unscored")]
        assert store.usage("r", date(2026, 11, 1)) == (1200, 0.25)
        assert store.cached_items("items-key") == '{"items": ["a"]}'
        assert store.record_failure("conv-2", "r", 0) == 2
        assert [p.key for p in store.ready_conversations(T0 + timedelta(days=1), T0)] == ["conv-2"]
        # The hourly rollups the windows read were filled from the old results by the migration, exactly as a
        # rebuild from the results makes them.
        rollups = _dump(url, metadata)["quality_rollups"]
        assert ("", 1, 1, 1, 0.7) in [(row[4], *row[5:8], round(row[8], 6)) for row in rollups]
        store.rebuild_rollups()
        assert _dump(url, metadata)["quality_rollups"] == rollups
        # Columns added later are filled from the old results' payloads where they hold the value.
        engine = sqlalchemy.create_engine(url)
        with engine.connect() as conn:
            assert sorted(conn.execute(sqlalchemy.text("SELECT judge_model FROM results")).scalars()) == ["m", "m"]
        engine.dispose()
    finally:
        store.close()
    assert schema_diff(url) == []


def daemon_config(tmp_path: Path, url: str, migrate_mode: str = "check") -> Path:
    (tmp_path / "traces").mkdir(exist_ok=True)
    return write_config(tmp_path / "config.yaml", judge_config(
        "http://127.0.0.1:9/v1", store={"url": url, "migrate": migrate_mode}, metrics={"port": 0},
        source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(REPO / "examples" / "rubrics")}))


def test_the_daemon_refuses_a_database_behind_with_one_line(url: str, tmp_path: Path) -> None:
    engine = sqlalchemy.create_engine(url)
    migrate.upgrade(engine, migrate.BASELINE)
    engine.dispose()
    config = daemon_config(tmp_path, url)

    refused = run_cli(["run", "--once", "--config", str(config)], cwd=tmp_path)
    assert refused.returncode == 2
    errors = [line for line in refused.stderr.splitlines() if " INFO " not in line]
    assert len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr
    lines = [errors[0].removeprefix("rubric-monitor: error: ")]
    assert f"schema is at revision {migrate.BASELINE}, this release needs {migrate.head()}" in lines[0]
    assert "rubric-monitor db upgrade" in lines[0]

    current = run_cli(["db", "current", "--config", str(config)], cwd=tmp_path)
    assert current.returncode == 0 and f"{migrate.BASELINE} (behind head {migrate.head()}" in current.stdout
    upgraded = run_cli(["db", "upgrade", "--config", str(config)], cwd=tmp_path)
    assert upgraded.returncode == 0 and f"{migrate.BASELINE} → {migrate.head()}" in upgraded.stdout
    assert run_cli(["db", "current", "--config", str(config)], cwd=tmp_path).stdout.strip().endswith(
        f"{migrate.head()} (head)")
    assert schema_diff(url) == []


def test_migrate_auto_upgrades_at_start(url: str, tmp_path: Path) -> None:
    engine = sqlalchemy.create_engine(url)
    migrate.upgrade(engine, migrate.BASELINE)
    engine.dispose()
    config = daemon_config(tmp_path, url, "auto")
    ran = run_cli(["run", "--once", "--config", str(config)], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert schema_diff(url) == []


def test_history_lists_every_revision(tmp_path: Path) -> None:
    shown = run_cli(["db", "history"], cwd=tmp_path)
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0].startswith("<base> → 0001")
    assert f"{migrate.head()} (head)" in shown.stdout
