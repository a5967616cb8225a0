"""Read rubric files (YAML or JSON) into validated rubrics; every error names the file and the field."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from monitor.errors import RubricError
from monitor.rubrics.schema import Rubric

RUBRIC_SUFFIXES = (".yaml", ".yml", ".json")
RUBRIC_KINDS = ("weighted", "adaptive", "grounding", "hallucination", "safety", "final_response_match")
_ADAPTER: TypeAdapter[Rubric] = TypeAdapter(Rubric)


def content_version(data: Any) -> str:
    """The first 12 hex digits of the SHA-256 of the canonical JSON of a rubric's content."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricError(str(path), None, f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise RubricError(str(path), None, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    return _decode(text, path)


def _decode(text: str, path: Path) -> Any:
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise RubricError(str(path), None, f"not valid {path.suffix.lstrip('.').upper()}: {exc}") from exc


def load_rubric_text(text: str, path: Path) -> Rubric:
    """Validate rubric content already read from ``path`` (the registry parses exactly the bytes it hashed)."""
    return parse_rubric(_decode(text, path), str(path))


def parse_rubric(data: Any, where: str) -> Rubric:
    """Validate one rubric document. A bare list is a Foundry dimension list; the name defaults to the file stem."""
    if isinstance(data, list):
        data = {"kind": "weighted", "dimensions": data}
    if not isinstance(data, dict):
        raise RubricError(where, None, "a rubric file holds a mapping (or a Foundry list of dimensions)")
    if "dimensions" in data and "kind" not in data:
        data = {**data, "kind": "weighted"}
    data = {"name": Path(where).stem, **data}
    explicit = data.get("version")
    data = {**data, "version": content_version(data) if explicit is None else str(explicit)}
    try:
        rubric = _ADAPTER.validate_python(data)
    except ValidationError as exc:
        # A bad dimension also empties the list, which pydantic reports as a second, consequential error.
        errors = [e for e in exc.errors() if e["type"] != "too_short" or len(exc.errors()) == 1]
        first = errors[0]
        # Drop the union tag pydantic puts first ("weighted.dimensions.0.weight" -> "dimensions.0.weight").
        loc = [str(p) for p in first["loc"]]
        if loc and loc[0] == str(data.get("kind")):
            loc = loc[1:]
        message = first["msg"]
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = ["kind"]
            message = f"must be one of {', '.join(RUBRIC_KINDS)}" + (
                f", not {data.get('kind')!r}" if "kind" in data else " (or give 'dimensions' for a weighted rubric)")
        if message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
            if ": " in message and not loc:
                field, _, message = message.partition(": ")
                loc = [field]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RubricError(where, ".".join(loc) or None, message + more) from exc
    return rubric.model_copy(update={"version": versioned(rubric, data, explicit)})


def versioned(rubric: Rubric, data: Any, explicit: Any) -> str:
    """A rubric's version covers the built-in prompt it is judged with (``builtin_version``), so a release
    that changes that prompt starts new metric series instead of mixing verdicts of two prompts: the content
    hash of the file and the prompt, or the explicit version with the prompt's version appended
    (``3+general_quality_3f9a1c2b``)."""
    from monitor.evaluators.prompts import builtin_version

    prompt = builtin_version(rubric.kind, getattr(rubric, "metric", None))
    if explicit is None:
        return content_version({"rubric": data, "prompt": prompt})
    return f"{explicit}+{prompt}"


def load_rubric_file(path: Path) -> Rubric:
    return parse_rubric(_read(path), str(path))


def rubric_files(directory: Path) -> list[Path]:
    if directory.is_file():
        return [directory]
    if not directory.is_dir():
        raise RubricError(str(directory), None, "rubric directory does not exist")
    return sorted(p for p in directory.rglob("*") if p.suffix in RUBRIC_SUFFIXES and p.is_file())


def load_rubrics(directory: Path) -> list[Rubric]:
    """Load every rubric under ``directory``; the first bad file raises, and so do two rubrics with one name."""
    rubrics = [load_rubric_file(path) for path in rubric_files(directory)]
    check_unique(rubrics, (str(p) for p in rubric_files(directory)))
    return rubrics


def check_unique(rubrics: list[Rubric], wheres: Iterable[str]) -> None:
    seen: dict[str, str] = {}
    for rubric, where in zip(rubrics, wheres, strict=True):
        if rubric.name in seen:
            raise RubricError(where, "name", f"rubric name {rubric.name!r} is also used by {seen[rubric.name]}")
        seen[rubric.name] = where
