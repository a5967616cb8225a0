"""Settings that mean nothing are refused, each naming the setting: a boolean where a number goes (pydantic's lax
mode made ``interval_seconds: true`` one second), an absurd size, an empty string where empty means nothing, an
empty ``source.agents``, a token file that ``run`` could not read. Every leaf setting is tried, from the YAML file
and from the environment; a property test adds random huge numbers."""

from __future__ import annotations

import copy
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr

from monitor.errors import ConfigError
from monitor.settings import Settings
from monitor.settings.load import load
from monitor.settings.schema import ENV_PREFIX
from tests.helpers import write_config

EMPTY_MEANS_SOMETHING = {"alerts.silences.comment", "metrics.host"}
"""Strings whose empty value is meaningful: a silence without a comment; ``""`` binds every interface."""


def base_config(tmp_path: Path, source: str) -> dict[str, Any]:
    """A valid configuration that sets every section (one notifier, one silence, one redaction pattern, one SLO with
    both alerting tiers), for ``source``."""
    token = tmp_path / "token"
    token.write_text("a-token\n")
    sources = {
        "otlp_file": {"kind": "otlp_file", "path": str(tmp_path)},
        "app_insights": {"kind": "app_insights", "workspace_id": "w", "agents": ["desk"],
                         "credential": {"kind": "token_file", "token_file": str(token)}},
    }
    return {
        "source": sources[source],
        "judge": {"kind": "openai", "api_key": "k", "base_url": "http://127.0.0.1:1/v1"},
        "alerts": {"notifiers": [{"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:1/hook"}],
                   "silences": [{"matchers": {"rubric": "x"}, "comment": "c"}]},
        "redaction": {"custom_patterns": [{"label": "ORDER", "pattern": "ORD-[0-9]+"}]},
        "slos": [{"name": "policy", "rubric": "policy", "objective": 0.95, "description": "d", "dimension": "accuracy",
                  "min_score": 4,
                  "alerting": {"page": {"windows": [{"burn_rate": 14.4, "long": "1h", "short": "5m"}]},
                               "ticket": {"windows": [{"burn_rate": 3, "long": "1d", "short": "2h"}]}}}],
    }


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted name, annotation) of every scalar setting under ``model``; lists of sections as their item."""
    found: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        dotted = f"{prefix}{name}"
        members = [m for m in (typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union,
                   __import__("types").UnionType) else (annotation,)) if m is not type(None)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        items = [a for m in members if typing.get_origin(m) is tuple for a in typing.get_args(m)
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        if models or items:
            for sub in models or items:
                found += leaves(sub, dotted + ".")
        else:
            found.append((dotted, annotation))
    return found


def kinds(annotation: Any) -> set[Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, __import__("types").UnionType):
        return {k for a in typing.get_args(annotation) for k in kinds(a)}
    return {annotation}


def bad_values(name: str, annotation: Any) -> list[Any]:
    members = kinds(annotation)
    values: list[Any] = []
    if members & {int, float}:
        values += [True, False, 10**30 if int in members else 1e300]
    if members & {str, Path, SecretStr} and name not in EMPTY_MEANS_SOMETHING:
        values.append("")
    if any(typing.get_origin(m) is tuple and typing.get_args(m)[:1] == (str,) for m in members):
        values += [[], [""]] if name == "source.agents" else [[""]]
    if name == "source.credential.token_file":
        values.append("/nonexistent/token")
    return values


def section_of(name: str) -> str:
    return "app_insights" if name.startswith("source.") and not name.startswith(("source.path", "source.max_"))\
        and name != "source.kind" else "otlp_file"


def put(config: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    node: Any = changed
    parts = name.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if isinstance(node, list):
            node = node[0]
    node[parts[-1]] = value
    return changed


CASES = [(name, value) for name, annotation in leaves(Settings) for value in bad_values(name, annotation)
         if name not in ("judge.prices",)]


def test_every_case_has_a_valid_base(tmp_path: Path) -> None:
    for source in ("otlp_file", "app_insights"):
        load(write_config(tmp_path / f"{source}.yaml", base_config(tmp_path, source)), {})
    assert len(CASES) > 150


def refused(tmp_path: Path, config: dict[str, Any], environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as raised:
        load(write_config(tmp_path / "config.yaml", config), environ)
    return str(raised.value)


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}={v!r}" for n, v in CASES])
def test_a_bad_value_in_the_file_is_refused_naming_the_setting(tmp_path: Path, name: str, value: Any) -> None:
    base = base_config(tmp_path, section_of(name))
    message = refused(tmp_path, put(base, name, value), {})
    assert as_named(base, name) in message, message


def as_named(config: dict[str, Any], name: str) -> str:
    """The setting as an error names it: the first item of each list of sections by its index
    (``slos.0.alerting.page.windows.0.burn_rate``)."""
    shown: list[str] = []
    node: Any = config
    for part in name.split("."):
        shown.append(part)
        node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, list) and node and isinstance(node[0], dict):
            shown.append("0")
            node = node[0]
    return ".".join(shown)


IN_LISTS = ("notifiers.", "silences.", "custom_patterns.", "slos.")
"""Settings held in lists of sections: the file sets them, not the environment."""
ENV_CASES = [(n, v) for n, v in CASES if not any(part in n for part in IN_LISTS) and v not in ("", [])
             and not (v is False and n.endswith("_file"))]


def env_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value) if value != [""] else '[""]'
    return str(value)


@pytest.mark.parametrize(("name", "value"), ENV_CASES, ids=[f"{n}={v!r}" for n, v in ENV_CASES])
def test_a_bad_value_in_the_environment_is_refused_naming_the_setting(tmp_path: Path, name: str, value: Any) -> None:
    variable = ENV_PREFIX + name.upper().replace(".", "__")
    message = refused(tmp_path, base_config(tmp_path, section_of(name)), {variable: env_text(value)})
    assert name in message, message


NUMBERS = [name for name, annotation in leaves(Settings) if kinds(annotation) & {int, float}]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(NUMBERS), st.one_of(st.booleans(), st.integers(min_value=10**12),
                                           st.floats(min_value=1e12, allow_infinity=False)))
def test_any_bool_or_absurd_number_is_refused(tmp_path: Path, name: str, value: Any) -> None:
    base = base_config(tmp_path, section_of(name))
    message = refused(tmp_path, put(base, name, value), {})
    assert as_named(base, name) in message, message
