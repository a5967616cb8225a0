"""``evaluate``'s input files (issue 8 item 6): a bad line is a counted rejection naming file and line; every
other line is still read, in the CLI as well."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.formats.input_files import read_input_file
from monitor.formats.otlp import spans_to_otlp_document
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config
from tools.chat_to_otlp import chat_record_to_spans

CHATS = [json.loads(line) for line in (REPO / "examples" / "conversations.jsonl").read_text().splitlines()]
RUBRIC = REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"


def chat(**fields: Any) -> dict[str, Any]:
    return {"id": "bad", "messages": [{"role": "user", "content": "hi"}], **fields}


BAD_CHAT_LINES: list[tuple[str, bytes, str]] = [
    ("tool_calls of strings", json.dumps(chat(messages=[{"role": "assistant", "tool_calls": ["x"]}])).encode(),
     "messages.0.tool_calls.0: must be an object"),
    ("tools with a string function", json.dumps(chat(tools=[{"function": "x"}])).encode(),
     "tools.0.function: must be an object"),
    ("messages a number", json.dumps(chat(messages=5)).encode(), "messages: must be a list"),
    ("name a number", json.dumps(chat(messages=[{"role": "user", "content": "x", "name": 5}])).encode(),
     "messages.0.name: must be a string"),
    ("agent a list", json.dumps(chat(agent=["a"])).encode(), "agent: must be a string"),
    ("reference an object", json.dumps(chat(reference={"a": 1})).encode(), "reference: must be a string"),
    ("tool_call_id a number", json.dumps(chat(messages=[{"role": "tool", "tool_call_id": 7}])).encode(),
     "messages.0.tool_call_id: must be a string"),
    ("parameters a string", json.dumps(chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": "x"}}])).encode(), "tools.0.function.parameters: must be an object"),
    ("nested 10,000 deep", b'{"id": "deep", "messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
     "nested too deeply"),
    ("invalid UTF-8", b'{"id": "latin", "messages": [{"role": "user", "content": "caf\xe9"}]}', "not UTF-8"),
    ("not JSON", b'{"id": ', "not valid JSON"),
]


@pytest.mark.parametrize(("label", "line", "reason"), BAD_CHAT_LINES, ids=[b[0] for b in BAD_CHAT_LINES])
def test_a_bad_chat_line_is_rejected_and_the_rest_is_read(tmp_path: Path, label: str, line: bytes,
                                                          reason: str) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_bytes(json.dumps(CHATS[0]).encode() + b"\n" + line + b"\n" + json.dumps(CHATS[1]).encode() + b"\n")
    read = read_input_file(path)
    assert [c.id for c in read.conversations] == ["conv-booking-ok", "conv-party-too-big"]
    [rejected] = read.rejected
    assert rejected.startswith(f"{path}:2: ") and reason in rejected, rejected


def test_lone_surrogates_in_content_and_id_are_read_as_replacement_characters(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text('{"id": "a\\ud800", "messages": [{"role": "user", "content": "x\\udfff"}]}\n')
    [conversation] = read_input_file(path).conversations
    assert conversation.id == "a\ufffd" and conversation.messages[0].text == "x\ufffd"
    conversation.model_dump_json().encode("utf-8")  # encodes: it can be hashed, stored and sent


def test_invalid_utf8_in_an_otlp_file_loses_only_its_line(tmp_path: Path) -> None:
    lines = [json.dumps(spans_to_otlp_document(chat_record_to_spans(record, n))).encode()
             for n, record in enumerate(CHATS)]
    path = tmp_path / "traces.jsonl"
    path.write_bytes(lines[0] + b"\n" + lines[1].replace(b"Trattoria", b"Tratt\xff", 1) + b"\n" + lines[2] + b"\n")
    read = read_input_file(path)
    assert sorted(c.id for c in read.conversations) == ["conv-booking-ok", "conv-cancel"]
    assert len(read.rejected) == 1 and read.rejected[0].startswith(f"{path}:2: not UTF-8")


def test_evaluate_scores_the_readable_lines_and_names_the_others(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_bytes(b"\n".join([json.dumps(CHATS[0]).encode(), b'{"id": "x", "messages": 5}', b"\xff\xfe",
                                 json.dumps(CHATS[2]).encode()]) + b"\n")
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(path), "--config", str(config)],
                       tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert [json.loads(line)["conversation_id"] for line in done.stdout.splitlines()] == [
        "conv-booking-ok", "conv-cancel"]
    assert f"{path}:2: line rejected: messages: must be a list" in done.stderr
    assert f"{path}:3: line rejected: not UTF-8" in done.stderr
    assert "2 line(s) rejected, 2 conversation(s) read" in done.stderr
