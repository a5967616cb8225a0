"""Foundry scoring: applicability, normalisations, the any-1 rule, sample combination, reply validation."""

from __future__ import annotations

import pytest

from monitor.evaluators.base import InvalidReply
from monitor.evaluators.versions import builtin_version
from monitor.evaluators.weighted import combine_samples, foundry_score, parse_verdict, verdict_schema
from monitor.models import DimensionScore
from monitor.rubrics.loader import parse_rubric
from monitor.rubrics.schema import WeightedRubric

DIMS = [{"id": "a", "description": "A", "weight": 9}, {"id": "b", "description": "B", "weight": 3}]


def rubric(**extra: object) -> WeightedRubric:
    parsed = parse_rubric({"name": "r", "dimensions": DIMS, **extra}, "r.yaml", builtin_version)
    assert isinstance(parsed, WeightedRubric)
    return parsed


def scores(*values: int | None) -> tuple[DimensionScore, ...]:
    r = rubric()
    return tuple(DimensionScore(id=d.id, score=v, applicable=v is not None, weight=d.weight)
                 for d, v in zip(r.dimensions, values, strict=True))


def test_the_residual_dimension_is_added() -> None:
    assert [d.id for d in rubric().dimensions] == ["a", "b", "general_quality"]
    assert [d.id for d in rubric(category="safety").dimensions][-1] == "general_policy_compliance"


def test_not_applicable_dimensions_do_not_count() -> None:
    result = foundry_score(scores(4, None, 4), rubric())
    assert result.score == pytest.approx(0.8) and result.passed


def test_minmax_normalisation() -> None:
    result = foundry_score(scores(3, 3, 3), rubric(normalization="minmax"))
    assert result.score == pytest.approx(0.5) and result.passed
    assert foundry_score(scores(3, 3, 3), rubric()).score == pytest.approx(0.6)


def test_any_applicable_one_fails_even_above_the_threshold() -> None:
    result = foundry_score(scores(5, 1, 5), rubric(pass_threshold=0.1))
    assert result.score is not None and result.score > 0.1 and not result.passed
    assert "very low b (1)" in result.reason


def test_samples_take_the_median_and_the_majority() -> None:
    combined = combine_samples([scores(5, None, 3), scores(3, 2, 4), scores(4, None, 2)])
    assert [(d.applicable, d.score) for d in combined] == [(True, 4), (False, None), (True, 3)]
    tie = combine_samples([scores(5, 2, 3), scores(5, None, 3)])
    assert tie[1].applicable is False  # a tie counts as not applicable


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ({"dimensions": {"a": {"applicable": True, "score": 0}}}, "'a': score 0"),
        ({"dimensions": {"a": {"applicable": True, "score": 3}, "b": {"applicable": True, "score": 3}}},
         "'general_quality' is missing"),
        ({"dimensions": {"a": {"applicable": True, "score": True}, "b": {}, "general_quality": {}}}, "score True"),
        ({"dimensions": {"a": {"applicable": "yes", "score": 3}}}, "not a boolean"),
        ({"dimensions": {"a": {"applicable": True, "score": 3}, "b": {"applicable": False, "score": None},
                         "general_quality": {"applicable": False, "score": None}}}, "always applicable"),
        ({"dimensions": {"a": {"applicable": True, "score": 3}, "b": {"applicable": False, "score": None},
                         "general_quality": {"applicable": True, "score": 4}, "c": {}}}, "does not: c"),
        ([1, 2], "no 'dimensions'"),
    ],
)
def test_replies_outside_the_rubric_are_invalid(reply: object, problem: str) -> None:
    with pytest.raises(InvalidReply, match=problem):
        parse_verdict(reply, rubric())


def test_the_schema_requires_every_dimension_and_pins_always_applicable() -> None:
    schema = verdict_schema(rubric())
    dims = schema["properties"]["dimensions"]
    assert dims["required"] == ["a", "b", "general_quality"]
    assert dims["properties"]["general_quality"]["properties"]["applicable"] == {"type": "boolean", "enum": [True]}
    assert dims["properties"]["a"]["properties"]["score"]["type"] == ["integer", "null"]


def test_a_score_equal_to_the_threshold_passes() -> None:
    # weights 1, 4 and 5 (residual), scores 2, 3, 4: exactly 34/50 = 0.68; dividing twice gives 0.6799999999999999
    equal = parse_rubric({"name": "r", "pass_threshold": 0.68, "dimensions": [
        {"id": "a", "description": "A", "weight": 1}, {"id": "b", "description": "B", "weight": 4}]}, "r.yaml",
        builtin_version)
    assert isinstance(equal, WeightedRubric)
    dims = tuple(DimensionScore(id=d.id, score=s, applicable=True, weight=d.weight)
                 for d, s in zip(equal.dimensions, (2, 3, 4), strict=True))
    result = foundry_score(dims, equal)
    assert result.score == 0.68 and result.passed
