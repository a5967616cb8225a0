"""How settings are read: the YAML file, the secrets directory, the environment; errors in the user's names.

Priority, lowest first: defaults, the YAML file, files in ``RUBRIC_MONITOR_SECRETS_DIR``, environment variables.

- A variable or secret file ``RUBRIC_MONITOR_<SECTION>__<FIELD>`` (any case; ``__`` between levels) sets
  ``section.field``. Kubernetes mounts each key of a secret as such a file (``RUBRIC_MONITOR_JUDGE__API_KEY``).
  A nested name that matches no setting is refused with a suggestion; so is every file of the secrets directory
  whose name matches no setting (hidden entries, such as Kubernetes' ``..data``, are skipped). A variable without
  ``__`` that is not a setting (``RUBRIC_MONITOR_CONFIG``, a token named by ``token_env``) is left alone unless
  it is close to a setting's name.
- A list of strings may be given as JSON or as ``a,b,c``; other structured settings take JSON, and anything else
  is refused naming the setting.
- ``source`` without ``kind`` is ``otlp_file`` (the default), so ``RUBRIC_MONITOR_SOURCE__PATH`` alone works.
- Errors name the setting as the user wrote it (``source.pathh``, never pydantic's ``source.otlp_file.pathh``),
  and a misspelled field names the misspelling with the closest valid name.
"""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from monitor.errors import ConfigError
from monitor.formats.documents import DocumentError, load_json, load_yaml, read_document_text
from monitor.formats.validation_errors import fields_of, members, translate_errors
from monitor.redaction import remember_secret
from monitor.settings.schema import ENV_PREFIX, Settings

