"""Read rubric files (YAML or JSON) into validated rubrics; every error names the file and the field."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from monitor.errors import RubricError
from monitor.formats.documents import DocumentError, load_json, load_yaml, read_document_text
from monitor.formats.validation_errors import translate_errors
from monitor.rubrics.base import PromptVersion
from monitor.rubrics.schema import Rubric

RUBRIC_SUFFIXES = (".yaml", ".yml", ".json")
RUBRIC_KINDS = ("weighted", "adaptive", "grounding", "hallucination", "safety", "final_response_match", "prompt",
                "code", "endpoint", "gecko_text2image", "gecko_text2video")
FOUNDRY_TYPES = {"rubric": "weighted", "prompt": "prompt", "code": "code", "endpoint": "endpoint"}
"""Foundry's evaluator definition types and the kind each is read as."""
_ADAPTER: TypeAdapter[Rubric] = TypeAdapter(Rubric)


def content_version(data: Any) -> str:
    """The first 12 hex digits of the SHA-256 of the canonical JSON of a rubric's content."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def scored_content(data: Any) -> Any:
    """The content that decides scores: without ``slo`` (how the rubric is watched), so that changing an objective
    does not start a new version, and with it new series and a new budget."""
    return {k: v for k, v in data.items() if k != "slo"} if isinstance(data, dict) else data


def _read(path: Path) -> Any:
    try:
        text = read_document_text(path)
    except OSError as exc:
        raise RubricError(str(path), None, f"cannot read: {exc.strerror}") from exc
    except DocumentError as exc:
        raise RubricError(str(path), None, str(exc)) from None
    return _decode(text, path)


def _decode(text: str, path: Path) -> Any:
    # Bounded readers: aliases, depth, size and duplicate keys are checked before the content is expanded.
    try:
        return load_json(text) if path.suffix == ".json" else load_yaml(text)
    except DocumentError as exc:
        raise RubricError(str(path), None, str(exc)) from None


def load_rubric_text(text: str, path: Path, versions: PromptVersion) -> Rubric:
    """Validate rubric content already read from ``path`` (the registry parses exactly the bytes it hashed)."""
    return parse_rubric(_decode(text, path), str(path), versions)


def parse_rubric(data: Any, where: str, versions: PromptVersion) -> Rubric:
    """Validate one rubric document. A bare list is a Foundry dimension list; Foundry's evaluator envelope
    (``name``, ``categories``, ``definition: {type: rubric, ...}``) is flattened; the name defaults to the file
    stem."""
    if isinstance(data, list):
        data = {"kind": "weighted", "dimensions": data}
    if not isinstance(data, dict):
        raise RubricError(where, None, "a rubric file holds a mapping (or a Foundry list of dimensions)")
    from_definition: set[str] = set()
    if "definition" in data:
        data, from_definition = _flatten_envelope(data, where)
    if "dimensions" in data and "kind" not in data:
        data = {**data, "kind": "weighted"}
    if data.get("type") in ("prompt", "code", "endpoint") and "kind" not in data:
        data = {**{k: v for k, v in data.items() if k != "type"}, "kind": data["type"]}
    data = {"name": Path(where).stem, **data}
    explicit = data.get("version")
    data = {**data, "version": content_version(scored_content(data)) if explicit is None else str(explicit)}
    try:
        rubric = _ADAPTER.validate_python(data)
    except ValidationError as exc:
        # A bad dimension also empties the list, which pydantic reports as a second, consequential error.
        details = [e for e in exc.errors() if e["type"] != "too_short" or len(exc.errors()) == 1]
        errors = translate_errors(details, Rubric, where)  # type: ignore[arg-type]
        first = details[0]
        if first["type"] == "union_tag_not_found":
            message = f"must be one of {', '.join(RUBRIC_KINDS)} (or give 'dimensions' for a weighted rubric)"
            raise RubricError(where, "kind", message) from None
        rubric_errors = [RubricError(e.where, _in_definition(e.field, from_definition), e.message) for e in errors]
        raise RubricError.collect(rubric_errors) from None
    rubric = _read_code_file(rubric, where)
    content = data if rubric.kind != "code" else {**data, "code_text": getattr(rubric, "code_text", None)}
    return rubric.model_copy(update={"version": versioned(rubric, content, explicit, versions)})


def _read_code_file(rubric: Rubric, where: str) -> Rubric:
    """A code evaluator's ``code_file`` is read now (relative to the rubric file): its content is part of the
    rubric's version, so an edited grader starts new metric series."""
    code_file = getattr(rubric, "code_file", None)
    if code_file is None:
        return rubric
    path = code_file if code_file.is_absolute() else Path(where).parent / code_file
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricError(where, "code_file", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RubricError(where, "code_file", f"{path} is not UTF-8 text") from None
    if not text.strip():
        raise RubricError(where, "code_file", f"{path} is empty")
    return rubric.model_copy(update={"code_text": text, "code_file": path})


def versioned(rubric: Rubric, data: Any, explicit: Any, versions: PromptVersion) -> str:
    """A rubric's version covers the built-in prompt it is judged with (``versions``, which the evaluators
    provide), so a release
    that changes that prompt starts new metric series instead of mixing verdicts of two prompts: the content
    hash of the file and the prompt, or the explicit version with the prompt's version appended
    (``3+general_quality_3f9a1c2b``)."""
    prompt = versions(rubric.kind, getattr(rubric, "metric", None))
    if explicit is None:
        return content_version({"rubric": scored_content(data), "prompt": prompt})
    return f"{explicit}+{prompt}"


def _in_definition(field: str | None, from_definition: set[str]) -> str | None:
    """The field as the user wrote it: keys that came from Foundry's ``definition`` are named under it."""
    if field and field.split(".")[0] in from_definition:
        return f"definition.{field}"
    return field


EVALUATOR_CATEGORIES = ("quality", "safety", "agents")
_ENVELOPE_ONLY = ("categories", "display_name", "evaluator_type", "definition")


def _flatten_envelope(data: dict[str, Any], where: str) -> tuple[dict[str, Any], set[str]]:
    """Foundry's ``EvaluatorVersion`` body as one rubric mapping, and the keys that came from ``definition``."""
    definition = data["definition"]
    if not isinstance(definition, dict):
        raise RubricError(where, "definition", "must be a mapping (Foundry's evaluator definition)")
    kind = FOUNDRY_TYPES.get(definition.get("type", "rubric"))
    if kind is None:
        raise RubricError(where, "definition.type", f"must be one of {', '.join(FOUNDRY_TYPES)}, not "
                                                    f"{definition.get('type')!r}")
    categories = data.get("categories", ["quality"])
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise RubricError(where, "categories", "must be a list such as [quality] or [agents, safety]")
    unknown = [c for c in categories if c not in EVALUATOR_CATEGORIES]
    if unknown:
        raise RubricError(where, "categories", f"unknown category {unknown[0]!r}; one of "
                                               f"{', '.join(EVALUATOR_CATEGORIES)}")
    if data.get("evaluator_type", "custom") != "custom":
        raise RubricError(where, "evaluator_type", "an evaluator of ours is 'custom' (builtin ones are Foundry's)")
    inner = {k: v for k, v in definition.items() if k != "type"}
    outer = {k: v for k, v in data.items() if k not in _ENVELOPE_ONLY}
    clash = sorted(set(inner) & set(outer))
    if clash:
        raise RubricError(where, f"definition.{clash[0]}", "given both in the envelope and in its definition")
    flat = {**outer, **inner, "kind": kind}
    if kind == "weighted":
        flat["category"] = "safety" if "safety" in categories else "quality"
    if "display_name" in data:
        flat["display_name"] = data["display_name"]
    return flat, set(inner)


def load_rubric_file(path: Path, versions: PromptVersion) -> Rubric:
    return parse_rubric(_read(path), str(path), versions)


def rubric_files(directory: Path) -> list[Path]:
    if directory.is_file():
        return [directory]
    if not directory.is_dir():
        raise RubricError(str(directory), None, "rubric directory does not exist")
    # Hidden entries are skipped: editors' temporary files, and the ``..data`` / ``..<timestamp>`` directories of a
    # mounted Kubernetes ConfigMap, whose files are also reachable through its top-level symlinks (reading both
    # would see every rubric twice, and the second copy as a name clash).
    return sorted(
        p for p in directory.rglob("*")
        if p.suffix in RUBRIC_SUFFIXES and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


def check_unique(rubrics: list[Rubric], wheres: Iterable[str]) -> None:
    seen: dict[str, str] = {}
    for rubric, where in zip(rubrics, wheres, strict=True):
        if rubric.name in seen:
            raise RubricError(where, "name", f"rubric name {rubric.name!r} is also used by {seen[rubric.name]}")
        seen[rubric.name] = where
