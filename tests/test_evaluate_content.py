"""``evaluate`` on files with nothing to judge in places: such conversations are skipped as ``no_content`` (said
on stderr, counted), never sent to the judge; the input format is told from more than the first line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config

RUBRIC = REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"
CHATS = REPO / "examples" / "conversations.jsonl"


def test_chat_lines_without_messages_are_skipped_as_no_content(tmp_path: Path) -> None:
    source = tmp_path / "chats.jsonl"
    source.write_text("\n".join(['{"foo": 1}', '{"id": "a", "messages": []}', CHATS.read_text().splitlines()[0],
                                 '{"id": "b", "messages": [{"role": "user", "content": "  "}]}']) + "\n")
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(source), "--config", str(config)],
                       tmp_path)
        assert server.count == 1
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["conversation_id"] for line in done.stdout.splitlines()] == ["conv-booking-ok"]
    assert "3 conversation(s) skipped: no_content" in done.stderr
    assert f"{source}:1" in done.stderr and "'a'" in done.stderr and "'b'" in done.stderr


def test_an_otlp_file_whose_first_line_is_not_a_trace_is_still_read_as_otlp(tmp_path: Path) -> None:
    source = tmp_path / "traces.jsonl"
    source.write_text("{}\n" + (REPO / "examples" / "traces" / "sample.jsonl").read_text())
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(source), "--config", str(config)],
                       tmp_path)
        assert server.count == 3
    assert done.returncode == 0, done.stderr
    ids = {json.loads(line)["conversation_id"] for line in done.stdout.splitlines()}
    assert ids == {"conv-booking-ok", "conv-party-too-big", "conv-cancel"}
    assert "no_content" not in done.stderr