RESERVED = ("CONFIG", "SECRETS_DIR")
"""``RUBRIC_MONITOR_`` variables that locate settings rather than being settings."""
SETTINGS_WHERE = "settings"
SDK_KEY_VARIABLES = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``path`` (or ``RUBRIC_MONITOR_CONFIG``), the secrets directory and the environment;
    every error names the file (or variable) and the setting."""
    return load(path, os.environ if environ is None else environ)


def load(path: Path | None, environ: Mapping[str, str]) -> Settings:
    if path is None and environ.get(f"{ENV_PREFIX}CONFIG"):
        path = Path(environ[f"{ENV_PREFIX}CONFIG"])
    for name in SDK_KEY_VARIABLES:  # the SDKs' own variables are secrets we use too
        remember_secret(environ.get(name))
    where = str(path) if path else SETTINGS_WHERE
    errors: list[ConfigError] = []
    origins: dict[tuple[str, ...], str] = {}
    data = read_settings_file(path) if path is not None else {}
    overrides: dict[str, Any] = {}
    secrets_dir = environ.get(f"{ENV_PREFIX}SECRETS_DIR")
    if secrets_dir:
        for name, value, origin in _secret_files(Path(secrets_dir), errors):
            _assign(overrides, origins, name, value, origin, strict=True, errors=errors)
    for name in sorted(environ):
        if name.upper().startswith(ENV_PREFIX) and name[len(ENV_PREFIX):].upper() not in RESERVED:
            _assign(overrides, origins, name, environ[name], f"environment variable {name}", strict=False,
                    errors=errors)
    if errors:
        raise ConfigError.collect(errors)
    merged = _merge(data, overrides)
    source = merged.get("source")
    if isinstance(source, dict) and "kind" not in source:
        merged["source"] = {"kind": "otlp_file", **source}
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError.collect(translate_errors(exc.errors(), Settings, where, origins)) from None


def read_settings_file(path: Path) -> dict[str, Any]:
    where = str(path)
    try:
        loaded = load_yaml(read_document_text(path))
    except OSError as exc:
        raise ConfigError(where, None, f"cannot read: {exc.strerror}") from None
    except DocumentError as exc:
        raise ConfigError(where, None, str(exc)) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(where, None, "the top level must be a mapping")
    return loaded or {}


# ---- names: secrets directory and environment ------------------------------------------------------------


def _secret_files(directory: Path, errors: list[ConfigError]) -> list[tuple[str, str, str]]:
    where = str(directory)
    if not directory.exists():
        errors.append(ConfigError(where, None, f"{ENV_PREFIX}SECRETS_DIR: the secrets directory does not exist"))
        return []
    if not directory.is_dir():
        errors.append(ConfigError(where, None, f"{ENV_PREFIX}SECRETS_DIR: is a file, not a directory"))
        return []
    found: list[tuple[str, str, str]] = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.is_dir():
            continue  # Kubernetes keeps its own ..data links beside the keys
        try:
            value = read_document_text(entry, 64 * 1024).strip()
        except (OSError, DocumentError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            errors.append(ConfigError(str(entry), None, f"cannot read: {reason}"))
            continue
        found.append((entry.name, value, str(entry)))
    return found


def _assign(target: dict[str, Any], origins: dict[tuple[str, ...], str], name: str, value: str, origin: str,
            *, strict: bool, errors: list[ConfigError]) -> None:
    """Put the setting ``name`` (``RUBRIC_MONITOR_A__B``) into ``target``; refuse a name that matches none."""
    if not name.upper().startswith(ENV_PREFIX):
        errors.append(ConfigError(origin, None, f"{name!r} matches no setting: names are "
                                                f"{ENV_PREFIX}<SECTION>__<FIELD>, e.g. {ENV_PREFIX}JUDGE__API_KEY"))
        return
    segments = name[len(ENV_PREFIX):].lower().split("__")
    resolved = _resolve(segments)
    if isinstance(resolved, str):
        close = difflib.get_close_matches(segments[0], list(Settings.model_fields), n=1, cutoff=0.8)
        if len(segments) == 1 and not strict and not close:
            return  # a variable of ours that is not a setting (a token named by token_env)
        errors.append(ConfigError(origin, None, resolved))
        return
    annotation = resolved
    dotted = ".".join(segments)
    try:
        converted = convert_text(annotation, value)
    except ValueError as exc:
        errors.append(ConfigError(origin, dotted, str(exc)))
        return
    node = target
    for key in segments[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[segments[-1]] = converted
    origins[tuple(segments)] = origin


def _resolve(segments: list[str]) -> Any:
    """The annotation of the setting at ``segments``, or a message naming the first segment that is wrong."""
    annotation: Any = Settings
    for depth, segment in enumerate(segments):
        path = ".".join(segments[: depth + 1])
        if typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]  # a free key (judge.prices.<model>)
            continue
        fields = fields_of(annotation)
        if fields is None:
            return f"{path!r} matches no setting: {'.'.join(segments[:depth])} has no fields"
        if segment not in fields:
            return f"{path!r} matches no setting{_suggest(segment, fields)}"
        annotation = fields[segment]
    return annotation


def _suggest(name: str, candidates: Mapping[str, Any] | list[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def convert_text(annotation: Any, text: str) -> Any:
    """A setting's value from the text of a variable or file: scalars as they are (pydantic converts them),
    lists of strings as JSON or ``a,b,c``, other structures as JSON."""
    kinds = [m for m in members(annotation) if m is not type(None)]
    if text == "" and len(kinds) < len(members(annotation)):
        return None  # an empty variable unsets an optional setting
    if all(_is_string_list(m) for m in kinds) and kinds:
        if text.lstrip().startswith("["):
            return _json(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    if any(_is_structured(m) for m in kinds):
        return _json(text)
    return text


def _is_string_list(annotation: Any) -> bool:
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) in (tuple, list) and bool(args) and args[0] is str


def _is_structured(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (tuple, list, dict) or (
        isinstance(annotation, type) and issubclass(annotation, BaseModel))


def _json(text: str) -> Any:
    try:
        return load_json(text)
    except DocumentError as exc:
        raise ValueError(f"expects JSON (or a,b,c for a list of strings); {exc}") from None


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
