"""Rubric files as an attacker or a hurried user writes them (issue 8 item 7, issue 9 item 4): every bound is
checked before anything reads or expands the file, the README's refusals hold, Foundry's envelope is read."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from monitor.errors import RubricError
from monitor.evaluators.versions import builtin_version
from monitor.metrics import MonitorMetrics
from monitor.rubrics.loader import load_rubric_file
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import WeightedRubric

DIMENSIONS = [
    {"id": "resolution", "description": "Resolves the request within policy.", "weight": 9},
    {"id": "tone", "description": "Polite and concise throughout.", "weight": 3},
]


def alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes that expand to 9**levels strings; no ``version``, so the loader would hash it."""
    lines = ['name: bomb', 'dimensions: [{id: a, description: x, weight: 1}]',
             'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path) -> RubricError:
    with pytest.raises(RubricError) as caught:
        load_rubric_file(path, builtin_version)
    assert caught.value.where == str(path)
    return caught.value


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    # Refused on the composed node graph, where each alias is one shared node; the refusal's speed is measured
    # in benchmarks/bench_documents.py.
    error = refused(write_yaml(tmp_path / "bomb.yaml", alias_bomb()))
    assert "line 8: expands to more than 100000 values" in str(error)  # the alias that crosses the bound


def test_a_hot_reload_of_an_alias_bomb_does_not_freeze_the_daemon(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"name": "good", "dimensions": DIMENSIONS}))
    metrics = MonitorMetrics(CollectorRegistry())
    registry = RubricRegistry(tmp_path, builtin_version, metrics)
    registry.load()
    write_yaml(tmp_path / "bomb.yaml", alias_bomb())
    done = threading.Event()
    worker = threading.Thread(target=lambda: (registry.refresh(), done.set()), daemon=True)
    worker.start()
    assert done.wait(120), "refresh() hung on an alias bomb"  # a hang guard, not a speed measurement
    assert [r.name for r in registry.active()] == ["good"]
    assert "expands to more than" in registry.problems[str(tmp_path / "bomb.yaml")]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("deep.yaml", "name: deep\ndimensions: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested deeper than"),
        ("deep.json", '{"name": "deep", "x": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested deeper than"),
        ("self.yaml", "name: self\ndimensions: &d [*d]\n", "contains it"),
        ("dup.yaml", "name: dup\nname: other\ndimensions: []\n", "line 2: key 'name' is given twice"),
        ("dup.json", '{"name": "dup", "dimensions": [], "name": "x"}', "key 'name' is given twice"),
        ("big.yaml", "name: big\ndescription: " + "x" * (2 << 20) + "\n", "larger than"),
        ("latin.yaml", "name: caf\xe9\n", "not UTF-8"),
    ],
)
def test_bounds_are_checked_before_the_content_is_read(tmp_path: Path, name: str, text: str,
                                                       message: str) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1") if "latin" in name else text.encode())
    assert message in str(refused(path))


@pytest.mark.parametrize(
    ("dimension", "field", "message"),
    [
        ({"id": "tone", "description": "Polite.", "weight": "5"}, "dimensions.0.weight", "integer"),
        ({"id": "tone", "description": "   ", "weight": 5}, "dimensions.0.description", "at least 1 character"),
        ({"id": "tone", "description": "Polite.", "wieght": 5}, "dimensions.0.wieght",
         "`wieght` is not allowed; did you mean `weight`?"),
        ({"id": "general_quality", "description": "Other factors.", "weight": 9, "always_applicable": True},
         "dimensions.0", "residual dimension general_quality"),
        ({"id": "general_quality", "description": "Other factors.", "weight": 5}, "dimensions.0",
         "residual dimension general_quality"),
    ],
)
def test_what_the_readme_says_is_refused_is_refused(tmp_path: Path, dimension: dict[str, Any], field: str,
                                                    message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"name": "r", "dimensions": [dimension]}))
    error = refused(path)
    assert error.field == field and message in str(error)
    assert "Field required" not in str(error)  # the misspelling is the one problem named


def test_the_residual_dimension_may_be_restated_unchanged(tmp_path: Path) -> None:
    residual = {"id": "general_quality", "description": "Other important quality factors.", "weight": 5,
                "always_applicable": True}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"name": "r", "dimensions": [*DIMENSIONS, residual]}))
    rubric = load_rubric_file(path, builtin_version)
    assert isinstance(rubric, WeightedRubric) and [d.id for d in rubric.dimensions][-1] == "general_quality"


def envelope(**definition: Any) -> dict[str, Any]:
    return {
        "name": "reservation-quality-manual",
        "categories": ["quality"],
        "display_name": "Reservation Quality (Manual)",
        "description": "Hand-authored rubric",
        "definition": {"type": "rubric", "dimensions": DIMENSIONS, "pass_threshold": 0.6, **definition},
    }


def test_foundrys_full_evaluator_envelope_is_accepted(tmp_path: Path) -> None:
    document = envelope(
        data_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        init_parameters={"type": "object", "properties": {"deployment_name": {"type": "string"}}},
        metrics={"score": {"type": "continuous", "desirable_direction": "increase", "min_value": 0,
                           "max_value": 1, "is_primary": True}},
    )
    path = tmp_path / "envelope.json"
    path.write_text(json.dumps(document))
    rubric = load_rubric_file(path, builtin_version)
    assert isinstance(rubric, WeightedRubric)
    assert (rubric.name, rubric.pass_threshold, rubric.category) == ("reservation-quality-manual", 0.6, "quality")
    assert rubric.display_name == "Reservation Quality (Manual)" and rubric.description == "Hand-authored rubric"
    assert rubric.data_schema is not None and rubric.data_schema["required"] == ["query"]
    assert rubric.metrics is not None and rubric.metrics["score"].desirable_direction == "increase"
    assert [d.id for d in rubric.dimensions] == ["resolution", "tone", "general_quality"]


def test_a_safety_envelope_gets_the_safety_residual(tmp_path: Path) -> None:
    document = {**envelope(), "categories": ["agents", "safety"]}
    path = tmp_path / "safety.json"
    path.write_text(json.dumps(document))
    rubric = load_rubric_file(path, builtin_version)
    assert isinstance(rubric, WeightedRubric) and rubric.category == "safety"
    assert rubric.dimensions[-1].id == "general_policy_compliance"


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        ({"data_schema": {"type": "objekt"}}, "definition.data_schema", "objekt"),
        ({"data_schema": {"type": "object", "required": "query"}}, "definition.data_schema", "required"),
        ({"init_parameters": ["deployment_name"]}, "definition.init_parameters", "JSON Schema"),
        ({"metrics": {"score": {"type": "fuzzy"}}}, "definition.metrics.score.type", "ordinal"),
        ({"metrics": {"score": {"min_value": 5, "max_value": 1}}}, "definition.metrics.score", "min_value"),
        ({"pass_threshold": 2}, "definition.pass_threshold", "less than or equal to 1"),
        ({"type": "judge"}, "definition.type", "rubric, prompt, code, endpoint"),
    ],
)
def test_the_envelopes_schemas_are_validated_not_dropped(tmp_path: Path, edit: dict[str, Any], field: str,
                                                         message: str) -> None:
    path = tmp_path / "envelope.json"
    path.write_text(json.dumps(envelope(**edit)))
    error = refused(path)
    assert error.field == field and message in str(error), str(error)


def test_an_unknown_category_is_named(tmp_path: Path) -> None:
    path = tmp_path / "envelope.json"
    path.write_text(json.dumps({**envelope(), "categories": ["qualty"]}))
    error = refused(path)
    assert error.field == "categories" and "qualty" in str(error)
