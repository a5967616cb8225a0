"""The real-producer harness (tests/producers): each configuration's agent, run with its library's pinned venv
against the scripted OpenAI server, must export what its captured fixture in tests/data/producers holds (up to
ids, times and batching), in the OpenTelemetry Collector's file-exporter format.

The end-to-end tests build the producer venvs (once per cache, from PyPI) and run the agents, so they run only
when asked: ``RUBRIC_MONITOR_PRODUCERS=1 pytest tests/test_producers_harness.py`` or ``pytest -m producers``.
The format checks of the committed fixtures and of the collector itself always run.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.producers import scenario, venvs
from tests.producers.collector import OtlpFileCollector
from tests.producers.fake_openai import ScenarioServer
from tests.producers.normalize import diff, normalize_envelopes, normalize_otlp
from tests.producers.run import CONFIGS, RunResult, run_config

pytestmark = pytest.mark.producers

FIXTURES = Path(__file__).resolve().parent / "data" / "producers"
HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def _requested(config: pytest.Config) -> bool:
    return os.environ.get("RUBRIC_MONITOR_PRODUCERS") == "1" or "producers" in (config.getoption("-m") or "")


def check_collector_format(path: Path) -> dict[str, int]:
    """Every line one resourceSpans or resourceLogs object in the Collector's JSON: hex ids, integer enums,
    int64 as strings. Returns how many spans and log records the file holds."""
    counts = {"spans": 0, "logs": 0}
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines, f"{path} is empty"
    for number, line in enumerate(lines, 1):
        data = json.loads(line)
        assert isinstance(data, dict) and len(data) == 1 and next(iter(data)) in ("resourceSpans", "resourceLogs"), \
            f"{path}:{number} is not one resourceSpans/resourceLogs object"
        for rs in data.get("resourceSpans", []):
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    counts["spans"] += 1
                    assert HEX32.match(span["traceId"]) and HEX16.match(span["spanId"]), span["name"]
                    assert span.get("parentSpanId", "") == "" or HEX16.match(span["parentSpanId"])
                    assert isinstance(span.get("kind", 0), int)
                    assert isinstance(span.get("status", {}).get("code", 0), int)
                    assert isinstance(span["startTimeUnixNano"], str) and span["startTimeUnixNano"].isdigit()
                    _check_values(span.get("attributes", []))
        for rl in data.get("resourceLogs", []):
            for sl in rl["scopeLogs"]:
                for record in sl["logRecords"]:
                    counts["logs"] += 1
                    assert record.get("traceId", "") == "" or HEX32.match(record["traceId"])
                    assert record.get("spanId", "") == "" or HEX16.match(record["spanId"])
                    assert isinstance(record.get("severityNumber", 0), int)
                    _check_values(record.get("attributes", []))
    return counts


def _check_values(attributes: list[dict[str, Any]]) -> None:
    def check(value: dict[str, Any]) -> None:
        if "intValue" in value:
            assert isinstance(value["intValue"], str), value
        for item in value.get("arrayValue", {}).get("values", []):
            check(item)
        for kv in value.get("kvlistValue", {}).get("values", []):
            check(kv.get("value", {}))

    for attribute in attributes:
        check(attribute["value"])


# --- always: the committed fixtures and the collector ---------------------------------------------------

def test_every_configuration_has_a_fixture_in_the_collector_format() -> None:
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for name, config in CONFIGS.items():
        path = FIXTURES / f"{name}.otlp.jsonl"
        assert path.is_file(), f"no fixture for {name}: python -m tests.producers.run --config {name} --out {FIXTURES}"
        counts = check_collector_format(path)
        assert counts["spans"] >= 2 * scenario.CHAT_REQUESTS_PER_SESSION, name
        assert f"`{name}`" in readme, f"tests/data/producers/README.md does not describe {name}"
        if config.azure_monitor:
            assert (FIXTURES / f"{name}.envelopes.jsonl").is_file(), name
    known = {f"{n}.otlp.jsonl" for n in CONFIGS} | {f"{n}.envelopes.jsonl" for n in CONFIGS}
    assert not {p.name for p in FIXTURES.glob("*.jsonl")} - known, "fixtures of configurations that no longer exist"


def test_the_collector_writes_what_the_otel_sdk_sends_as_the_collector_would(tmp_path: Path) -> None:
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    out = tmp_path / "otlp.jsonl"
    with OtlpFileCollector(out) as collector:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
            endpoint=collector.traces_endpoint, compression=Compression.Gzip)))
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(
            endpoint=collector.logs_endpoint)))
        tracer = tracer_provider.get_tracer("t")
        with tracer.start_as_current_span("parent"), tracer.start_as_current_span(
                "chat m", kind=SpanKind.CLIENT, attributes={"n": 7, "names": ["a", "b"], "x": 0.5}) as span:
            logger_provider.get_logger("l").emit(body={"content": "hi"}, severity_number=SeverityNumber.INFO,
                                                 attributes={"event.name": "gen_ai.user.message"})
            context = span.get_span_context()
        tracer_provider.shutdown()
        logger_provider.shutdown()
        assert collector.errors == []
    check_collector_format(out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    spans = [s for line in lines for rs in line.get("resourceSpans", []) for ss in rs["scopeSpans"]
             for s in ss["spans"]]
    records = [r for line in lines for rl in line.get("resourceLogs", []) for sl in rl["scopeLogs"]
               for r in sl["logRecords"]]
    chat = next(s for s in spans if s["name"] == "chat m")
    parent = next(s for s in spans if s["name"] == "parent")
    assert chat["traceId"] == f"{context.trace_id:032x}" and chat["spanId"] == f"{context.span_id:016x}"
    assert chat["parentSpanId"] == parent["spanId"] and chat["kind"] == 3
    assert {a["key"]: a["value"] for a in chat["attributes"]} == {
        "n": {"intValue": "7"}, "names": {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}},
        "x": {"doubleValue": 0.5}}
    assert records[0]["severityNumber"] == 9 and records[0]["spanId"] == chat["spanId"]
    assert records[0]["body"] == {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "hi"}}]}}


@pytest.mark.parametrize("flavour", ["openai", "vllm"])
def test_the_scripted_server_streams_tool_calls_in_both_flavours(flavour: str) -> None:
    import openai

    messages = scenario.expected_messages(scenario.SESSIONS[0])[:2]
    with ScenarioServer(flavour) as server:  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        chunks = list(client.chat.completions.create(model=scenario.MODEL, messages=messages,  # type: ignore[arg-type]
                                                     stream=True, stream_options={"include_usage": True}))
    first = chunks[0].choices[0].delta
    assert first.role == "assistant"
    if flavour == "openai":
        assert first.content is None and first.tool_calls and first.tool_calls[0].id == "call_s1_find_table"
    else:
        assert first.content == "" and not first.tool_calls
    arguments = "".join(c.function.arguments or "" for ch in chunks for choice in ch.choices
                        for c in choice.delta.tool_calls or [] if c.function)
    assert json.loads(arguments) == {"date": "2026-12-12", "party_size": 4}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


# --- on request: build the venvs, run every configuration, compare with its fixture ------------------

@pytest.fixture(scope="session")
def producer_python(request: pytest.FixtureRequest) -> Any:
    """``producer_python(venv_name)``: that venv's python, built at most once per test run (and cached)."""
    if not _requested(request.config):
        pytest.skip("the producer harness runs on request: RUBRIC_MONITOR_PRODUCERS=1 or -m producers")
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = venvs.ensure_venv(name)
        return built[name]

    return get


