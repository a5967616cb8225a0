"""Rubric generation through the real OpenAI client against a scripted server, and its CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.cli import main
from monitor.errors import ConfigError
from monitor.evaluators.generate import GenerationFailed, GenerationSources, generate_rubric
from monitor.evaluators.versions import builtin_version
from monitor.rubrics.loader import load_rubric_file
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import WeightedRubric
from tests.fakes.openai_server import Reply, ScriptedOpenAIServer, completion
from tests.helpers import judge_config, write_config
from tests.vertex_judging import openai_context, schema_name, user_prompt

PROMPT = builtin_version("weighted")
"""The built-in prompt version the loader appends to an explicit version."""
INSTRUCTIONS = ("You are the reservation assistant of Chez Lou. Dinner service runs 17:00-22:00, parties "
                "are at most 8 people, and bookings open 30 days ahead. Always confirm date, time and party "
                "size.")


def proposal(*dimensions: tuple[str, int], name: str = "Reservation Quality") -> Reply:
    return completion(json.dumps({
        "name": name,
        "description": "Quality of the reservation assistant's conversations.",
        "dimensions": [{"id": i, "weight": w,
                        "description": f"The agent handles {i} correctly, within the 17:00-22:00 rules."}
                       for i, w in dimensions],
    }))


GOOD = proposal(("Intent Recognition", 9), ("policy-enforcement", 7), ("communication_clarity", 2),
                ("general_quality", 4))


def generate(server: ScriptedOpenAIServer, sources: GenerationSources, output: Path, **options: Any) -> Any:
    async def run() -> Any:
        async with openai_context(server) as context:
            return await generate_rubric(context.judge, sources, output, **options)

    return asyncio.run(run())


def test_a_generated_rubric_follows_foundry_conventions_and_validates(tmp_path: Path) -> None:
    output = tmp_path / "reservations.yaml"
    with ScriptedOpenAIServer(lambda _: GOOD) as server:
        sources = GenerationSources(instructions=INSTRUCTIONS)
        generated = generate(server, sources, output, name="reservations")
        assert server.count == 1
        request = server.requests[0]
    assert schema_name(request) == "rubric_definition"
    assert "Dinner service runs 17:00-22:00" in user_prompt(request)
    rubric = generated.rubric
    assert [(d.id, d.weight) for d in rubric.dimensions] == [
        ("intent_recognition", 9), ("policy_enforcement", 6), ("communication_clarity", 2),
        ("general_quality", 5)]
    assert rubric.dimensions[-1].always_applicable is True  # the canonical residual, not the model's own
    assert (rubric.name, rubric.version, rubric.category) == ("reservations", f"1+{PROMPT}", "quality")
    assert any("policy_enforcement: weight 7 → 6" in note for note in generated.notes)
    assert any("'Intent Recognition' → intent_recognition" in note for note in generated.notes)
    assert generated.usage.calls == 1


@pytest.mark.parametrize(("weights", "expected"), [
    ((5, 4, 3), [8, 4, 3]),  # no dimension 8 to 10: the heaviest is raised to 8
    ((9, 10, 2), [6, 10, 2]),  # two above 6: the heavier stays on top, the other is brought to 6
    ((1, 7, 7), [1, 8, 6]),  # a tie: the first of the heaviest is the top dimension
])
def test_exactly_one_dimension_is_weighted_8_to_10(tmp_path: Path, weights: tuple[int, ...],
                                                  expected: list[int]) -> None:
    reply = proposal(*((f"dim_{i}", w) for i, w in enumerate(weights)))
    with ScriptedOpenAIServer(lambda _: reply) as server:
        generated = generate(server, GenerationSources(instructions=INSTRUCTIONS), tmp_path / "r.yaml")
    assert [d.weight for d in generated.rubric.dimensions][:-1] == expected
    top = [d.weight for d in generated.rubric.dimensions[:-1] if d.weight >= 8]
    assert len(top) == 1 and all(1 <= d.weight <= 6 for d in generated.rubric.dimensions[:-1] if d.weight < 8)


def test_safety_category_carries_general_policy_compliance(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda _: GOOD) as server:
        generated = generate(server, GenerationSources(instructions=INSTRUCTIONS), tmp_path / "s.yaml",
                             category="safety")
        assert "general_policy_compliance" in server.requests[0].body["messages"][0]["content"]
    # The model's own catch-all is dropped; the canonical safety residual closes the list.
    assert [d.id for d in generated.rubric.dimensions] == [
        "intent_recognition", "policy_enforcement", "communication_clarity", "general_policy_compliance"]
    assert generated.rubric.dimensions[-1].always_applicable is True
    assert generated.rubric.category == "safety"


def test_traces_alone_are_refused_without_a_judge_call(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"id": "t1", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with ScriptedOpenAIServer(lambda _: GOOD) as server:
        with pytest.raises(ConfigError, match="traces alone"):
            generate(server, GenerationSources(traces=traces), tmp_path / "r.yaml")
        assert server.count == 0


def test_sample_traces_go_into_the_prompt_next_to_the_instructions(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    lines = [{"id": f"t{i}", "agent": agent, "messages": [
        {"role": "user", "content": f"Table for {i + 2} tonight ({agent})"},
        {"role": "assistant", "content": "Booked."}]} for i, agent in enumerate(["reservations", "other"])]
    traces.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    sources = GenerationSources(instructions=INSTRUCTIONS, traces=traces, agent="reserv*")
    with ScriptedOpenAIServer(lambda _: GOOD) as server:
        generate(server, sources, tmp_path / "r.yaml")
        prompt = user_prompt(server.requests[0])
    assert "Table for 2 tonight (reservations)" in prompt
    assert "(other)" not in prompt


def test_a_reply_that_cannot_be_fixed_is_retried_once_then_fails(tmp_path: Path) -> None:
    vague = completion(json.dumps({"name": "x", "description": "y", "dimensions": [
        {"id": "good", "description": "Good.", "weight": 9},
        {"id": "nice", "description": "Nice.", "weight": 3}]}))
    with ScriptedOpenAIServer(lambda _: vague) as server:
        with pytest.raises(GenerationFailed, match="too short"):
            generate(server, GenerationSources(instructions=INSTRUCTIONS), tmp_path / "r.yaml")
        assert server.count == 2


def config(tmp_path: Path, server: ScriptedOpenAIServer) -> Path:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir(exist_ok=True)
    return write_config(tmp_path / "config.yaml", judge_config(server.base_url,
                                                               rubrics={"directory": str(rubrics)}))


def test_cli_generates_then_regenerates_the_next_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    instructions = tmp_path / "instructions.md"
    instructions.write_text(INSTRUCTIONS)
    reference = tmp_path / "policy.txt"
    reference.write_text("Deposits of 20 EUR per guest for parties above 6.")
    second = proposal(("intent_recognition", 10), ("deposit_policy", 5))
    replies = iter([GOOD, second])
    with ScriptedOpenAIServer(lambda _: next(replies)) as server:
        settings = config(tmp_path, server)
        args = ["rubrics", "generate", "--config", str(settings), "--name", "reservations",
                "--instructions-file", str(instructions), "--reference", str(reference)]
        assert main(args) == 0
        output = tmp_path / "rubrics" / "reservations.yaml"
        first = load_rubric_file(output, builtin_version)
        assert "Deposits of 20 EUR" in user_prompt(server.requests[0])
        assert "adjusted: policy_enforcement: weight 7 → 6" in capsys.readouterr().err

        # A reviewer edits the file; regeneration keeps the edit and uses the dimensions as context.
        document = yaml.safe_load(output.read_text())
        output.write_text(yaml.safe_dump({**document, "agents": ["chez-lou-*"], "sampling_rate": 0.5}))
        assert main(args) == 0
        assert "intent_recognition" in user_prompt(server.requests[1])
        assert "<previous_rubric" in user_prompt(server.requests[1])
    assert (first.version, isinstance(first, WeightedRubric)) == (f"1+{PROMPT}", True)
    [again] = RubricRegistry(tmp_path / "rubrics", builtin_version).load()
    assert isinstance(again, WeightedRubric)
    assert again.version == f"2+{PROMPT}"
    assert again.agents == ("chez-lou-*",) and again.sampling_rate == 0.5
    assert [d.id for d in again.dimensions] == ["intent_recognition", "deposit_policy", "general_quality"]
    assert "wrote" in capsys.readouterr().out


def test_cli_refuses_traces_alone_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"id": "t1", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with ScriptedOpenAIServer(lambda _: GOOD) as server:
        settings = config(tmp_path, server)
        code = main(["rubrics", "generate", "--config", str(settings), "--name", "r",
                     "--traces", str(traces)])
        assert server.count == 0
    assert code == 2
    assert "traces alone" in capsys.readouterr().err
    assert not (tmp_path / "rubrics" / "r.yaml").exists()


def test_cli_reports_a_failed_generation_with_exit_1_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedOpenAIServer(lambda _: completion("I cannot help with that.")) as server:
        settings = config(tmp_path, server)
        code = main(["rubrics", "generate", "--config", str(settings), "--name", "r",
                     "--instructions", "Be kind."])
    assert code == 1
    assert "rubric generation failed" in capsys.readouterr().err
    assert not (tmp_path / "rubrics" / "r.yaml").exists()


def test_cli_will_not_write_a_second_file_for_an_existing_rubric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedOpenAIServer(lambda _: GOOD) as server:
        settings = config(tmp_path, server)
        args = ["rubrics", "generate", "--config", str(settings), "--name", "reservations",
                "--instructions", INSTRUCTIONS]
        assert main(args) == 0
        elsewhere = tmp_path / "rubrics" / "copy.yaml"
        assert main([*args, "--output", str(elsewhere)]) == 2
        assert server.count == 1
    assert "already lives in" in capsys.readouterr().err and not elsewhere.exists()
