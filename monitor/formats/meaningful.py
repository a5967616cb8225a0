"""Values that mean nothing are refused, in settings and in the SLO blocks of rubric files alike: a boolean where a
number goes, an empty string where empty means nothing, an empty name in a list of names."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator


def _members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (Union, UnionType):
        return tuple(m for a in get_args(annotation) for m in _members(a))
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    return (annotation,)


def _meaningless(value: Any, members: tuple[Any, ...], empty_allowed: bool) -> str | None:
    if isinstance(value, bool) and (int in members or float in members) and bool not in members:
        return f"a number is expected, not a boolean ({str(value).lower()})"
    textual = any(m in (str, Path, SecretStr) for m in members)
    if textual and not empty_allowed and isinstance(value, str | SecretStr):
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not text.strip():
            return "is empty; leave the setting out instead"
    names = any(get_origin(m) is tuple and get_args(m)[:1] == (str,) for m in members)
    if names and isinstance(value, list | tuple) and any(isinstance(v, str) and not v.strip() for v in value):
        return "holds an empty name"
    return None


class MeaningfulModel(BaseModel):
    """A section of settings (or of a rubric's SLO): no unknown key, frozen, documented by its attribute
    docstrings, and no value that means nothing."""

    # inf and nan are refused everywhere: a nan timeout or interval compares false with everything.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    _EMPTY_ALLOWED: ClassVar[frozenset[str]] = frozenset()
    """String settings of this section whose empty value means something (every other one refuses ``""``)."""

    @model_validator(mode="before")
    @classmethod
    def _meaningful(cls, data: Any) -> Any:
        """Refuse what pydantic's lax mode would accept but means nothing: a boolean where a number goes
        (``interval_seconds: true`` would be one second), an empty string for a name, key, URL or path (an empty
        path is the working directory), an empty string in a list of names. The message names the field first,
        which is how the error names the setting."""
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            info = cls.model_fields.get(name) if isinstance(name, str) else None
            if info is None:
                continue
            problem = _meaningless(value, _members(info.annotation), name in cls._EMPTY_ALLOWED)
            if problem:
                raise ValueError(f"{name}: {problem}")
        return data
