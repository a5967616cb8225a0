"""Reading YAML and JSON documents that people write (settings, rubrics), with every bound checked first.

A document is refused, with the line at fault when known, before anything expands or walks it:

- a file larger than ``MAX_DOCUMENT_BYTES``, or not UTF-8;
- nesting deeper than ``MAX_DEPTH`` (a 10,000-deep list would otherwise exhaust Python's recursion);
- YAML aliases that expand to more than ``MAX_NODES`` values (an alias bomb of a few hundred bytes expands to
  gigabytes once constructed, hashed or validated), or an alias that contains itself;
- a key given twice in one mapping (YAML and JSON parsers silently keep the last one).

The bounds are checked on the composed YAML node graph, where an alias is one shared node: nothing is expanded
until the document is known to be small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from monitor.formats.json_text import replace_lone_surrogates_in

MAX_DOCUMENT_BYTES = 1 << 20
"""1 MiB: far above any real settings or rubric file."""
MAX_DEPTH = 64
MAX_NODES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class DocumentError(ValueError):
    """A document that breaks a bound or is not valid YAML/JSON; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


def read_document_text(path: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of ``path``, refused past ``max_bytes`` without reading further. ``OSError`` passes."""
    with path.open("rb") as handle:
        raw = handle.read(max_bytes + 1)
    return decode_document(raw, max_bytes)


def decode_document(raw: bytes, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    if len(raw) > max_bytes:
        raise DocumentError(f"larger than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DocumentError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", line) from None


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with the bounds above; errors never quote the offending line (it may hold a secret)."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        loader = _BoundedLoader(text)  # checks the characters first
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise DocumentError(f"not valid YAML: character #x{exc.character:x} is not allowed", line) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return replace_lone_surrogates_in(loader.construct_document(node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # Only the problem, never the snippet: YAML quotes the line, and a key on that line would be printed.
        raise DocumentError(f"not valid YAML: {exc.problem or exc.context}", mark.line + 1 if mark else None) \
            from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML: {type(exc).__name__}") from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def load_json(text: str) -> Any:
    """``json.loads`` with the bounds above (depth, size, duplicate keys)."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        value = json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"not valid JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # a duplicate key (from the hook) or an integer past Python's digit limit
        raise DocumentError(str(exc)) from None
    check_depth(value)
    # JSON may spell lone surrogates ("\ud800"); they would fail every later UTF-8 encoding (hashing, storing).
    return replace_lone_surrogates_in(value)


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise ``DocumentError`` when lists and dicts in ``value`` nest deeper than ``max_depth``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:  # iterative: the value may be deeper than Python's recursion limit
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                raise DocumentError(f"nested deeper than {max_depth} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} is given twice in one object")
        result[key] = value
    return result


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader that refuses to compose nodes deeper than ``MAX_DEPTH`` (composition is recursive)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise DocumentError(f"nested deeper than {MAX_DEPTH} levels", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_graph(root: Node) -> None:
    """Expanded size and depth of the node graph (aliases counted as often as they are used), cycles, and
    duplicate keys; each shared node is measured once, so an alias bomb costs no more than its text."""
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded values, expanded height)
    on_path: set[int] = set()

    def measure(node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in measured:
            size, height = measured[key]
            if depth + height > MAX_DEPTH:
                raise DocumentError(f"aliases nest deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
            return size, height
        if key in on_path:
            raise DocumentError("an alias refers to a value that contains it", node.start_mark.line + 1)
        if depth > MAX_DEPTH:
            raise DocumentError(f"nested deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
        on_path.add(key)
        size, height = 1, 0
        if isinstance(node, SequenceNode):
            children: list[Node] = list(node.value)
        elif isinstance(node, MappingNode):
            _check_unique_keys(node)
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            child_size, child_height = measure(child, depth + 1)
            size += child_size
            height = max(height, child_height + 1)
            if size > MAX_NODES:
                raise DocumentError(f"expands to more than {MAX_NODES} values (YAML aliases?)",
                                    node.start_mark.line + 1)
        on_path.discard(key)
        measured[key] = (size, height)
        return size, height

    measure(root, 0)


def _check_unique_keys(node: MappingNode) -> None:
    seen: set[tuple[str, str]] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        key = (key_node.tag, key_node.value)
        if key in seen:
            raise DocumentError(f"key {key_node.value!r} is given twice in one mapping", key_node.start_mark.line + 1)
        seen.add(key)
