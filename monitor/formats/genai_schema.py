"""Validation of GenAI content attributes against the semantic-convention JSON schemas.

The schemas (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``,
``gen_ai.tool.definitions`` and friends) are small, so they are checked here by hand: jsonschema is only a
development dependency, and hand-written checks are fast enough for every span of every cycle. Issues are
reported the way the conformance snapshots record them: a JSONPath, the failing keyword and
python-jsonschema's message, with an ``anyOf`` collapsed to the one branch whose ``type`` matches.

Two generations of the rules exist (see the corpus notes on the "generic part" change):

- ``pre_move``: the schemas as they were before the GenAI conventions moved repositories. Any object with a
  string ``type`` is a valid part (the catch-all ``GenericPart``), so unknown provider blocks are accepted.
  The daemon reads spans with these rules, because producers in the field are older than the newest schemas.
- ``current``: a catch-all part must say ``type: "generic"``; unknown part types, and parts other than
  ``text`` and ``generic`` in system instructions, are rejected.

Neither generation requires ``finish_reason`` on output messages: later schemas dropped the requirement and
real producers omit it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

SchemaName = Literal[
    "input-messages",
    "output-messages",
    "system-instructions",
    "tool-definitions",
    "tool-call-arguments",
    "tool-call-result",
    "memory-records",
    "retrieval-documents",
]
Generation = Literal["pre_move", "current"]
SCHEMA_NAMES: tuple[SchemaName, ...] = get_args(SchemaName)

_STRING = "string"
_OPTIONAL_STRING = "string_or_null"
_ANYTHING = "any"
_TYPED_OBJECT = "typed_object"
_OBJECT = "object"
_NUMBER = "number"

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
}


@dataclass(frozen=True)
class _PartSpec:
    fields: Mapping[str, str]
    required: tuple[str, ...] = ()


_MESSAGE_PARTS: dict[str, _PartSpec] = {
    "text": _PartSpec({"content": _STRING}, ("content",)),
    "reasoning": _PartSpec({"content": _STRING}, ("content",)),
    "tool_call": _PartSpec({"id": _OPTIONAL_STRING, "name": _STRING, "arguments": _ANYTHING}, ("name",)),
    "tool_call_response": _PartSpec({"id": _OPTIONAL_STRING, "response": _ANYTHING}, ("response",)),
    "server_tool_call": _PartSpec(
        {"id": _OPTIONAL_STRING, "name": _STRING, "server_tool_call": _TYPED_OBJECT},
        ("name", "server_tool_call"),
    ),
    "server_tool_call_response": _PartSpec(
        {"id": _OPTIONAL_STRING, "server_tool_call_response": _TYPED_OBJECT}, ("server_tool_call_response",)
    ),
    "blob": _PartSpec({"mime_type": _OPTIONAL_STRING, "modality": _STRING, "content": _STRING},
                      ("modality", "content")),
    "file": _PartSpec({"mime_type": _OPTIONAL_STRING, "modality": _STRING, "file_id": _STRING},
                      ("modality", "file_id")),
    "uri": _PartSpec({"mime_type": _OPTIONAL_STRING, "modality": _STRING, "uri": _STRING},
                     ("modality", "uri")),
}
_CURRENT_ONLY_PARTS: dict[str, _PartSpec] = {
    "compaction": _PartSpec({"id": _OPTIONAL_STRING, "content": _OPTIONAL_STRING}),
    "generic": _PartSpec({"generic_type": _OPTIONAL_STRING}),
}
_PRE_MOVE_INSTRUCTION_PARTS = ("text", "tool_call", "tool_call_response", "blob", "file", "uri", "reasoning")


@dataclass(frozen=True)
class SchemaIssue:
    """One validation error: where (JSONPath), which keyword failed, and jsonschema's wording of it."""

    path: str
    keyword: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class _Rules:
    parts: Mapping[str, _PartSpec]
    generic_any_type: bool
    """True when any object with a string ``type`` is a valid part (the pre-move catch-all)."""


def validate_document(
    schema: SchemaName, document: Any, generation: Generation = "pre_move"
) -> list[SchemaIssue]:
    """Every issue of ``document`` (an already JSON-decoded value) against ``schema``; empty when valid."""
    issues: list[SchemaIssue] = []
    if schema in ("tool-call-arguments", "tool-call-result"):
        _check_type("$", document, _OBJECT, issues)
        return issues
    if not isinstance(document, list):
        return [_type_issue("$", document, "array")]
    for index, item in enumerate(document):
        issues.extend(validate_item(schema, item, index, generation))
    return issues


def validate_item(
    schema: SchemaName, item: Any, index: int, generation: Generation = "pre_move"
) -> list[SchemaIssue]:
    """Every issue of one item (at ``index``) of an array-valued ``schema``."""
    issues: list[SchemaIssue] = []
    path = f"$[{index}]"
    if schema in ("input-messages", "output-messages"):
        _check_message(path, item, schema == "output-messages", _message_rules(generation), issues)
    elif schema == "system-instructions":
        _check_part(path, item, _instruction_rules(generation), issues)
    elif schema == "tool-definitions":
        _check_tool_definition(path, item, issues)
    elif schema == "memory-records":
        fields = {"id": _STRING, "metadata": _OBJECT, "score": _NUMBER}
        _check_record(path, item, fields, ("content",), issues)
    else:
        _check_record(path, item, {"id": _STRING, "score": _NUMBER}, (), issues)
    return issues


