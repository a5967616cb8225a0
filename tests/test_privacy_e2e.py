"""Personal data stays where it was, end to end: the daemon's stages (OTLP file source, the real ``openai`` client
against a scripted judge on 127.0.0.1, SQLite store, OTLP write-back to a local receiver) score the privacy corpus
(tests/data/privacy) with a judge that quotes the conversation back in every text field it writes. Then every
captured judge request, every byte of every stored table, every write-back event, the alerts' failing examples
and every log line are searched for the corpus's raw values.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.alerts.events import example_dicts
from monitor.alerts.store import AlertStore
from monitor.app import Monitor, build_monitor
from monitor.formats.otlp import spans_to_otlp_document
from monitor.privacy.logs import install_personal_data_filter
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.fakes.telemetry import OtlpLogsReceiver
from tests.helpers import judge_config
from tools.chat_to_otlp import chat_record_to_spans

CORPUS = REPO / "tests" / "data" / "privacy"
VALUES: dict[str, dict[str, str]] = json.loads((CORPUS / "values.json").read_text(encoding="utf-8"))
RAW = VALUES["redacted"]
KEPT = VALUES["kept"]
RECORDS = [json.loads(line) for line in (CORPUS / "conversations.jsonl").read_text(encoding="utf-8").splitlines()]


def raw_forms() -> dict[str, str]:
    """Each raw value as written, and numbers also as bare digits (how a tool or the store might re-format them)."""
    forms = dict(RAW)
    for name, value in RAW.items():
        digits = "".join(ch for ch in value if ch.isdigit())
        if name.startswith(("card", "iban", "phone")) and digits.isascii() and len(digits) >= 8:
            forms[f"{name} (digits)"] = digits
    return forms


def leaks(text: str) -> list[str]:
    return sorted(name for name, value in raw_forms().items() if value in text or value.lower() in text.lower())


def quoting_judge(request: Recorded) -> Reply:
    """Answers any request by its JSON schema, writing into every text field the lines of the prompt that carry
    a value (what a judge quoting the transcript in its reasons would do), and failing every verdict it can."""
    prompt = request.prompt_text
    lines = [line for line in prompt.splitlines() if "@" in line or "<" in line or any(c.isdigit() for c in line)]
    quote = " | ".join(lines)[-1500:]
    schema = ((request.body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return completion(json.dumps(_fill(schema, quote), ensure_ascii=False))


def _fill(schema: dict[str, Any], quote: str) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if "enum" in schema:
        options = [o for o in schema["enum"] if o is not None]
        return options[-1] if options else None
    if kind == "object":
        return {name: _fill(sub, quote) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [_fill(schema.get("items") or {}, quote) for _ in range(max(3, schema.get("minItems", 1)))]
    if kind == "string":
        return quote
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    return None


RUBRICS = {
    "weighted.yaml": {
        "name": "support-quality", "kind": "weighted", "sampling_rate": 1.0,
        "description": f"Quality of the assistants; escalations to {KEPT['allowed_email']}.",
        "dimensions": [{"id": "accuracy", "description": "Gets the account details right.", "weight": 5}],
    },
    "adaptive.yaml": {"name": "task-quality", "kind": "adaptive", "sampling_rate": 1.0, "samples": 1},
    "safety.yaml": {"name": "safety", "kind": "safety", "sampling_rate": 1.0},
}


def write_corpus(directory: Path) -> None:
    directory.mkdir()
    lines = []
    for number, record in enumerate(RECORDS):
        lines.append(json.dumps(spans_to_otlp_document(chat_record_to_spans(record, number)), ensure_ascii=False))
    (directory / "traces.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_rubrics(directory: Path) -> None:
    directory.mkdir()
    for name, rubric in RUBRICS.items():
        (directory / name).write_text(json.dumps(rubric), encoding="utf-8")


@pytest.fixture(autouse=True)
def no_filter_left_behind() -> Iterator[None]:
    yield
    install_personal_data_filter(None)


def run_daemon(tmp_path: Path, judge_url: str, receiver: OtlpLogsReceiver, **sections: Any) -> Monitor:
    write_corpus(tmp_path / "traces")
    write_rubrics(tmp_path / "rubrics")
    settings = Settings(**judge_config(
        judge_url, source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(tmp_path / "rubrics")},
        store={"url": f"sqlite:///{tmp_path / 'store.db'}", **sections.pop("store", {})},
        conversation={"idle_timeout_seconds": 0, "max_age_seconds": 1},
        writeback={"kind": "otlp", "endpoint": receiver.endpoint, "timeout_seconds": 5}, **sections))
    monitor = build_monitor(settings)
    monitor.run_cycle()
    monitor.run_cycle()  # the spans of conversations marked scored in the first are stripped by then
    return monitor


def every_stored_byte(path: Path) -> str:
    """Every value of every row of every table of the SQLite store, as text."""
    connection = sqlite3.connect(path)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        chunks = []
        for table in tables:
            for row in connection.execute(f'SELECT * FROM "{table}"'):  # names from sqlite_master
                chunks.extend(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in row)
        return "\n".join(chunks)
    finally:
        connection.close()


def notifications(monitor: Monitor) -> str:
    """The failing examples an alert on each (rubric, agent) would carry, as the webhook and Slack send them."""
    alerts = AlertStore(monitor.store)
    found = []
    for result in monitor.store.results():
        found.extend(example_dicts(alerts.examples(result.rubric, result.agent, None, 0.0), None))
    assert found, "no failing example: the test would search nothing"
    return json.dumps(found, ensure_ascii=False)


def test_with_redaction_on_no_raw_value_reaches_the_judge_the_store_events_notifications_or_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    redaction = {"enabled": True, "allow": [KEPT["allowed_email"]]}
    with ScriptedOpenAIServer(quoting_judge) as judge, OtlpLogsReceiver() as receiver:
        monitor = run_daemon(tmp_path, judge.base_url, receiver, redaction=redaction)
        # Something logs conversation text (an error quoting a reply, say): the line is redacted too.
        logging.getLogger("monitor.pipeline").warning("reply was %s", RECORDS[0]["messages"][1]["content"])
        requests = [json.dumps(r.body, ensure_ascii=False) for r in judge.requests]
        results = monitor.store.results()
        notified = notifications(monitor)
        registry = monitor.registry
        monitor.close()
    assert len(requests) >= 9 and {r.conversation_id for r in results} == {r["id"] for r in RECORDS}
    assert {r.rubric for r in results} == {"support-quality", "task-quality", "safety"}
    events = json.dumps([record for record in receiver.records], ensure_ascii=False, default=str)
    assert len(receiver.records) == len(results)
    surfaces = {"judge requests": "\n".join(requests), "store": every_stored_byte(tmp_path / "store.db"),
                "write-back events": events, "notifications": notified, "logs": caplog.text}
    for surface, text in surfaces.items():
        assert leaks(text) == [], (f"raw values in the {surface}", _debug_leaks(text)[:3])
    # The judge saw placeholders where the values were (escaped like all transcript text), and the values
    # meant to stay.
    joined = surfaces["judge requests"].replace("&lt;", "<").replace("&gt;", ">")
    for placeholder in ("<EMAIL_1>", "<CARD_1>", "<PHONE_1>", "<IBAN_1>", "<IP_1>", "<SECRET_1>"):
        assert placeholder in joined
    for kept in KEPT.values():
        assert kept in joined, kept
    assert "<EMAIL_1>" in caplog.text.split("reply was")[-1]
    assert "redaction on: recognizers secret, secret_after_keyword, email" in caplog.text  # said at start
    assert (registry.get_sample_value("rubric_monitor_redactions_total", {"recognizer": "card"}) or 0) >= 6
    # A stored verdict says what was redacted (counts, never values).
    assert results[0].details["redacted"]


def test_with_content_storage_off_no_conversation_text_is_stored_sent_or_notified(tmp_path: Path) -> None:
    """Redaction off, ``store.store_content: false`` and ``drop_span_content``: the judge's quotes of the transcript
    (reasons, safety excerpts, adaptive items) and the span payloads leave nothing of the conversation behind."""
    with ScriptedOpenAIServer(quoting_judge) as judge, OtlpLogsReceiver() as receiver:
        monitor = run_daemon(tmp_path, judge.base_url, receiver,
                             store={"store_content": False, "drop_span_content": True})
        requests = "\n".join(json.dumps(r.body, ensure_ascii=False) for r in judge.requests)
        results = monitor.store.results()
        notified = notifications(monitor)
        monitor.close()
    assert leaks(requests), "the judge was shown the conversation as it was (redaction off)"
    sentences = [m["content"] for r in RECORDS for m in r["messages"] if m.get("content") and m["role"] != "tool"]
    stored = every_stored_byte(tmp_path / "store.db")
    events = json.dumps(receiver.records, ensure_ascii=False, default=str)
    for surface, text in {"store": stored, "write-back events": events, "notifications": notified}.items():
        assert leaks(text) == [], (f"raw values in the {surface}", _debug_leaks(text)[:3])
        for kept in KEPT.values():
            assert kept not in text, f"conversation text {kept!r} in the {surface}"
        for sentence in sentences:
            for start in range(0, max(1, len(sentence) - 20), 10):
                assert sentence[start:start + 20] not in text, f"a quote of {sentence!r} in the {surface}"
    assert {r.rubric for r in results} == {"support-quality", "task-quality", "safety"}
    safety = next(r for r in results if r.rubric == "safety")
    assert safety.outcome == "fail" and "[…]" in safety.reason  # the verdict and its shape are kept


def _debug_leaks(text: str) -> list[str]:
    out = []
    for name, value in raw_forms().items():
        i = text.lower().find(value.lower())
        if i >= 0:
            out.append(f"{name}: ...{text[max(0, i - 150):i + 60]!r}")
    return out
