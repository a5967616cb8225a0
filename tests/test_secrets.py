"""Secrets that used to slip past redaction: an inline writeback connection string, a short database password,
the password in ``store.url`` printed by the settings' repr, writeback headers (inline or from a file), a judge
endpoint's error body echoing the key into ``unscored_reason``; and the SQLite file is created owner-only."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.cli.results import _describe
from monitor.evaluators.base import EvaluationContext
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.models import Conversation, EvaluationResult, Message, Part
from monitor.redaction import REDACTED, forget_secrets, redact, remember_secret
from monitor.settings import Settings
from monitor.store.sql import SqlStore
from monitor.writeback import writeback_headers
from tests.fakes.openai_server import ScriptedOpenAIServer, error
from tests.test_injection import match_rubric
from tests.vertex_judging import openai_context


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def test_an_inline_writeback_connection_string_is_redacted() -> None:
    secret = "InstrumentationKey=00000000-1111-2222-3333-444444444444;IngestionEndpoint=https://x.example/"
    Settings.model_validate({"writeback": {"kind": "azure_monitor", "connection_string": secret}})
    assert redact(f"export failed: {secret}") == f"export failed: {REDACTED}"


def test_a_short_password_is_redacted_where_it_stands_alone() -> None:
    Settings.model_validate({"store": {"url": "postgresql+psycopg://monitor:Pw9x!7z@db.example/results"}})
    assert redact("could not connect: password Pw9x!7z rejected") == f"could not connect: password {REDACTED} rejected"
    assert redact("url postgresql://monitor:Pw9x!7z@db") == f"url postgresql://monitor:{REDACTED}@db"


def test_short_secrets_do_not_erase_common_words() -> None:
    remember_secret("abc")  # three characters: nothing worth hiding, and every "abc" would go
    remember_secret("secret")  # six: redacted only as a word of its own, not inside other words
    assert redact("abc secrets secret_key secret") == f"abc secrets secret_key {REDACTED}"


def test_the_store_url_password_is_not_in_the_settings_repr() -> None:
    url = "postgresql+psycopg://monitor:correct-horse-battery@db.example/results"
    settings = Settings.model_validate({"store": {"url": url}})
    assert "correct-horse-battery" not in repr(settings) and "correct-horse-battery" not in repr(settings.store)
    assert str(settings.store.url) == url  # what connects is the real URL


def test_writeback_headers_from_a_file_are_read_and_redacted(tmp_path: Path) -> None:
    headers = tmp_path / "headers"
    headers.write_text("Authorization: Bearer token-0123456789abcdef\nX-Scope-OrgID: tenant-7\n")
    settings = Settings.model_validate({"writeback": {"kind": "otlp", "headers_file": str(headers),
                                                      "headers": {"X-Team": "quality"}}})
    assert writeback_headers(settings.writeback) == {
        "X-Team": "quality", "Authorization": "Bearer token-0123456789abcdef", "X-Scope-OrgID": "tenant-7"}
    assert REDACTED in redact("sent Bearer token-0123456789abcdef")
    assert "token-0123456789abcdef" not in redact("sent Bearer token-0123456789abcdef")


def test_inline_writeback_headers_are_redacted() -> None:
    Settings.model_validate({"writeback": {"kind": "otlp", "headers": {"Authorization": "Bearer inline-9876543210"}}})
    assert "inline-9876543210" not in redact("header Bearer inline-9876543210")


def test_a_judge_error_body_echoing_the_key_is_redacted_from_the_unscored_reason() -> None:
    key = "sk-test-echoed-0123456789"
    conversation = Conversation(id="c1", agent_name="desk", reference="No table.", messages=(
        Message(role="user", parts=(Part(type="text", content="Book"),)),
        Message(role="assistant", parts=(Part(type="text", content="Booked."),))))

    async def run(server: ScriptedOpenAIServer) -> EvaluationResult:
        async with openai_context(server, api_key=key) as context:
            assert isinstance(context, EvaluationContext)
            [result] = await StaticMetricEvaluator().evaluate(conversation, match_rubric(), context)
            return result

    with ScriptedOpenAIServer(lambda _: error(400, f"Blocked by the content management policy (key {key})",
                                                 "content_filter")) \
            as server:
        result = asyncio.run(run(server))
    assert result.outcome == "unscored" and result.unscored_reason is not None
    assert key not in result.unscored_reason and REDACTED in result.unscored_reason


def test_results_show_redacts_a_reason_stored_before_redaction() -> None:
    remember_secret("sk-stored-0123456789")
    result = EvaluationResult(conversation_id="c1", agent="desk", rubric="r", rubric_version="1",
                              rubric_kind="weighted", judge_model="m", outcome="unscored",
                              unscored_reason="refused: key sk-stored-0123456789 rejected", reason="x",
                              evaluated_at=datetime(2026, 1, 1, tzinfo=UTC))
    shown = _describe(result)
    assert "sk-stored-0123456789" not in shown and REDACTED in shown


def test_the_sqlite_file_and_its_directory_are_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "results.db"
    store = SqlStore(f"sqlite:///{path}")
    store.close()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
