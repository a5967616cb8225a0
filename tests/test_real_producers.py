"""What real producers emit reads as the conversations their agent had (issue #20).

``tests/data/producers/<config>.otlp.jsonl`` were captured by the real-producer harness (``tests/producers``): the
real instrumentation libraries (openai-v2 in every content mode, util-genai 0.x legacy events, Agent Framework,
OpenLLMetry current and 0.4x, OpenInference) drove the same agent (system prompt, 3 user turns, 2 tool calls,
2 sessions) against a scripted OpenAI server, exported by the real OpenTelemetry SDK over OTLP/HTTP and written
as the Collector's file exporter writes them (spans and log records in one file).

Each file is read twice, as the product reads it: through the store as the daemon does (line by line, one
batch per line, so log records and spans of a trace arrive apart, and sessions without a conversation id must
be joined across traces), and through ``evaluate`` against the scripted judge, asserting on the judge request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.assemble import assemble
from monitor.formats.otlp import parse_otlp_line
from monitor.models import Conversation
from monitor.store.memory import InMemoryStore
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config

DATA = REPO / "tests" / "data" / "producers"
FIXTURES = sorted(DATA.glob("*.otlp.jsonl"))
AGENT_NAME = "table-booker"
SYSTEM_PROMPT = ("You are table-booker, the booking assistant of the restaurant Chez Rubric. Use find_table to "
                 "check availability and book_table to book. Be brief.")

KNOWN_PRODUCER_GAPS = {
    # OpenLLMetry 0.62 with use_attributes=False, streamed: it emits each streamed reply's gen_ai.choice record
    # after the span ended, without trace context: nothing can place it. Counted, logged, documented.
    "openllmetry-events-openai": "log_record_without_span",
}


@dataclass(frozen=True)
class Step:
    role: str
    text: str = ""
    call: tuple[str, str, dict[str, Any]] | None = None
    """(id, name, arguments) of an assistant tool call."""
    result: tuple[str, str] | None = None
    """(call id, result text) of a tool message."""


def _session(n: int, date: str, size: int, times: list[str], time: str, name: str, ref: str, bye: str) -> list[Step]:
    find_args = {"date": date, "party_size": size}
    book_args = {"date": date, "time": time, "party_size": size, "name": name}
    return [
        Step("user", f"Is there a table for {size} on {date}?"),
        Step("assistant", call=(f"call_s{n}_find_table", "find_table", find_args)),
        Step("tool", result=(f"call_s{n}_find_table", json.dumps({**find_args, "free": times}))),
        Step("assistant", f"Yes: on {date} a table for {size} is free at {' or '.join(times)}. "
                          "Which time would you like?"),
        Step("user", f"{time} please, under the name {name}."),
        Step("assistant", call=(f"call_s{n}_book_table", "book_table", book_args)),
        Step("tool", result=(f"call_s{n}_book_table", json.dumps({"status": "booked", "reference": ref}))),
        Step("assistant", f"Done: table for {size} on {date} at {time} for {name}, reference {ref}."),
        Step("user", bye),
        Step("assistant", "You're welcome, enjoy your dinner!"),
    ]


SESSIONS = (
    _session(1, "2026-12-12", 4, ["19:00", "20:30"], "19:00", "Ada", "BK-1001", "Thanks, that's all."),
    _session(2, "2026-12-24", 2, ["18:00", "21:00"], "21:00", "Grace", "BK-1002", "Perfect, thank you."),
)


def test_the_expected_sessions_are_the_harness_scenario() -> None:
    """Kept in step with ``tests/producers/scenario.py`` when the harness is present."""
    scenario = pytest.importorskip("tests.producers.scenario")
    for steps, session in zip(SESSIONS, scenario.SESSIONS, strict=True):
        users = [s.text for s in steps if s.role == "user"]
        assert users == [t.user for t in session.turns]
        assert steps[-1].text == session.turns[-1].reply
    assert scenario.SYSTEM_PROMPT == SYSTEM_PROMPT and scenario.AGENT_NAME == AGENT_NAME


def _name(path: Path) -> str:
    return path.name.removesuffix(".otlp.jsonl")


def _shape(conversation: Conversation) -> list[Step]:
    steps: list[Step] = []
    for message in conversation.messages:
        if message.role == "tool":
            part = message.parts[0]
            response = part.response if isinstance(part.response, str) else json.dumps(part.response)
            steps.append(Step("tool", result=(part.id or "", response)))
        elif message.tool_calls:
            # Semantic Kernel names functions to the model with their plugin ("Booking-find_table"): the real name.
            steps.extend(Step(message.role, call=(p.id or "", (p.name or "").rsplit("-", 1)[-1], p.arguments))
                         for p in message.tool_calls)
        else:
            steps.append(Step(message.role, message.text))
    return steps


def _normal(steps: list[Step]) -> list[Step]:
    # Tool results compare as JSON values: a producer may re-serialise them.
    return [Step(s.role, s.text, s.call, (s.result[0], json.loads(s.result[1])) if s.result else None)
            for s in steps]


def _add(rejected: dict[str, int], more: dict[str, int]) -> None:
    for reason, count in more.items():
        rejected[reason] = rejected.get(reason, 0) + count


def stored_otlp_file(path: Path) -> tuple[InMemoryStore, dict[str, int]]:
    """``path`` stored as the daemon stores it: one store batch per line; with what parsing rejected."""
    store = InMemoryStore()
    rejected: dict[str, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        spans, line_rejected = parse_otlp_line(line)
        _add(rejected, line_rejected)
        store.add_spans("otlp_file", spans, f"line {number}", "ignore")
    return store, rejected


def assembled(store: InMemoryStore, rejected: dict[str, int] | None = None
              ) -> tuple[list[Conversation], dict[str, int]]:
    """The conversations the daemon would judge once every one is idle: each ready key assembled, its
    rejections added to ``rejected``."""
    rejected = {} if rejected is None else rejected
    far = datetime(2100, 1, 1, tzinfo=UTC)
    conversations: list[Conversation] = []
    for pending in store.ready_conversations(far, far):
        assembly = assemble(store.spans_of(pending.key), key=pending.key)
        _add(rejected, assembly.rejected)
        conversations.extend(assembly.conversations)
    return conversations, rejected


def _stored_conversations(path: Path) -> tuple[list[Conversation], dict[str, int]]:
    """The conversations the daemon would judge: one store batch per line, then each ready key assembled."""
    return assembled(*stored_otlp_file(path))


@pytest.mark.parametrize("path", FIXTURES, ids=_name)
def test_each_configuration_gives_the_sessions_the_agent_had(path: Path) -> None:
    conversations, rejected = _stored_conversations(path)
    gap = KNOWN_PRODUCER_GAPS.get(_name(path))
    if gap is not None:
        assert rejected.get(gap), f"{path.name}: the producer's gap must be counted as {gap}: {rejected}"
        return
    assert rejected == {}
    assert len(conversations) == len(SESSIONS), [c.id for c in conversations]
    by_first_user = {next(m.text for m in c.messages if m.role == "user"): c for c in conversations}
    for steps in SESSIONS:
        conversation = by_first_user[steps[0].text]
        assert _normal(_shape(conversation)) == _normal(steps)
        assert conversation.system_instructions == SYSTEM_PROMPT
        assert conversation.agent == AGENT_NAME


# One configuration per producer and content placement: each is a CLI run against the scripted judge.
JUDGED = [p for p in FIXTURES if _name(p) in {
    "openai-v2-span-only-vllm", "openai-v2-event-only-plain", "openai-v2-span-and-event-openai",
    "openai-v2-legacy-openai", "agent-framework-plain", "openllmetry-openai", "openllmetry-old-plain",
    "openinference-plain", "openllmetry-events-plain",
}]


@pytest.mark.parametrize("path", JUDGED, ids=_name)
def test_the_judge_sees_every_message_once_and_in_order(path: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"),
                        "--input", str(path), "--config", str(config)], tmp_path)
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert len(requests) == len(SESSIONS), "one judge request per session"
    prompts = [r.body["messages"][-1]["content"] for r in requests]
    for steps in SESSIONS:
        prompt = next(p for p in prompts if steps[0].text in p)
        assert f'<conversation agent="{AGENT_NAME}">' in prompt
        assert prompt.count(SYSTEM_PROMPT) == 1
        cursor = prompt.index(SYSTEM_PROMPT)
        for step in steps:
            if step.call is not None:
                needle = f'name="{step.call[1]}">{json.dumps(step.call[2], sort_keys=True)}</tool_call>'
            elif step.result is not None:
                needle = f'<tool_result id="{step.result[0]}">'
            else:
                needle = f'role="{step.role}">\n{step.text}\n</turn>'
            assert prompt.count(needle) == 1, f"{path.name}: {needle!r} not exactly once"
            position = prompt.index(needle)
            assert position > cursor, f"{path.name}: {needle!r} out of order"
            cursor = position


@pytest.mark.parametrize(("agents", "judged"), [(["table-*"], len(SESSIONS)), (["reservation-*"], 0)],
                         ids=["matching", "other-agents"])
def test_a_rubric_for_agents_applies_to_a_producer_that_names_none(tmp_path: Path, agents: list[str],
                                                                  judged: int) -> None:
    """openai-v2 sets no gen_ai.agent.name: the agent is the resource's service.name (table-booker), and a rubric
    restricted to ``table-*`` judges its sessions in the daemon's cycle, while one for ``reservation-*`` does not."""
    fixture = DATA / "openai-v2-span-only-plain-app.otlp.jsonl"
    assert '"gen_ai.agent.name"' not in fixture.read_text(encoding="utf-8")
    traces, rubrics = tmp_path / "traces", tmp_path / "rubrics"
    traces.mkdir()
    rubrics.mkdir()
    (traces / fixture.name).write_bytes(fixture.read_bytes())
    rubric = yaml.safe_load((REPO / "examples" / "rubrics" / "restaurant-reservation.yaml").read_text("utf-8"))
    rubric["agents"] = agents
    (rubrics / "booking.yaml").write_text(yaml.safe_dump(rubric), encoding="utf-8")
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(
            server.base_url,
            source={"kind": "otlp_file", "path": str(traces)},
            rubrics={"directory": str(rubrics)},
            store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
            metrics={"host": "127.0.0.1", "port": 0},
            conversation={"idle_timeout_seconds": 0},
        ))
        done = run_cli(["run", "--once", "--config", str(config)], tmp_path)
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert len(requests) == judged, done.stderr
    for request in requests:
        assert f'<conversation agent="{AGENT_NAME}">' in request.body["messages"][-1]["content"]
