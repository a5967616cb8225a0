"""Nested values spread over flat span attributes: ``prefix.0.message.role``, ``prefix.0.message.tool_calls.1.x``.

Span attributes cannot nest, so conventions older than structured values write each field of each list item as
its own attribute, indexed. ``unflatten`` rebuilds the items (in index order) as nested dicts whose numbered
levels are lists again, so each convention maps them as it would map JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_ITEMS = 10_000
"""Indexes past this are not list positions a producer wrote, but garbage: they are ignored, never allocated."""


def unflatten(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The items under ``prefix.N.``, in index order (gaps closed). Numbered levels below become lists."""
    head = prefix + "."
    tree: dict[str, Any] = {}
    for key, value in attributes.items():
        if not key.startswith(head):
            continue
        path = key[len(head):].split(".")
        node = tree
        for step in path[:-1]:
            child = node.get(step)
            if not isinstance(child, dict):
                child = node[step] = {}
            node = child
        node.setdefault(path[-1], value)
    items = _as_list(tree)
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _as_list(node: Any) -> Any:
    """A dict whose keys are all small indexes as a list in index order; recursively."""
    if not isinstance(node, dict):
        return node
    converted = {key: _as_list(value) for key, value in node.items()}
    if converted and all(key.isdigit() and int(key) < MAX_ITEMS for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def has_indexed(attributes: Mapping[str, Any], prefix: str) -> bool:
    """Whether any attribute is an item field under ``prefix.N.``."""
    head = prefix + "."
    return any(key.startswith(head) and key[len(head):len(head) + 1].isdigit() for key in attributes)


def openai_content_parts(content: Any) -> list[dict[str, Any]]:
    """OpenAI chat ``content`` (a string, or a list of ``{type: text, text}`` parts, possibly as JSON text) as
    GenAI parts; empty text gives none."""
    if content is None:
        return []
    if isinstance(content, str):
        stripped = content.lstrip()
        if stripped.startswith("[{"):
            try:
                decoded = json.loads(content)
            except (ValueError, RecursionError):
                decoded = None
            if isinstance(decoded, list):
                return openai_content_parts(decoded)
        return [{"type": "text", "content": content}] if content else []
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for item in content:
            if isinstance(item, dict) and item.get("type", "text") == "text":
                text = item.get("text", item.get("content"))
                if isinstance(text, str) and text:
                    parts.append({"type": "text", "content": text})
            elif isinstance(item, dict):
                kind = item.get("type")
                parts.append({**{k: v for k, v in item.items() if k != "type"},
                              "type": kind if isinstance(kind, str) else "generic"})
            elif isinstance(item, str) and item:
                parts.append({"type": "text", "content": item})
        return parts
    return [{"type": "text", "content": str(content)}]


def tool_call_part(identifier: Any, name: Any, arguments: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call", "name": name if isinstance(name, str) else ""}
    if isinstance(identifier, str) and identifier:
        part["id"] = identifier
    if arguments is not None:
        part["arguments"] = arguments
    return part


def tool_result_part(identifier: Any, response: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call_response", "response": response}
    if isinstance(identifier, str) and identifier:
        part["id"] = identifier
    return part


def function_definition(name: str, description: Any, parameters: Any, kind: str = "function") -> dict[str, Any]:
    """A tool definition in the GenAI shape; ``description`` and ``parameters`` only when a string and an object."""
    definition: dict[str, Any] = {"type": kind, "name": name}
    if isinstance(description, str):
        definition["description"] = description
    if isinstance(parameters, dict):
        definition["parameters"] = parameters
    return definition
