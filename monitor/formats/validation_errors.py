"""pydantic's validation errors in the user's words: the setting or rubric field as written, with suggestions.

Union tags pydantic puts into locations are dropped (``source.pathh``, not ``source.otlp_file.pathh``); an
unknown field names the closest valid one ("`wieght` is not allowed; did you mean `weight`?"), and the
"Field required" that the same misspelling causes is left out.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from monitor.errors import ConfigError


def fields_of(annotation: Any) -> dict[str, Any] | None:
    """Field name → annotation of a model, or of every model of a union (``source`` takes either kind's)."""
    models = [a for a in members(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    if not models:
        return None
    fields: dict[str, Any] = {}
    for model in models:
        for name, info in model.model_fields.items():
            fields.setdefault(name, info.annotation)
    return fields


def members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is typing.Annotated:
        return members(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(m for arg in typing.get_args(annotation) for m in members(arg))
    return (annotation,)


def translate_errors(errors: list[ErrorDetails], model: type[BaseModel], where: str,
                     origins: Mapping[tuple[str, ...], str] | None = None) -> list[ConfigError]:
    """pydantic's errors as ``ConfigError``s naming the setting (or rubric field) as the user wrote it.

    Union tags pydantic puts into locations are dropped; an unknown field names the closest valid one, and the
    "Field required" that the same misspelling causes is left out.
    """
    translated: list[tuple[tuple[str, ...], str, str]] = []  # (user path, error type, message)
    suggested: set[tuple[str, ...]] = set()
    for error in errors:
        path, parent, target = _user_path(error["loc"], model)
        message = error["msg"].removeprefix("Value error, ")
        kind = error["type"]
        if kind == "extra_forbidden":
            name = path[-1] if path else ""
            candidates = list(fields_of(parent) or {}) if parent is not None else []
            close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
            if close:
                message = f"`{name}` is not allowed; did you mean `{close[0]}`?"
                suggested.add((*path[:-1], close[0]))
            else:
                message = f"`{name}` is not allowed" + (f" (allowed: {', '.join(candidates)})" if candidates else "")
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            context = error.get("ctx") or {}
            tags = str(context.get("expected_tags", "")).replace("'", "")
            path = (*path, "kind")
            given = context.get("tag")
            message = f"must be one of {tags}" + (f", not {given!r}" if given is not None else "")
        elif ": " in message and kind == "value_error" and (
                not path or message.partition(": ")[0].split(".")[0] in (fields_of(target) or {})):
            # A model-level check names its field first ("dimensions.0.id: duplicate dimension id").
            field, _, message = message.partition(": ")
            path = (*path, *field.split("."))
        translated.append((path, kind, message))
    result: list[ConfigError] = []
    for path, kind, message in translated:
        if kind == "missing" and path in suggested:
            continue
        origin = _origin(path, origins or {}) or where
        result.append(ConfigError(origin, ".".join(path) or None, message))
    return result or [ConfigError(where, None, "invalid")]


def _origin(path: tuple[str, ...], origins: Mapping[tuple[str, ...], str]) -> str | None:
    for length in range(len(path), 0, -1):
        if path[:length] in origins:
            return origins[path[:length]]
    return None


def _user_path(loc: tuple[int | str, ...], model: type[BaseModel]) -> tuple[tuple[str, ...], Any, Any]:
    """``loc`` without union tags, the model (or union) holding the last element, and the last element's own."""
    path: list[str] = []
    annotation: Any = model
    parent: Any = model
    for element in loc:
        tags = _union_tags(annotation)
        if isinstance(element, str) and element in tags:
            annotation = parent = tags[element]
            continue
        path.append(str(element))
        parent = annotation
        annotation = _child(annotation, element)
    return tuple(path), parent, annotation


def _union_tags(annotation: Any) -> dict[str, Any]:
    models = [m for m in members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(models) < 2:
        return {}
    tags: dict[str, Any] = {}
    for member in models:
        kind = member.model_fields.get("kind")
        for value in typing.get_args(kind.annotation) if kind is not None else ():
            tags[str(value)] = member
    return tags


def _child(annotation: Any, element: int | str) -> Any:
    for member in members(annotation):
        origin = typing.get_origin(member)
        if origin is dict:
            return typing.get_args(member)[1]
        if origin in (tuple, list):
            return typing.get_args(member)[0]
        if isinstance(member, type) and issubclass(member, BaseModel) and str(element) in member.model_fields:
            return member.model_fields[str(element)].annotation
    return None