@pytest.mark.parametrize("name", list(CONFIGS))
def test_producer_configuration_matches_its_fixture(name: str, producer_python: Any, tmp_path: Path) -> None:
    config = CONFIGS[name]
    result: RunResult = run_config(config, tmp_path, python=producer_python(config.venv))
    assert result.server_errors == [] and result.collector_errors == []
    assert result.chat_requests == {s.conversation_id: scenario.CHAT_REQUESTS_PER_SESSION
                                    for s in scenario.SESSIONS}
    expected_streamed = 0 if config.stream == "plain" else 2 * scenario.CHAT_REQUESTS_PER_SESSION
    assert result.streamed_requests == expected_streamed
    counts = check_collector_format(result.otlp_path)
    assert counts == {"spans": result.collector_counts["spans"], "logs": result.collector_counts["log_records"]}

    fixture = FIXTURES / result.otlp_path.name
    problems = diff(normalize_otlp(fixture), normalize_otlp(result.otlp_path))
    assert not problems, (f"{name} exports differently from {fixture} (regenerate with python -m tests.producers.run "
                          f"--config {name} --out {FIXTURES} if intended):\n" + "\n".join(problems))
    if result.envelopes_path is not None:
        envelopes = FIXTURES / result.envelopes_path.name
        problems = diff(normalize_envelopes(envelopes), normalize_envelopes(result.envelopes_path))
        assert not problems, f"{name} App Insights envelopes differ from {envelopes}:\n" + "\n".join(problems)