def _message_rules(generation: Generation) -> _Rules:
    if generation == "current":
        return _Rules({**_MESSAGE_PARTS, **_CURRENT_ONLY_PARTS}, generic_any_type=False)
    return _Rules(_MESSAGE_PARTS, generic_any_type=True)


def _instruction_rules(generation: Generation) -> _Rules:
    if generation == "current":
        return _Rules({"text": _MESSAGE_PARTS["text"], "generic": _CURRENT_ONLY_PARTS["generic"]}, False)
    return _Rules({name: _MESSAGE_PARTS[name] for name in _PRE_MOVE_INSTRUCTION_PARTS}, generic_any_type=True)


def _check_message(path: str, message: Any, output: bool, rules: _Rules, issues: list[SchemaIssue]) -> None:
    if not isinstance(message, dict):
        issues.append(_type_issue(path, message, "object"))
        return
    for name in ("role", "parts"):
        if name not in message:
            issues.append(_required_issue(path, name))
    if "role" in message:
        _check_type(f"{path}.role", message["role"], _STRING, issues)
    if "name" in message:
        _check_type(f"{path}.name", message["name"], _OPTIONAL_STRING, issues)
    if output and "finish_reason" in message:
        _check_type(f"{path}.finish_reason", message["finish_reason"], _STRING, issues)
    parts = message.get("parts")
    if "parts" not in message:
        return
    if not isinstance(parts, list):
        issues.append(_type_issue(f"{path}.parts", parts, "array"))
        return
    for index, part in enumerate(parts):
        _check_part(f"{path}.parts[{index}]", part, rules, issues)


def _check_part(path: str, part: Any, rules: _Rules, issues: list[SchemaIssue]) -> None:
    if not isinstance(part, dict):
        # Every branch of the union fails the same way (not an object), so that is the error recorded.
        issues.append(_type_issue(path, part, "object"))
        return
    part_type = part.get("type")
    if not isinstance(part_type, str):
        issues.append(_any_of_issue(path, part))
        return
    spec = rules.parts.get(part_type)
    if spec is None:
        if not rules.generic_any_type:
            issues.append(_any_of_issue(path, part))
        return
    found: list[SchemaIssue] = []
    _check_fields(path, part, spec.fields, spec.required, found)
    # Under the pre-move rules a part failing its own type's schema still matches the catch-all GenericPart.
    if found and not rules.generic_any_type:
        issues.extend(found)


def _check_tool_definition(path: str, definition: Any, issues: list[SchemaIssue]) -> None:
    if not isinstance(definition, dict):
        issues.append(_type_issue(path, definition, "object"))
        return
    # FunctionToolDefinition's extra checks never matter: GenericToolDefinition accepts any named object
    # with a string type.
    _check_fields(path, definition, {"type": _STRING, "name": _STRING}, ("type", "name"), issues)


def _check_record(
    path: str, record: Any, fields: Mapping[str, str], required: tuple[str, ...], issues: list[SchemaIssue]
) -> None:
    if not isinstance(record, dict):
        issues.append(_type_issue(path, record, "object"))
        return
    _check_fields(path, record, fields, required, issues)


def _check_fields(
    path: str, value: dict[str, Any], fields: Mapping[str, str], required: tuple[str, ...],
    issues: list[SchemaIssue],
) -> None:
    for name, kind in fields.items():
        if name in value:
            _check_type(f"{path}.{name}", value[name], kind, issues)
    for name in required:
        if name not in value:
            issues.append(_required_issue(path, name))


def _check_type(path: str, value: Any, kind: str, issues: list[SchemaIssue]) -> None:
    if kind == _ANYTHING or (kind == _OPTIONAL_STRING and value is None):
        return
    if kind == _TYPED_OBJECT:
        if not isinstance(value, dict):
            issues.append(_type_issue(path, value, "object"))
        elif "type" not in value:
            issues.append(_required_issue(path, "type"))
        else:
            _check_type(f"{path}.type", value["type"], _STRING, issues)
        return
    json_type = "string" if kind == _OPTIONAL_STRING else kind
    if isinstance(value, bool) or not isinstance(value, _JSON_TYPES[json_type]):
        issues.append(_type_issue(path, value, json_type))


def _type_issue(path: str, value: Any, json_type: str) -> SchemaIssue:
    return SchemaIssue(path, "type", f"{_short_repr(value)} is not of type {json_type!r}")


def _required_issue(path: str, name: str) -> SchemaIssue:
    return SchemaIssue(path, "required", f"{name!r} is a required property")


def _any_of_issue(path: str, value: Any) -> SchemaIssue:
    return SchemaIssue(path, "anyOf", f"{_short_repr(value)} is not valid under any of the given schemas")


def _short_repr(value: Any, limit: int = 200) -> str:
    # A whole conversation can sit in one value; an error message quotes only its start.
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
